"""Interceptors: the hook faults and defenses hang on.

An interceptor sees every message a worker publishes (`outbound`) and every
message before a handler sees it (`inbound`). It returns the messages that go
on: the same one (pass), another (change), none (drop) or several (multiply).
Side events it wants journaled (a fault applied, a defense fired) go to
`message.events`. Each hook takes one input object, so fields can be added
later without breaking interceptors already written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

import msgspec

from faultline.core._messages import Envelope


class Outbound(msgspec.Struct):
    """A message a worker publishes, on its way through the outbound hooks.

    A Struct rather than a dataclass: one is made per message and hook, and a Struct is made in C."""

    envelope: Envelope
    events: list[Envelope] = msgspec.field(default_factory=list)


class Inbound(msgspec.Struct):
    """A delivered message on its way to `agent`'s handler, through the inbound hooks."""

    envelope: Envelope
    agent: str
    stream_seq: int = 0
    events: list[Envelope] = msgspec.field(default_factory=list)


class Interceptor:
    """Passes everything through; subclasses override the hooks they need."""

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        return (message.envelope,)

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        return (message.envelope,)

    def forget(self, episode: str) -> None:
        """Drop any state kept for `episode`; the worker calls it once the episode is over."""


class InterceptorChain:
    """Runs interceptors in order; each one sees what the one before let through.

    Only hooks an interceptor overrides run: the inherited pass-through ones are left out when
    the chain is built, so an interceptor that only watches inbound costs nothing on the way out."""

    def __init__(self, interceptors: Iterable[Interceptor] = ()) -> None:
        self._interceptors: list[Interceptor] = list(interceptors)
        self._outbound: tuple[Callable[[Outbound], Awaitable[Sequence[Envelope]]], ...] = ()
        self._inbound: tuple[Callable[[Inbound], Awaitable[Sequence[Envelope]]], ...] = ()
        self._compose()

    def __len__(self) -> int:
        return len(self._interceptors)

    @property
    def rewrites_outbound(self) -> bool:
        """Whether any interceptor looks at outbound messages (publishers skip the chain when none does)."""
        return bool(self._outbound)

    def add(self, interceptor: Interceptor) -> None:
        self._interceptors.append(interceptor)
        self._compose()

    def remove(self, interceptor: Interceptor) -> None:
        self._interceptors.remove(interceptor)
        self._compose()

    def forget(self, episode: str) -> None:
        for interceptor in self._interceptors:
            interceptor.forget(episode)

    def _compose(self) -> None:
        """The bound hooks each message goes through, found once instead of per message."""
        interceptors = self._interceptors
        self._outbound = tuple(i.outbound for i in interceptors if type(i).outbound is not Interceptor.outbound)
        self._inbound = tuple(i.inbound for i in interceptors if type(i).inbound is not Interceptor.inbound)

    async def outbound(self, envelope: Envelope) -> tuple[list[Envelope], list[Envelope]]:
        """The messages to publish and the side events to journal with them."""
        messages = [envelope]
        events: list[Envelope] = []
        for hook in self._outbound:
            passed: list[Envelope] = []
            for message in messages:
                passed.extend(await hook(Outbound(message, events)))
            messages = passed
        return messages, events

    async def inbound(
        self, envelope: Envelope, agent: str, stream_seq: int = 0
    ) -> tuple[list[Envelope], list[Envelope]]:
        """The messages to hand to the agent and the side events to journal."""
        messages = [envelope]
        events: list[Envelope] = []
        for hook in self._inbound:
            passed: list[Envelope] = []
            for message in messages:
                passed.extend(await hook(Inbound(message, agent, stream_seq, events)))
            messages = passed
        return messages, events
