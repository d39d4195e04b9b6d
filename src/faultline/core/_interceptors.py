"""Interceptors: the hook faults and defenses hang on.

An interceptor sees every message a worker publishes (`outbound`) and every
message before a handler sees it (`inbound`). It returns the messages that go
on: the same one (pass), another (change), none (drop) or several (multiply).
Side events it wants journaled (a fault applied, a defense fired) go to
`message.events`. Each hook takes one input object, so fields can be added
later without breaking interceptors already written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from faultline.core._messages import Envelope


@dataclass(slots=True)
class Outbound:
    envelope: Envelope
    events: list[Envelope] = field(default_factory=list)


@dataclass(slots=True)
class Inbound:
    envelope: Envelope
    agent: str
    stream_seq: int = 0
    events: list[Envelope] = field(default_factory=list)


class Interceptor:
    """Passes everything through; subclasses override the hooks they need."""

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        return (message.envelope,)

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        return (message.envelope,)

    def forget(self, episode: str) -> None:
        """Drop any state kept for `episode`; the worker calls it once the episode is over."""


class InterceptorChain:
    """Runs interceptors in order; each one sees what the one before let through."""

    def __init__(self, interceptors: Iterable[Interceptor] = ()) -> None:
        self._interceptors: list[Interceptor] = list(interceptors)

    def __len__(self) -> int:
        return len(self._interceptors)

    def add(self, interceptor: Interceptor) -> None:
        self._interceptors.append(interceptor)

    def remove(self, interceptor: Interceptor) -> None:
        self._interceptors.remove(interceptor)

    def forget(self, episode: str) -> None:
        for interceptor in self._interceptors:
            interceptor.forget(episode)

    async def outbound(self, envelope: Envelope) -> tuple[list[Envelope], list[Envelope]]:
        """The messages to publish and the side events to journal with them."""
        messages = [envelope]
        events: list[Envelope] = []
        for interceptor in self._interceptors:
            passed: list[Envelope] = []
            for message in messages:
                passed.extend(await interceptor.outbound(Outbound(message, events)))
            messages = passed
        return messages, events

    async def inbound(
        self, envelope: Envelope, agent: str, stream_seq: int = 0
    ) -> tuple[list[Envelope], list[Envelope]]:
        """The messages to hand to the agent and the side events to journal."""
        messages = [envelope]
        events: list[Envelope] = []
        for interceptor in self._interceptors:
            passed: list[Envelope] = []
            for message in messages:
                passed.extend(await interceptor.inbound(Inbound(message, agent, stream_seq, events)))
            messages = passed
        return messages, events
