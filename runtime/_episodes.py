"""Starting episodes and waiting for them to complete, from outside the agents."""

from __future__ import annotations

import time
from collections.abc import Iterable

import anyio
import msgspec

from faultline._errors import DecodeError, JournalError, NoResponderError, ReplyTimeoutError
from faultline.bus import Bus, Message, Subscription
from faultline.core import (
    RUNNER,
    Body,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ModelCall,
    Start,
    check_delivered,
    decode_envelope,
    derive_id,
)

JOURNAL_ASK_TIMEOUT_S = 2.0
"""How long a runner waits for the journal service to say whether it can write."""

STATUS_WINDOW_S = 0.5
"""How long a runner collects the workers' answers when it asks what they are doing."""


class JournalState(msgspec.Struct):
    """What the journal service says of itself: why it cannot write ("" when it can), and how far it is."""

    stuck: str = ""
    last_seq: int = 0


class CallInFlight(msgspec.Struct, frozen=True, kw_only=True):
    """A model call a worker is waiting on, as its status reports it."""

    episode: str
    agent: str
    role: str
    attempt: int
    age_s: float
    """Since the call began, its earlier attempts and waits included."""

    def describe(self) -> str:
        return f"{self.agent}'s model call (role {self.role}, attempt {self.attempt}, {self.age_s:.0f}s)"


def in_flight(call: ModelCall) -> CallInFlight:
    return CallInFlight(
        episode=call.episode,
        agent=call.agent,
        role=call.role,
        attempt=call.attempt,
        age_s=time.monotonic() - call.started,
    )


class _Status(msgspec.Struct):
    model_calls: list[CallInFlight] = []


async def model_calls_in_flight(bus: Bus, window_s: float = STATUS_WINDOW_S) -> list[CallInFlight]:
    """Every model call the workers on `bus` are waiting on, the oldest first."""
    answers = await bus.request_all(bus.subjects.svc("status"), b"", window_s)
    calls = [call for answer in answers for call in msgspec.json.decode(answer, type=_Status).model_calls]
    return sorted(calls, key=lambda call: -call.age_s)


def started_envelope(episode: str, started: EpisodeStarted) -> Envelope:
    return Envelope(id=derive_id(episode, 0, "s"), episode=episode, sender=RUNNER, body=started, ts=time.time())


def kickoff_envelope(episode: str, to: str, body: Body | None = None) -> Envelope:
    """The first message of an episode, sent by the runner to agent `to`."""
    return Envelope(
        id=derive_id(episode, 1, "s"),
        episode=episode,
        sender=RUNNER,
        recipient=to,
        body=body or Start(),  # type: ignore[arg-type]
        ts=time.time(),
    )


async def start_episode(bus: Bus, episode: str, to: str, started: EpisodeStarted, body: Body | None = None) -> None:
    """Journal the episode's start, then hand the first message to agent `to` (unless `check_journal` refuses)."""
    await check_journal(bus)
    await bus.publish_all([started_envelope(episode, started), kickoff_envelope(episode, to, body)])


async def check_journal(bus: Bus, timeout_s: float = JOURNAL_ASK_TIMEOUT_S) -> None:
    """Raise JournalError while the journal service reports that it cannot write: no episode starts then.

    A journal service that does not answer (not started, restarting) is no reason
    to refuse: the stream keeps every message until it is back.
    """
    try:
        reply = await bus.request(bus.subjects.svc("journal"), b"{}", timeout_s)
    except (NoResponderError, ReplyTimeoutError):
        return
    stuck = msgspec.json.decode(reply, type=JournalState).stuck
    if stuck:
        raise JournalError(
            f"new episodes are refused while the journal cannot write ({stuck}); nothing is lost: the stream"
            " keeps every message for the journal to take in once its file can be written again"
        )


class Completions:
    """Collects `episode completed` events as they happen (the first one per episode counts)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.done: dict[str, EpisodeCompleted] = {}
        self._events: dict[str, anyio.Event] = {}
        self._sub: Subscription | None = None

    async def __aenter__(self) -> Completions:
        self._sub = await self.bus.subscribe(self.bus.subjects.event("completed", "*"), self._on_msg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _on_msg(self, msg: Message) -> None:
        try:
            env = check_delivered(decode_envelope(msg.data), msg.subject)
        except DecodeError:
            return  # the dead-letter path records it
        if isinstance(env.body, EpisodeCompleted) and env.episode not in self.done:
            self.done[env.episode] = env.body
            self._event(env.episode).set()

    def _event(self, episode: str) -> anyio.Event:
        if episode not in self._events:
            self._events[episode] = anyio.Event()
        return self._events[episode]

    async def wait(self, episodes: Iterable[str]) -> dict[str, EpisodeCompleted]:
        """Block until every episode in `episodes` has completed."""
        wanted = list(episodes)
        for episode in wanted:
            await self._event(episode).wait()
        return {e: self.done[e] for e in wanted}
