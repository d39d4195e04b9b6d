"""The scorer: grades a system's episodes and completes them, the one agent of a user's system that may."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from faultline.core import (
    RUNNER,
    SCORER,
    Agent,
    Context,
    Envelope,
    EpisodeCompleted,
    Finished,
    Grade,
    InputRecord,
    Start,
    SystemRef,
    load_system,
)

log = logging.getLogger(__name__)


class ScorerStart(msgspec.Struct, frozen=True, kw_only=True):
    """The `Start.data` the runner sends the scorer: which system, and the episode's input record."""

    system: str
    input: InputRecord


class Scorer(Agent):
    """Takes the first `Finished` of one of the system's finishers, scores it, completes the episode.

    A `Finished` from an agent that is not a finisher is logged and ignored (the episode goes on), and
    so is a Start that is not the runner's first (a broadcast or a storm of the entry's Start); a
    scorer that raises completes the episode as `error`, naming the exception.
    """

    name = SCORER
    completes = True

    def __init__(self) -> None:
        self.start: ScorerStart | None = None
        self.ref: SystemRef | None = None
        self.started_at = 0.0
        self.done = False

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start) and msg.sender == RUNNER and self.start is None:
            self.start = msgspec.convert(body.data, ScorerStart)
            self.ref = load_system(self.start.system)
            self.started_at = await ctx.now()
        elif isinstance(body, Finished) and self.start is not None and self.ref is not None and not self.done:
            if msg.sender not in self.ref.system.finishers:
                log.warning("episode %s: ignored Finished from %s, which is not a finisher", msg.episode, msg.sender)
                return
            self.done = True
            ctx.emit(await self._completion(body.output, ctx))

    async def _completion(self, output: Any, ctx: Context) -> EpisodeCompleted:
        assert self.start is not None and self.ref is not None
        latency_s = max(0.0, await ctx.now() - self.started_at)
        details = {"system": self.ref.system.name, "input": self.start.input.id}
        try:
            grade = self.ref.system.score(self.start.input, output)
            if not isinstance(grade, Grade):
                raise TypeError(f"score returned a {type(grade).__name__}, not a Grade")
        except Exception as exc:  # noqa: BLE001 - a scorer's bug ends its episode, never the worker
            cause = f"the scorer raised {type(exc).__name__}: {exc}"
            return EpisodeCompleted(outcome="error", cause=cause, latency_s=latency_s, details=details)
        cause = "" if grade.success else (grade.cause or f"reward {grade.reward:g} is below 1")
        return EpisodeCompleted(
            outcome="success" if grade.success else "failure",
            reward=grade.reward,
            cause=cause,
            latency_s=latency_s,
            details=details,
        )
