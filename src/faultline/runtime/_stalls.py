"""Stalled episodes: ending an episode in which nothing is in flight anywhere, long before its timeout.

An episode whose agents all wait for what will never come (a reply nobody sends, a message on a topic nobody
listens to, a handler that returned without the output its peer waits for) used to run to its timeout. The runner
(`StallWatch`) ends it as a `failure` caused `stalled: ...` once it has proved, from what the server holds, that
nothing of it is in flight and nothing of it was stored for `stall_after_s`:

- Every input reaches a handler through a consumer that acknowledges it, and a worker acknowledges an input only
  once its handler returned and what it left is stored (`Worker._acknowledge`). An input waiting behind others,
  on its way over the network, lost on the way and to be sent again after the ack wait, held by a worker that
  died (the next one is sent it again), in a handler that waits on a model, a service or the concurrency limit,
  or handled quietly with its `NoOutput` marker held, is unacknowledged. So a consumer's acknowledgement floor
  (the stream sequence up to which everything it was sent is acknowledged) at or past the last of the episode's
  messages that it receives says that none of them is waiting or being handled, and that what they left is stored.
- A `Timer` is stored before its input is acknowledged, and fires as a `TimerFired` whose id follows from the
  timer's. A timer with no firing in the stream is pending, whoever holds it (a worker that died holding it is
  followed by one that sets it again), however long it waits.
- Nothing else makes an episode's messages: the runner's starts go out before the episode is watched, an error
  a handler raised is the runner's to complete (such an episode is left alone), and the services answer within
  the handlers that ask them.

So each look takes, in this order: the stream's last sequence, sampled every poll (a sample taken `stall_after_s`
ago bounds what is quiet); the episode's last message on any of its subjects, which must be no later than that
bound; the state of every consumer that acknowledges; and then the episode's messages. Anything stored after the
bound found in that read, a pending timer, or a consumer whose floor is short of the last message it receives
means work is in flight, and the episode is looked at again later. Since the floors were read before the
messages, whatever the acknowledged handlers left is in the read too, and every input of it is held to a floor.
A second look at least `CONFIRM_S` later must find the same: the same last message, and everything acknowledged.

Why the server's floors and not the workers' word (their status, which the runner asks for every second): a
worker knows the inputs it holds, not those the server sent that never arrived (lost on the way, sent again only
after the ack wait), nor those a consumer holds whose worker is down and will handle them once restarted; and its
answers come within a window, or late when it is busy. Silence cannot prove that nothing is in flight; a floor
can. Why floors and not the counts of unacknowledged messages: a consumer serves every episode, and a count says
nothing of one of them, where a floor past an episode's last message does.

Late, never wrong: a floor stops at the oldest unacknowledged message, so a slow handler of another episode holds
it short of a stalled episode's last message until it returns; a consumer no process reads holds what it was sent
for the next one (a worker restarting), and one left by another layout of the system, which no worker will read
again, holds it for ever, and those episodes time out as before. Every consumer that acknowledges is counted,
the journal's among them (it is behind by a batch at most). A poll looks at `LOOKS_PER_POLL` episodes and reads
`READS_PER_POLL` at most; the rest wait for the next poll. The runner is the operator (docs/security.md), which
may list the consumers and look up the stream's last messages; a credential that may not ends the watch with a
warning, and its episodes end at their timeout.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import msgspec

from faultline._errors import BusError, PublishRefusedError
from faultline.bus import Bus, ConsumerState, Delivery
from faultline.core import (
    RUNNER,
    DefenseFired,
    Envelope,
    EpisodeCompleted,
    ErrorRaised,
    Timer,
    body_kind,
    runner_completion,
    timer_fired,
)
from faultline.runtime._episodes import STORED_READ_TIMEOUT_S
from faultline.runtime._worker import consumer_agent

log = logging.getLogger(__name__)

STALL_POLL_S = 1.0
"""How often the runner looks for stalled episodes (every half `stall_after_s` where that is shorter)."""
CONFIRM_S = 1.0
"""How long after a look found an episode stalled a second one must find it so again before the runner ends it
(half `stall_after_s` where that is shorter)."""
LOOKS_PER_POLL = 64
"""How many episodes one poll looks at, at most: one look is two requests for the episode's last messages."""
READS_PER_POLL = 4
"""How many episodes one poll reads whole, at most: one read is three short-lived consumers."""
LAST_SENT_SHOWN = 6
"""How many agents' last messages a stall's cause names (the latest)."""
STALL_KEY = "stalled"
"""The key of a stalled episode's `EpisodeCompleted.details` under which the runner puts its `Stall`."""


class Stall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the runner found in a stalled episode: what was said last, and who received it and said nothing."""

    quiet_s: float
    """Nothing of the episode was stored for at least this long (`stall_after_s`), and nothing is in flight."""
    last: str
    """The last message, in words: `note from triage to math`, `note from triage on #questions`."""
    receivers: list[str] = []
    """The agents that handled the last message: each sent no message."""
    dropped: list[str] = []
    """Where a defense dropped the last message before an agent saw it, in words."""
    unheard: str = ""
    """Why no agent received the last message, where none did."""
    last_sent: dict[str, str] = {}
    """Each agent's last message, in words, the latest last (the runner's starts left out)."""

    def cause(self) -> str:
        """The completion's cause: one line a user can act on."""
        fates = [f"{', '.join(self.receivers)} handled it and sent nothing"] if self.receivers else []
        fates += self.dropped
        if self.unheard:
            fates.append(f"no agent receives it: {self.unheard}")
        said = "; ".join(f"{agent}: {words}" for agent, words in self.last_sent.items())
        return (
            f"stalled: nothing of the episode in flight for {self.quiet_s:g}s (every message handled, no handler"
            f" running, no timer set); the last message was {self.last}, and {', and '.join(fates)}"
            + (f"; last sent by each agent: {said}" if said else "")
        )

    def completion(self, episode: str) -> Envelope:
        """The runner's completion of `episode` as a failure, with this stall as its cause and in its details."""
        return runner_completion(episode, "failure", self.cause(), details={STALL_KEY: msgspec.to_builtins(self)})


def stall_of(completed: EpisodeCompleted) -> Stall | None:
    """The stall the runner found in the episode `completed` ends, if the runner ended it stalled."""
    found = completed.details.get(STALL_KEY)
    try:
        return msgspec.convert(found, Stall) if isinstance(found, dict) else None
    except msgspec.ValidationError:
        return None


@dataclass(frozen=True, slots=True)
class Busy:
    """Why an episode is not stalled (for the log), and what must change before a read could find otherwise."""

    reason: str
    consumer: str = ""
    """A consumer that has not acknowledged the episode's message `needed`: no read finds more until it has."""
    needed: int = 0
    until_new: bool = False
    """No read finds more until a new message of the episode is stored (a timer's firing)."""


def judge(
    stored: Sequence[tuple[Delivery, Envelope]], consumers: Sequence[ConsumerState], quiet_through: int, quiet_s: float
) -> Stall | Busy | None:
    """Whether the episode whose direct, topic and event messages are `stored` (in stream order, read after
    `consumers` were asked) is stalled; None when it is over, or is the runner's to complete (an error).

    `quiet_through` is a stream sequence stored at least `quiet_s` ago: a message after it is recent.
    """
    if not any(env.recipient or env.topic for _, env in stored):
        return Busy("none of its messages to agents is stored", until_new=True)
    if any(isinstance(env.body, EpisodeCompleted | ErrorRaised) for _, env in stored):
        return None
    last = stored[-1][0].stream_seq
    if last > quiet_through:
        return Busy(f"its message {last} is not {quiet_s:g}s old")
    fired = {env.id for _, env in stored}
    for _, env in stored:
        if isinstance(env.body, Timer) and timer_fired(env).id not in fired:
            return Busy(f"{env.sender}'s timer of {env.body.after_s:g}s has not fired", until_new=True)
    for consumer in consumers:
        needed = max((d.stream_seq for d, _ in stored if consumer.receives(d.subject)), default=0)
        if needed > consumer.ack_floor:
            return Busy(f"consumer {consumer.name} has not acknowledged message {needed}", consumer.name, needed)
    return _stall(stored, consumers, quiet_s)


def _stall(stored: Sequence[tuple[Delivery, Envelope]], consumers: Sequence[ConsumerState], quiet_s: float) -> Stall:
    sent = [(delivery, env) for delivery, env in stored if env.recipient or env.topic]
    delivery, last = sent[-1]
    receivers = {
        agent
        for consumer in consumers
        if (agent := consumer_agent(consumer.name)) and consumer.receives(delivery.subject)
        if not (last.topic and agent == last.sender)  # an agent is not sent its own topic messages
    }
    drops = {
        env.body.agent: f"the {env.body.defense} defense dropped it at {env.body.agent}"
        + (f" ({env.body.reason})" if env.body.reason else "")
        for _, env in stored
        # a worker says what it dropped, not another's
        if isinstance(env.body, DefenseFired) and env.body.message_id == last.id and env.body.agent == env.sender
    }
    by_agent: dict[str, str] = {}
    for _, env in sent:
        if env.sender == RUNNER:
            continue
        if env.sender in by_agent:
            del by_agent[env.sender]  # the latest last
        by_agent[env.sender] = _words(env)
    unheard = "" if receivers else f"no agent listens on #{last.topic}" if last.topic else _unread(last.recipient)
    return Stall(
        quiet_s=quiet_s,
        last=_words(last, sender=True),
        receivers=sorted(receivers - drops.keys()),
        dropped=[drops[agent] for agent in sorted(drops)],
        unheard=unheard,
        last_sent=dict(list(by_agent.items())[-LAST_SENT_SHOWN:]),
    )


def _words(env: Envelope, *, sender: bool = False) -> str:
    kind = body_kind(env.body)
    by = f" from {env.sender}" if sender else ""
    return f"{kind}{by} on #{env.topic}" if env.topic else f"{kind}{by} to {env.recipient}"


def _unread(agent: str) -> str:
    return f"no worker reads {agent}'s messages (no consumer of the stream is sent them)"


@dataclass(slots=True)
class _Look:
    """What the watch knows of one episode."""

    due: float = 0.0
    """When to look at it next."""
    last: int = 0
    """The stream sequence of its last message when last looked at."""
    busy: Busy | None = None
    """Why it was not stalled when last read."""
    stalled_at: float | None = None
    """When a look found it stalled, its last message `last`: a second look confirms it."""


@dataclass
class StallWatch:
    """Ends the episodes it watches that have stalled (see the module docstring), `stall_after_s` after their
    last message at the earliest, with `on_stalled`; never one that has work in flight."""

    bus: Bus
    stall_after_s: float
    on_stalled: Callable[[str, Stall], Awaitable[None]]
    _looks: dict[str, _Look] = field(default_factory=dict)
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    """When the stream's last sequence was read, and what it was, every poll: what was stored by then."""

    def watch(self, episode: str) -> None:
        """Look at `episode` from now on: its starts are stored (so it is quiet `stall_after_s` from now at the
        earliest, and is first looked at then)."""
        self._looks[episode] = _Look(due=anyio.current_time() + self.stall_after_s)

    def forget(self, episode: str) -> None:
        self._looks.pop(episode, None)

    async def run(self) -> None:
        """Look for stalled episodes until cancelled; a credential that may not look ends the watch (logged)."""
        while True:
            await anyio.sleep(self._poll_s)
            try:
                await self._poll()
            except PublishRefusedError as exc:
                log.warning("looking for stalled episodes stopped, they end at their timeout: %s", exc)
                return
            except BusError as exc:  # no leader now, a lost connection: the next poll looks again
                log.debug("cannot look for stalled episodes now: %s", exc)

    @property
    def _poll_s(self) -> float:
        return min(STALL_POLL_S, self.stall_after_s / 2)

    @property
    def _confirm_s(self) -> float:
        return min(CONFIRM_S, self.stall_after_s / 2)

    async def _poll(self) -> None:
        seq = (await self.bus.stream_state()).last_seq
        now = anyio.current_time()
        self._samples.append((now, seq))
        quiet_through = self._quiet_through(now)
        if quiet_through is None:
            return
        due = sorted((look.due, episode) for episode, look in self._looks.items() if look.due <= now)
        consumers: list[ConsumerState] | None = None
        reads = 0
        for _, episode in due[:LOOKS_PER_POLL]:
            if reads == READS_PER_POLL:
                break  # the rest are due first at the next poll
            look = self._looks.get(episode)
            if look is None:  # completed meanwhile
                continue
            last = await self._last_stored(episode, quiet_through)
            if last > quiet_through:
                look.due, look.stalled_at = self._quiet_at(last, now), None
                continue
            if consumers is None:
                consumers = await self.bus.acknowledging()  # before any read: see the module docstring
            if last == look.last and _still_busy(look.busy, consumers):
                look.due = now + self._poll_s
                continue
            reads += 1
            verdict = judge(await self._read(episode), consumers, quiet_through, self.stall_after_s)
            await self._take(episode, look, last, verdict, now)

    async def _take(self, episode: str, look: _Look, last: int, verdict: Stall | Busy | None, now: float) -> None:
        """Act on what a read found: end the episode when a look `CONFIRM_S` before found it stalled too, with
        the same last message; else look again."""
        again = look.stalled_at is not None and look.last == last
        look.last, look.busy = last, verdict if isinstance(verdict, Busy) else None
        if verdict is None:
            look.due = math.inf  # over: its completion is on its way
        elif isinstance(verdict, Busy):
            log.debug("episode %s is not stalled: %s", episode, verdict.reason)
            look.due, look.stalled_at = now + self._poll_s, None
        elif again and look.stalled_at is not None and now - look.stalled_at >= self._confirm_s:
            await self.on_stalled(episode, verdict)
            look.due = math.inf
        else:
            look.stalled_at = look.stalled_at if again else now
            look.due = now + self._confirm_s

    def _quiet_through(self, now: float) -> int | None:
        """The last sequence of the latest sample taken `stall_after_s` ago or before (None: none is that old),
        forgetting the older ones."""
        cutoff = now - self.stall_after_s
        while len(self._samples) > 1 and self._samples[1][0] <= cutoff:
            self._samples.popleft()
        taken, seq = self._samples[0]
        return seq if taken <= cutoff else None

    def _quiet_at(self, last: int, now: float) -> float:
        """When the message at stream sequence `last` is `stall_after_s` old at the latest: it was stored by the
        first sample that holds it (by now, where none does yet)."""
        stored_by = next((taken for taken, seq in self._samples if seq >= last), now)
        return stored_by + self.stall_after_s

    async def _last_stored(self, episode: str, quiet_through: int) -> int:
        """The stream sequence of `episode`'s last message, or of a message of it after `quiet_through`.

        Its messages to agents come first: an episode at work has a recent one, and its events are then not asked
        for. Their last is mostly its start, in a block of the stream that nats-server would load from disk and
        cache for the answer: at 5,000 episodes in flight, asked of each, that kept about 40 MiB of old blocks.
        """
        last = 0
        for filter_ in self.bus.subjects.of_episode(episode):
            last = max(last, await self.bus.last_stored([filter_]))
            if last > quiet_through:
                break
        return last

    async def _read(self, episode: str) -> list[tuple[Delivery, Envelope]]:
        s = self.bus.subjects
        subjects = [s.direct(episode, "*"), s.topic(episode, "*"), s.event("*", episode)]
        return await self.bus.read_envelopes(subjects, STORED_READ_TIMEOUT_S)


def _still_busy(busy: Busy | None, consumers: Sequence[ConsumerState]) -> bool:
    """Whether what kept an episode busy still does, its messages unchanged: a read would find it busy again."""
    if busy is None:
        return False
    if busy.until_new:
        return True
    floor = next((c.ack_floor for c in consumers if c.name == busy.consumer), None)
    return bool(busy.consumer) and floor is not None and floor < busy.needed
