"""Agents for the runtime benchmarks: they only pass a counter on, so what is timed is the runtime.

They keep no state and make no recorded calls: every hop is one message
published, stored, delivered and handled, nothing more. The capacity benchmark's
system (`Capacity`) is the exception: its agents do nothing but wait on model calls.
"""

from __future__ import annotations

from typing import Any, ClassVar

from faultline.core import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    Grade,
    InputRecord,
    LlmRequest,
    Note,
    Start,
    System,
)

RING_SIZE = 4


def _data(msg: Envelope) -> dict[str, Any]:
    body = msg.body
    if not isinstance(body, Start | Note):
        raise TypeError(f"bench agents take start or note messages, not {msg.kind}")
    return body.data


class Ping(Agent):
    """Starts and ends a ping-pong episode of `rounds` round trips (from the Start message)."""

    name = "bench_ping"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        data = _data(msg)
        n, rounds = int(data.get("n", 0)), int(data["rounds"])
        if n >= rounds:
            ctx.emit(EpisodeCompleted(outcome="success", reward=1.0, turns=n))
            return
        ctx.send(Pong.name, Note(data={"n": n + 1, "rounds": rounds}))


class Pong(Agent):
    name = "bench_pong"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        ctx.send(Ping.name, Note(data=_data(msg)))


class _RingMember(Agent):
    """Passes a token to the next member; the member holding it after `hops` hops ends the episode."""

    position: ClassVar[int]
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        data = _data(msg)
        hop, hops = int(data.get("hop", 0)), int(data["hops"])
        if hop >= hops:
            ctx.emit(EpisodeCompleted(outcome="success", reward=1.0, turns=hop))
            return
        ctx.send(ring_member(self.position + 1), Note(data={"hop": hop + 1, "hops": hops}))


def ring_member(position: int) -> str:
    return f"bench_ring{position % RING_SIZE}"


class Ring0(_RingMember):
    name = ring_member(0)
    position = 0


class Ring1(_RingMember):
    name = ring_member(1)
    position = 1


class Ring2(_RingMember):
    name = ring_member(2)
    position = 2


class Ring3(_RingMember):
    name = ring_member(3)
    position = 3


# -- the capacity benchmark's system: two agents that wait on a (slow, emulated) model ---------


class Drafter(Agent):
    """Asks the model `calls` times in a row (from the input record), then hands the draft to the reviewer."""

    name = "bench_drafter"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        data = _data(msg)
        text = await _ask(ctx, self.name, int(data["calls"]), str(data.get("id", "")))
        ctx.send(Reviewer.name, Note(text=text, data={"calls": data["calls"]}))


class Reviewer(Agent):
    """Asks the model `calls` times about the draft, then finishes the episode with the last answer."""

    name = "bench_reviewer"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        data = _data(msg)
        assert isinstance(msg.body, Note)
        ctx.finish(await _ask(ctx, self.name, int(data["calls"]), msg.body.text))


async def _ask(ctx: Context, role: str, calls: int, text: str) -> str:
    for n in range(calls):
        reply = await ctx.llm(LlmRequest(role=role, messages=[ChatMessage(role="user", content=f"{n}: {text}")]))
        text = reply.content[-200:]
    return text


class Capacity(System):
    """Draft and review: 2 x `calls` model calls per episode, three messages handled, one finish."""

    name = "bench-capacity"
    agents = (Drafter, Reviewer)
    entry = Drafter.name
    finishers = (Reviewer.name,)
    needs = ("calls",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)
