"""The messages the runtime writes into an episode as its runner: its start, the first message to each agent,
and its completion when no agent completed it (a timeout, a handler that raised, an episode or a fork that stalled).

Their ids follow from the episode's (or the error's), so two runners that write one of them publish one message,
and a fork or a replay that writes it again writes the same.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from faultline.core._messages import (
    RUNNER,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    MessageBody,
    derive_id,
)


def run_prefix(run: str) -> str:
    """How the ids of run `run`'s episodes begin (`faultline run --run-id`); a resumed run's retries' too."""
    return f"{run}-"


def in_run(episode: str, recorded: str, run: str) -> bool:
    """Whether `episode`, whose start recorded run `recorded` ("" for none), is one of run `run`'s episodes.

    By the recorded run where there is one, so run `c1-1` is not also every episode of a run `c1-1-x`; by the
    id's prefix (`run_prefix`) where there is none: starts journaled before runs were recorded.
    """
    return recorded == run if recorded else episode.startswith(run_prefix(run))


MAX_CAUSE_CHARS = 2000
"""The longest cause the runner writes into a completion of its own."""


def started_envelope(episode: str, started: EpisodeStarted) -> Envelope:
    """The episode's `episode started` event: the first row of its journal."""
    return Envelope(id=derive_id(episode, 0, "s"), episode=episode, sender=RUNNER, body=started, ts=time.time())


def start_envelope(episode: str, index: int, to: str, body: MessageBody) -> Envelope:
    """The runner's `index`-th first message of the episode (from 0), to agent `to`."""
    return Envelope(
        id=derive_id(episode, index + 1, "s"), episode=episode, sender=RUNNER, recipient=to, body=body, ts=time.time()
    )


def runner_completion(
    episode: str, outcome: Literal["failure", "timeout"], cause: str, details: dict[str, Any] | None = None
) -> Envelope:
    """The runner's completion of an episode no agent completed: past its timeout, or one that stalled (a fork's,
    a live one's, with what it found in `details`). One id for all of them: of a stall and a timeout found at once,
    the stream keeps the first."""
    return Envelope(
        id=derive_id(episode, 0, "t"),
        episode=episode,
        sender=RUNNER,
        body=EpisodeCompleted(outcome=outcome, cause=cause_text(cause), details=details or {}),
        ts=time.time(),
    )


def cause_text(text: str) -> str:
    """`text` as the cause of a completion the runner writes: one line of at most MAX_CAUSE_CHARS. What it quotes
    (an error's message, an episode's last message) is anyone's to write, and a completion the runner could not
    publish, past NATS's largest message, would end the run."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= MAX_CAUSE_CHARS else line[: MAX_CAUSE_CHARS - 1] + "…"


def error_completion(error: Envelope) -> Envelope:
    """The runner's completion of the episode an `ErrorRaised` failed, with the error as its cause.

    Its id follows from the error's, so two runners that both see the error publish one message.
    """
    assert isinstance(error.body, ErrorRaised)
    body = error.body
    return Envelope(
        id=derive_id(error.id, 0, "c"),
        episode=error.episode,
        sender=RUNNER,
        body=EpisodeCompleted(outcome="error", cause=cause_text(f"{body.error_type} in {body.agent}: {body.message}")),
        causation=error.id,
        hops=error.hops + 1,
        ts=time.time(),
    )
