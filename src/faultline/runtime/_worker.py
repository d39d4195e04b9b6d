"""A worker: runs agents for many episodes at once, one message at a time per (episode, agent).

Scheme for several workers of one agent type: a worker started as shard i of n
reads the agent's subjects through its own durable consumer and handles only the
episodes whose id hashes to i (crc32 mod n), acknowledging the others unread. So
each (episode, agent) belongs to exactly one worker, which handles its messages
in stream order; a restarted worker resumes its consumer and finds its share.
A worker reads its consumer alone: a second one of the same agent and shard (or,
on an open server, of another shard count beside it) would be handed every input
too, so it is refused (`Bus.own_consumer`, ConsumerInUseError).

Timers. A handler that emits a `Timer` (a bounded wait) is sent `TimerFired`
`after_s` seconds later by the worker that published the timer, unless the
episode completed meanwhile (nobody waits any more). A timer held by
a worker that stops or dies is not lost: when the agent's consumer is opened
again, the worker reads from the stream the timers of its share that have not
fired in episodes not completed, and fires each when it would have (at once if
that time has passed). `TimerFired` has an id derived from its timer's, so one
fired twice is dropped by JetStream.

Quiet inputs. A handler that emits nothing leaves a `NoOutput` marker. The worker
holds the marker and the input's acknowledgement, and goes on with the instance's
later inputs as they come, for at most `quiet_linger_s` after the first marker it
held: inputs of one instance come in runs (the tool agent takes its helpers' replies
one after another, a helper's `Start` is soon followed by its first request).
Inputs are handled in order, so whatever a later input leaves, once stored, is the
evidence that the held ones were handled too (replay reads it so), and they are
acknowledged with it; their markers are dropped. When that time is up, or the
instance's inputs end, the last held marker is published and covers them all. A
crash in between redelivers every held input, as any unacknowledged one.

Lost deliveries. Deliveries travel over core NATS, and those on their way when
the worker's server or a route to it is lost (a paused cluster node) never
arrive; the consumer goes on with the next ones, and sends the lost ones again
only after the ack wait, behind later inputs of the same (episode, agent). The
first delivery after a lost one skips a consumer sequence: the worker hands it
to no instance and reopens the consumer from its acknowledgement floor, so every
input is handled in stream order. That order is what makes an input at or below
the last one an instance handled a duplicate (handled, its acknowledgement lost).
A delivery of an input the worker still holds is kept in its place, and the
input is acknowledged through the latest delivery.

Model calls of episodes the runner ended. When the runner completes an episode
itself (it gave up waiting, or a handler raised), nobody waits for the answers of
the episode's model calls still in flight: the worker cancels them, and any its
handlers start later, with a `ModelError` that the handler meets as it would any
failed call. The error is recorded like any call's outcome, so replay serves it;
a slow model's time goes to the episodes still running. An episode its own agents
complete keeps its calls: what happens after (a storm still echoing) is theirs.

A restarted worker resumes from its consumer's acknowledgement floor. The first
time it meets an (episode, agent) it rebuilds the instance by replaying that
pair's earlier inputs from the stream, serving every recorded call; calls the
crashed handler had already made are served too, so no model is called twice,
and outputs published again carry the same ids, which JetStream drops.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from faultline._errors import (
    ConsumerInUseError,
    DecodeError,
    DeliveriesLostError,
    ModelError,
    NonDeterminismError,
    PluginError,
)
from faultline.bus import Bus, Consumer, Delivery, Message, asked_again, decode_notice, tell
from faultline.core import (
    DEFAULT_HANDLER_TIMEOUT_S,
    RUNNER,
    Agent,
    Envelope,
    Handling,
    LlmRequest,
    LlmResponse,
    ModelBackend,
    ModelCall,
    NoOutput,
    Recipients,
    Recorder,
    Recording,
    RequestFault,
    Subjects,
    Timer,
    episode_shard,
    failure_envelopes,
    load_system,
    timer_fired,
)
from faultline.runtime._config import RuntimeConfig
from faultline.runtime._episodes import STATUS_SERVICE, StatusAsk, WorkerStatus, in_flight
from faultline.runtime._recovery import load_history, pending_timers

log = logging.getLogger(__name__)


_LIMITS = RuntimeConfig()


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """A worker's limits (`[runtime]` of the configuration, `worker_settings`), with the configuration's defaults."""

    concurrency: int = _LIMITS.concurrency
    handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S
    ack_wait_s: float = _LIMITS.ack_wait_s
    drain_timeout_s: float = _LIMITS.drain_timeout_s
    linger_s: float = _LIMITS.linger_s
    quiet_linger_s: float = 0.05
    """How long a quiet input's `NoOutput` marker may wait for later inputs of its instance to cover it."""
    shard: int = 0
    shards: int = 1
    recovery_reads: int = 8
    """How many instances a restarted worker reads the history of at once: thousands met at once, each
    reading through a consumer of its own, would have the server time the consumers out."""
    system: str = ""
    """The system its agents are of (`[system] class`), which its status tells: a run on a system already up
    refuses one of another (`faultline.api.run`). Its agents may send only to its agents (`SystemRef.recipients`)."""


EVICTED_KEPT = 65_536
"""How many evicted episodes a worker remembers (`Worker._evicted`): hours of a busy system's completions."""

SERVER_IDLE_S = 1.0
"""How long a task that has served an instance waits for the next one before it ends (`_IdleServers`)."""


def consumer_name(agent: str, shard: int, shards: int) -> str:
    """The durable consumer through which shard `shard` of `shards` reads `agent`'s inputs."""
    return f"agent-{agent}-{shard}of{shards}"


def consumer_shards(agent: str, name: str) -> int:
    """Into how many shards consumer `name` splits `agent`'s episodes (`consumer_name`); 0 if it is none of
    `agent`'s."""
    layout = re.fullmatch(rf"agent-{re.escape(agent)}-\d+of(\d+)", name)
    return int(layout.group(1)) if layout else 0


def consumer_agent(name: str) -> str:
    """The agent whose inputs consumer `name` carries (`consumer_name`); "" for one of no agent's."""
    layout = re.fullmatch(r"agent-(.+)-\d+of\d+", name)
    return layout.group(1) if layout else ""


def agent_filters(subjects: Subjects, cls: type[Agent], shard: int = 0, shards: int = 1) -> list[str]:
    """The subjects of `cls`'s inputs, messages to it and its topics, in the partitions of shard `shard` of
    `shards` (`Subjects.in_shard`)."""
    inputs = [subjects.direct("*", cls.name), *(subjects.topic("*", t) for t in cls.topics)]
    return [narrowed for subject in inputs for narrowed in subjects.in_shard(subject, shard, shards)]


@dataclass(slots=True)
class _Instance:
    agent: Agent
    inbox: list[tuple[Delivery, Envelope]] = field(default_factory=list)
    """Inputs delivered and not handled yet, in stream order. A list, not a deque: inputs wait one or two deep,
    most of thousands of instances hold none, and an empty deque takes 760 bytes where a list takes 56."""
    serving: bool = False
    """Whether a task handles the inbox now (`Worker._serve`): one at a time, and none while it is empty."""
    arrived: anyio.Event | None = None
    """Set by the next input while the serving task waits for one to cover its held markers."""
    rebuilt: bool = False
    handled_seq: int = 0
    """The stream sequence of the last input handled. Inputs reach the instance in stream order (lost
    deliveries are read again first), so one at or below it was handled: its acknowledgement was lost."""
    stored: frozenset[str] = frozenset()
    """The ids of the outputs a rebuilt instance's agent left in the stream before (`History.stored`): an input
    handled again after a crash sends only the others, so none is stored twice, even past the duplicate window."""
    broken: str = ""
    failed: bool = False
    recorded: dict[str, dict[int, Recording]] = field(default_factory=dict)
    quiet: list[tuple[Delivery, Envelope]] = field(default_factory=list)
    """Inputs handled without output while more inputs waited, each with its `NoOutput` marker,
    not published and not acknowledged yet (see `Worker._serve`)."""
    quiet_until: float = 0.0
    """When the first of `quiet` has waited `quiet_linger_s`: the held markers are settled then at the latest."""

    async def input_within(self, wait_s: float) -> bool:
        """Whether an input is in the inbox within `wait_s` (waiting for one); False once `wait_s` is over, even
        with inputs queued: held markers are not held past their time."""
        if wait_s <= 0:
            return False
        if not self.inbox:
            self.arrived = anyio.Event()
            with anyio.move_on_after(wait_s):
                await self.arrived.wait()
            self.arrived = None
        return bool(self.inbox)


def _unsent(instance: _Instance, envelopes: list[Envelope]) -> list[Envelope]:
    """Those of `envelopes` the stream does not hold yet: all of them, but for an input a rebuilt instance
    handles again (`_Instance.stored`)."""
    if not instance.stored:
        return envelopes
    return [env for env in envelopes if env.id not in instance.stored]


def _remember(episodes: OrderedDict[str, None], episode: str) -> None:
    """Add `episode` to the latest `EVICTED_KEPT` of `episodes`, forgetting the oldest beyond them.

    An OrderedDict, not a dict: a dict finds its oldest key by stepping over every key deleted before it (until
    it is resized), about 50 us per completion once `EVICTED_KEPT` are remembered, against 2 us here."""
    episodes[episode] = None
    if len(episodes) > EVICTED_KEPT:
        episodes.popitem(last=False)


class _CallsInFlight:
    """The cancel scopes of the model calls in flight, by episode, so that those of an episode the runner ended
    are cancelled; the last `EVICTED_KEPT` episodes closed so are remembered, and their calls refused."""

    __slots__ = ("_closed", "_scopes")

    def __init__(self) -> None:
        self._scopes: dict[str, list[anyio.CancelScope]] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()

    def add(self, episode: str, scope: anyio.CancelScope) -> bool:
        """List a call's `scope`; False, listing nothing, when its episode was closed."""
        if episode in self._closed:
            return False
        self._scopes.setdefault(episode, []).append(scope)
        return True

    def remove(self, episode: str, scope: anyio.CancelScope) -> None:
        scopes = self._scopes.get(episode)
        if scopes is not None:
            scopes.remove(scope)
            if not scopes:
                del self._scopes[episode]

    def close(self, episode: str) -> None:
        """Cancel the episode's calls in flight, and refuse those it starts later."""
        _remember(self._closed, episode)
        for scope in self._scopes.pop(episode, ()):
            scope.cancel()


_Work = tuple[type[Agent], Consumer, _Instance]
"""An instance to serve, with its agent and the consumer its inputs came through."""


class _IdleServers:
    """Tasks that have served an instance and wait a moment for the next: nearly every input finds its instance
    waiting with no task, and an anyio task costs several times a wake-up to start (its handle, cancel scope and
    event, about 30 us here against 7), so `_dispatch` hands the instance to one of these when it can.

    An asyncio future per wait, not an anyio event: the wait has its timer and is woken by one hand, and
    a cancelled task cancels the future it awaits."""

    __slots__ = ("_closed", "_waiting")

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[_Work | None], None] = {}
        """Latest last: the task idle the shortest time is handed the next instance, the others may end."""
        self._closed = False

    def hand(self, work: _Work) -> bool:
        """Give `work` to the task idle the shortest time; False when none waits."""
        while self._waiting:
            waiter, _ = self._waiting.popitem()
            if not waiter.done():
                waiter.set_result(work)
                return True
        return False

    async def next(self, idle_s: float) -> _Work | None:
        """The next instance handed to this task within `idle_s`; None when none came, or once closed."""
        if self._closed:
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Work | None] = loop.create_future()
        self._waiting[waiter] = None
        timer = loop.call_later(idle_s, _wake_empty, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiting.pop(waiter, None)

    def close(self) -> None:
        """End every wait now, and those asked for later at once: the worker reads no more inputs."""
        self._closed = True
        for waiter in self._waiting:
            _wake_empty(waiter)


def _wake_empty(waiter: asyncio.Future[_Work | None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass
class Worker:
    """Runs `agents` against the bus until stopped; see the module docstring for the scheme."""

    bus: Bus
    agents: Sequence[type[Agent]]
    backends: Callable[[str], ModelBackend]
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    agent_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    name: str = field(default_factory=lambda: f"worker-{os.getpid()}")
    handled: int = 0
    model_calls: set[ModelCall] = field(default_factory=set)
    request_faults: RequestFault | None = None
    """The fault rules on the agents' own model requests (`faulting.request_faults`)."""
    _instances: dict[str, dict[str, _Instance]] = field(default_factory=dict)
    """The instances of each episode, by agent: a completed episode's are forgotten together, at a cost
    that does not grow with the instances the worker holds."""
    _recovering: set[str] = field(default_factory=set)
    _inherited: dict[str, int] = field(default_factory=dict)
    """For each agent whose consumer had delivered before this worker opened it, the stream's last sequence then:
    only inputs up to it may have been handled by a worker before this one (`_rebuild`)."""
    _backends: dict[str, ModelBackend] = field(default_factory=dict)
    _limiter: anyio.CapacityLimiter | None = None
    _history_reads: anyio.CapacityLimiter | None = None
    _finished: dict[str, float] = field(default_factory=dict)
    _calling: _CallsInFlight = field(default_factory=_CallsInFlight)
    _evicted: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """The episodes whose instances `_evict` forgot, latest last, at most `EVICTED_KEPT`: a late input of one is
    handled by an instance rebuilt from the stream (`_rebuild`), as replay handles it, not by a fresh one."""
    _held: dict[tuple[str, int], tuple[Consumer, Delivery]] = field(default_factory=dict)
    """Deliveries queued or being handled, not acknowledged yet, by (consumer, stream sequence): the
    latest delivery of each, whose consumer is the one to acknowledge it to."""
    _stopping: anyio.Event = field(default_factory=anyio.Event)
    _ready: anyio.Event = field(default_factory=anyio.Event)
    _timers: TaskGroup | None = None
    _serving: TaskGroup | None = None
    _reading: TaskGroup | None = None
    _readers: dict[str, tuple[Consumer, anyio.CancelScope]] = field(default_factory=dict)
    _opened: set[str] = field(default_factory=set)
    """Agents whose consumer this worker opened before: the timers set since are held here, none to rearm."""
    _idle: _IdleServers = field(default_factory=_IdleServers)
    _recipients: dict[str, Recipients | None] = field(default_factory=dict)
    """Whom each agent may send to (`_recipients_of`), by agent."""

    # -- Services, for the contexts ---------------------------------------------------------

    def backend_for(self, role: str) -> ModelBackend:
        """The role's backend; its calls give their handler's place under `concurrency` up while they wait."""
        if role not in self._backends:
            backend = self.backends(role)
            self._backends[role] = (
                backend if self._limiter is None else _PlaceFreeingBackend(backend, self._limiter, self._calling)
            )
        return self._backends[role]

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        return await self.bus.request(self.bus.subjects.svc(service), payload, timeout_s)

    def recorded_for(self, message: Envelope) -> Mapping[int, Recording]:
        """The recordings a worker before this one made for calls `message.sender` made under
        `message.id` (the fault injector's, outside the agent's handlers), handed out once."""
        instance = self._instances.get(message.episode, {}).get(message.sender)
        return instance.recorded.pop(message.id, {}) if instance is not None else {}

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until `stop()`; then finish the messages in hand (within the drain timeout)."""
        self._limiter = anyio.CapacityLimiter(self.settings.concurrency)
        self._history_reads = anyio.CapacityLimiter(self.settings.recovery_reads)
        s = self.bus.subjects
        completions = s.shard_events("completed", self.settings.shard, self.settings.shards)
        completed_after = (await self.bus.stream_state()).last_seq
        subs = [await self.bus.subscribe(s.svc(STATUS_SERVICE), self._on_status)]
        try:
            # Timers are inner: cancelling them at the stop leaves the handlers in `serving` to drain.
            async with anyio.create_task_group() as self._serving, anyio.create_task_group() as self._timers:
                sweeper, keeper, following = anyio.CancelScope(), anyio.CancelScope(), anyio.CancelScope()
                self._serving.start_soon(self._evict_finished, sweeper)
                self._serving.start_soon(self._keep_held, keeper)
                # from the stream: core NATS would drop those a lost route carried
                self._serving.start_soon(self._follow_completions, completions, completed_after, following)
                async with anyio.create_task_group() as self._reading:
                    for cls in self.agents:
                        await self.serve(cls)
                    log.info(
                        "%s serving %s (shard %d of %d)",
                        self.name,
                        ", ".join(cls.name for cls in self.agents) or "no agent yet",
                        self.settings.shard,
                        self.settings.shards,
                    )
                    self._ready.set()
                    await self._stopping.wait()
                    self._reading.cancel_scope.cancel()
                self._idle.close()
                sweeper.cancel()
                keeper.cancel()
                following.cancel()
                for consumer, _ in self._readers.values():
                    await consumer.close()
                self._serving.cancel_scope.deadline = anyio.current_time() + self.settings.drain_timeout_s
                self._timers.cancel_scope.cancel()
        finally:
            for sub in subs:
                await sub.unsubscribe()
            for backend in self._backends.values():
                await backend.aclose()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def serve(self, cls: type[Agent]) -> None:
        """Read agent `cls`'s messages from now on; while the worker runs too (helpers follow the roster)."""
        assert self._reading is not None and self._serving is not None, "serve() needs a running worker"
        if cls.name in self._readers:
            return
        consumer = await self._open_consumer(cls)
        scope = anyio.CancelScope()
        self._readers[cls.name] = (consumer, scope)
        self._reading.start_soon(self._read, self._serving, cls, consumer, scope)

    async def retire(self, name: str) -> None:
        """Stop reading agent `name`'s messages; the ones in hand are still handled, and its durable
        consumer is kept, so serving it again resumes where it stopped."""
        consumer, scope = self._readers.pop(name)
        scope.cancel()
        await consumer.close()

    def serving(self) -> set[str]:
        """The agents whose messages this worker reads now."""
        return set(self._readers)

    def stop(self) -> None:
        self._stopping.set()

    def _consumer_name(self, cls: type[Agent]) -> str:
        return consumer_name(cls.name, self.settings.shard, self.settings.shards)

    async def _open_consumer(self, cls: type[Agent]) -> Consumer:
        first = cls.name not in self._opened
        self._opened.add(cls.name)
        try:
            consumer, fresh = await self.bus.own_consumer(
                self._consumer_name(cls),
                agent_filters(self.bus.subjects, cls, self.settings.shard, self.settings.shards),
                ack_wait_s=self.settings.ack_wait_s,
                rivals=lambda name: consumer_shards(cls.name, name) not in (0, self.settings.shards),
            )
        except ConsumerInUseError as exc:
            raise ConsumerInUseError(self._in_use(cls.name, exc.consumer), exc.consumer) from None
        if fresh:  # nothing read before: nothing to recover
            return consumer
        self._recovering.add(cls.name)
        if first:
            self._inherited[cls.name] = (await self.bus.stream_state()).last_seq
            await self._rearm(cls.name)
        return consumer

    def _in_use(self, agent: str, consumer: str) -> str:
        """Why this worker may not serve `agent`, whose inputs another worker reads through `consumer` (and what
        to do): both would be handed every input, and with configurations of their own, journal what each made
        of it."""
        shard, shards = self.settings.shard, self.settings.shards
        theirs = consumer_shards(agent, consumer)
        if consumer == consumer_name(agent, shard, shards):
            return (
                f"agent {agent}, shard {shard}/{shards}, is served by another worker already (its consumer"
                f" {consumer} has a reader): two workers of one agent and shard would each handle every input."
                f" Stop the other one first; to share {agent}'s load, raise its group's count ([workers.<group>]"
                " count = N where `faultline up` runs) and give each worker its own --shard k/N"
            )
        return (
            f"agent {agent} is served by another worker in {theirs} shard(s) (its consumer {consumer} has a"
            f" reader), and this worker's --shard {shard}/{shards} splits its episodes into {shards}: both would"
            f" handle the same inputs. Give every worker of {agent} the same shard count, each its own --shard"
            f" k/{theirs}"
        )

    async def _rearm(self, agent: str) -> None:
        """Fire the timers of this worker's share that a worker before it set and never fired.

        The time left is read from wall clocks, the only ones two processes (or hosts) share: a clock stepped
        back since the timer was set would make it wait the step too, so no timer waits longer than it asked.
        """
        assert self._timers is not None
        shard, shards = self.settings.shard, self.settings.shards
        for timer in await asked_again(functools.partial(pending_timers, self.bus, agent, shard, shards)):
            if episode_shard(timer.episode, self.settings.shards) == self.settings.shard:
                assert isinstance(timer.body, Timer)
                left = min(max(0.0, timer.ts + timer.body.after_s - time.time()), timer.body.after_s)
                log.info("timer of %s rearmed, %.1fs left", agent, left, extra={"episode": timer.episode})
                self._timers.start_soon(self._fire, timer, left)

    async def _read(self, tg: TaskGroup, cls: type[Agent], consumer: Consumer, scope: anyio.CancelScope) -> None:
        """Serve the consumer; when deliveries were lost on the way, reopen it from its acknowledgement floor."""
        with scope:
            while True:
                try:
                    await consumer.serve(functools.partial(self._dispatch, tg, cls, consumer))
                except DeliveriesLostError as exc:
                    log.warning("%s; reading %s's inputs again from the acknowledgement floor", exc, cls.name)
                await consumer.close()
                consumer = await asked_again(functools.partial(self._open_consumer, cls))
                self._readers[cls.name] = (consumer, scope)

    async def _dispatch(self, tg: TaskGroup, cls: type[Agent], consumer: Consumer, delivery: Delivery) -> None:
        # Where the subjects are not partitioned, another shard's input is passed over undecoded (and so is
        # dead-lettered, if bad, by that shard alone); partitioned, the consumer's filters deliver only this shard's.
        if self.settings.shards > 1 and self.bus.subjects.partitions == 1:
            episode = self.bus.subjects.episode_in(delivery.subject)
            if episode_shard(episode, self.settings.shards) != self.settings.shard:
                await consumer.ack(delivery)
                return
        env = await self.bus.decode_or_dead_letter(delivery)
        if env is None or (env.topic and env.sender == cls.name):
            await consumer.ack(delivery)
            return
        held = (consumer.name, delivery.stream_seq)
        known = held in self._held
        self._held[held] = (consumer, delivery)
        if known:
            return  # delivered again while this worker still holds it: handled once, acknowledged then
        instances = self._instances.get(env.episode)
        if instances is None:
            instances = self._instances[env.episode] = {}
            if env.episode in self._evicted:  # a late input: its rebuilt instances are forgotten again in time
                self._finished.setdefault(env.episode, anyio.current_time())
        instance = instances.get(cls.name)
        if instance is None:
            instance = instances[cls.name] = _Instance(cls())
        instance.inbox.append((delivery, env))
        if instance.arrived is not None:
            instance.arrived.set()
        if not instance.serving:
            instance.serving = True
            if not self._idle.hand((cls, consumer, instance)):
                tg.start_soon(self._server, (cls, consumer, instance))

    async def _server(self, work: _Work | None) -> None:
        """Serve `work`'s instance, then each one handed to this task while it waits (`_IdleServers`)."""
        while work is not None:
            await self._serve(*work)
            work = await self._idle.next(SERVER_IDLE_S)

    async def _serve(self, cls: type[Agent], consumer: Consumer, instance: _Instance) -> None:
        """Handle the instance's inputs in order until its inbox is empty and no marker is held, then return: the
        next input has another task serve it (`_dispatch`). Most instances of thousands in flight wait, and hold no
        task."""
        assert self._limiter is not None
        try:
            while instance.inbox or instance.quiet:
                if instance.quiet and not await instance.input_within(instance.quiet_until - anyio.current_time()):
                    await self._settle_quiet(consumer, instance)  # no later input covered the held markers in time
                    continue
                delivery, env = instance.inbox.pop(0)  # no checkpoint: the handler awaits its publishes anyway
                async with _Slot(self._limiter) as slot:
                    if not instance.rebuilt:
                        await self._rebuild(cls, instance, env, delivery.stream_seq)
                    if delivery.stream_seq <= instance.handled_seq:
                        # handled and acknowledged already, the acknowledgement lost on the way (a stream
                        # leader lost, a server killed before it wrote it down): handling it again would change
                        # the instance's state, and send again what it left
                        await self._settle_quiet(consumer, instance)
                        await self._release(consumer, delivery)
                        continue
                    marker = await self._handle(cls, instance, env, delivery.stream_seq, slot)
                    instance.handled_seq = delivery.stream_seq
                    if marker is not None:
                        if not instance.quiet:
                            instance.quiet_until = anyio.current_time() + self.settings.quiet_linger_s
                        instance.quiet.append((delivery, marker))
                        continue
                    await self._acknowledge(consumer, [*(d for d, _ in instance.quiet), delivery])
                    instance.quiet.clear()
        finally:
            instance.serving = False

    async def _settle_quiet(self, consumer: Consumer, instance: _Instance) -> None:
        """Publish the last held marker, the evidence of every held input, and acknowledge them all."""
        if instance.quiet:
            await self.bus.publish_all(_unsent(instance, [instance.quiet[-1][1]]))
            await self._acknowledge(consumer, [d for d, _ in instance.quiet])
            instance.quiet.clear()

    async def _acknowledge(self, consumer: Consumer, deliveries: list[Delivery]) -> None:
        """Acknowledge handled inputs, in stream order, once what they left is stored."""
        for delivery in deliveries:
            await self._release(consumer, delivery)
            self.handled += 1

    async def _release(self, consumer: Consumer, delivery: Delivery) -> None:
        """Acknowledge a held input through its latest delivery (the consumer may have been reopened since)."""
        reader, latest = self._held.pop((consumer.name, delivery.stream_seq))
        await reader.ack(latest)

    async def _rebuild(self, cls: type[Agent], instance: _Instance, env: Envelope, seq: int) -> None:
        """After a restart, or for a late input of an episode whose instances were evicted, replay what this
        instance had handled: the inputs before `seq`, and those from `seq` on that the stream shows handled.

        A restarted worker cannot tell an episode that began before the crash from
        a new one without looking, so it looks for every instance it creates (one
        short read of the stream each, at most `recovery_reads` at once). Outputs of the replayed inputs are in the
        stream already, so none is published; if today's code no longer matches
        the recordings, the instance is broken and its episode fails with the cause.

        Inputs from `seq` on come again when their acknowledgements were lost: nats-server writes a consumer's
        state lazily, and one killed before it wrote recent acknowledgements delivers those inputs again once
        restarted (docs/reliability.md), to this worker or to the next. What the agent left in the stream tells
        which were handled (`History.handled_through`); it is read where a worker before this one could have
        handled an input (up to the stream's end when this worker opened its consumer), or this one before it
        forgot the episode: a new input of a restarted worker costs no more reads.
        """
        instance.rebuilt = True
        evicted = env.episode in self._evicted
        if cls.name not in self._recovering and not evicted:
            return
        outputs = evicted or seq <= self._inherited.get(cls.name, 0)
        assert self._history_reads is not None
        async with self._history_reads:
            history = await load_history(self.bus, env.episode, cls.name, cls.topics, outputs=outputs)
        if history.completed_by:  # before this worker ran: its follower of completions began after
            self._ended(env.episode, history.completed_by)
        instance.recorded = history.recordings
        instance.stored = frozenset(history.stored)
        instance.handled_seq = history.handled_through(seq)
        for at, earlier in history.inputs:
            if at > instance.handled_seq:
                break
            messages, _ = await self.bus.interceptors.inbound(earlier, cls.name)
            for message in messages:
                recorder = Recorder(recorded=history.recordings.get(message.id, {}))
                try:
                    await self._handling(cls, instance, message, recorder).run(self.settings.handler_timeout_s)
                except NonDeterminismError as exc:
                    instance.broken = f"cannot rebuild after a restart: {exc}"
                    log.error("%s", instance.broken, extra={"episode": env.episode, "agent": cls.name})
                    return

    def _handling(self, cls: type[Agent], instance: _Instance, message: Envelope, recorder: Recorder) -> Handling:
        settings = self.agent_settings.get(cls.name, {})
        recipients = self._recipients_of(cls.name)
        return Handling(
            instance.agent, cls.name, message, recorder, services=self, settings=settings, recipients=recipients
        )

    def _recipients_of(self, agent: str) -> Recipients | None:
        """Whom `agent` may send to: on a system of one's own, its agents (`SystemRef.recipients`), in every episode,
        whether its start names that system or, started by hand, none: replay takes them from the start, else from
        its configuration, as the worker does; anyone where the worker runs no such system, which the journal then
        shows, and replay follows (`held_to`)."""
        if agent not in self._recipients:
            self._recipients[agent] = None
            if self.settings.system:
                try:
                    self._recipients[agent] = load_system(self.settings.system).recipients(agent)
                except PluginError as exc:  # its agents cannot run here either (they are found through it)
                    log.warning(
                        "system %s does not load here (%s): %s's messages go unchecked",
                        self.settings.system,
                        exc,
                        agent,
                    )
        return self._recipients[agent]

    async def _handle(
        self, cls: type[Agent], instance: _Instance, env: Envelope, seq: int, slot: _Slot
    ) -> Envelope | None:
        """Handle one delivered input and publish what it leaves; an input that leaves only its
        `NoOutput` marker gets the marker back unpublished (the caller holds it).

        The handler's place under `concurrency` is given up once its last handler returned: waiting for
        JetStream to confirm the outputs is no work, and a busy worker reads those confirmations late.
        """
        if instance.broken:
            if not instance.failed:
                instance.failed = True
                failure = failure_envelopes(cls.name, env, NonDeterminismError(instance.broken))
                await self.bus.publish_all(_unsent(instance, failure))
            return None
        messages, events = await self.bus.interceptors.inbound(env, cls.name, seq)
        if events:
            await self.bus.publish_all(_unsent(instance, events))
        for n, message in enumerate(messages, 1):
            recorded = instance.recorded.pop(message.id, {})
            outbox = self.bus.outbox()
            recorder = Recorder(recorded=recorded, services=self, store=outbox.send, faults=self.request_faults)
            try:
                outputs = await self._handling(cls, instance, message, recorder).run(self.settings.handler_timeout_s)
            except NonDeterminismError as exc:  # a call recorded before a crash differs from today's
                outputs = failure_envelopes(cls.name, message, exc)
            if n == len(messages):
                slot.give_up()
            if len(messages) == 1 and len(outputs) == 1 and isinstance(outputs[0].body, NoOutput):
                await outbox.settle()
                return outputs[0]
            sent = _unsent(instance, outputs)
            for output in sent:
                await outbox.send(output)
            await outbox.settle()
            self._arm([env for env in sent if isinstance(env.body, Timer)])
        return None

    def _arm(self, timers: list[Envelope]) -> None:
        """Fire each of `timers` when it is due; none once the worker stops (a handler still draining set them):
        they are stored, and the worker after this one rearms them (`pending_timers`)."""
        assert self._timers is not None
        if self._stopping.is_set():
            return
        for timer in timers:
            assert isinstance(timer.body, Timer)
            self._timers.start_soon(self._fire, timer, timer.body.after_s)

    async def _fire(self, timer: Envelope, after_s: float) -> None:
        await anyio.sleep(after_s)
        if timer.episode not in self._finished and timer.episode not in self._evicted:  # nobody waits any more
            await self.bus.publish(timer_fired(timer))

    async def _follow_completions(self, subjects: list[str], after: int, scope: anyio.CancelScope) -> None:
        """Follow each of `subjects` (a shard of several partitions has one per partition) until `scope` ends."""
        with scope:
            async with anyio.create_task_group() as tg:
                for subject in subjects:
                    tg.start_soon(functools.partial(self.bus.follow, subject, self._on_completed, after=after))

    async def _on_completed(self, delivery: Delivery) -> None:
        try:
            ended_by = delivery.envelope().sender
        except DecodeError:
            ended_by = ""  # dead-lettered when it was published; its episode is over all the same
        self._ended(self.bus.subjects.event_episode(delivery.subject), ended_by)

    def _ended(self, episode: str, by: str) -> None:
        """`episode` was completed by `by`: its instances are forgotten in time, and if the runner ended it, its
        model calls are cancelled and refused. The first completion counts: `_finished` stays in order of
        completion (see `_evict`)."""
        self._finished.setdefault(episode, anyio.current_time())
        if by == RUNNER:
            self._calling.close(episode)

    async def _evict_finished(self, scope: anyio.CancelScope) -> None:
        """Forget instances of episodes completed `linger_s` ago (late messages still find them until then)."""
        with scope:
            while True:
                await anyio.sleep(max(self.settings.linger_s / 2, 0.01))  # a linger of 0 must not spin
                self._evict(anyio.current_time() - self.settings.linger_s)

    async def _keep_held(self, scope: anyio.CancelScope) -> None:
        """Tell NATS that held deliveries are in progress, several times per ack wait.

        A message waits for its turn behind the handlers of its (episode, agent), and a
        handler may wait minutes on a slow model: without this, NATS would deliver the
        message again after `ack_wait_s` and the agent would see it twice.
        """
        with scope:
            while True:
                await anyio.sleep(self.settings.ack_wait_s / 3)
                for consumer, delivery in list(self._held.values()):
                    await consumer.in_progress(delivery)

    def _evict(self, cutoff: float) -> None:
        """Forget the episodes completed before `cutoff`: `_finished` is in order of completion, so only
        those are looked at, each in one step (a worker holding thousands of instances otherwise stalls)."""
        while self._finished:
            episode, at = next(iter(self._finished.items()))
            if at >= cutoff:
                break
            del self._finished[episode]
            self._instances.pop(episode, None)  # a task handling a late input of it finishes its inbox first
            self.bus.interceptors.forget(episode)
            _remember(self._evicted, episode)

    async def _on_status(self, msg: Message) -> None:
        ask = decode_notice(msg.data, StatusAsk, subject=msg.subject)
        if ask is not None:
            status = self._status(model_calls_only=ask.model_calls_only)
            await tell(self.bus, STATUS_SERVICE, ask.token, msgspec.json.encode(status))

    def _status(self, *, model_calls_only: bool) -> WorkerStatus:
        calls = [in_flight(call) for call in self.model_calls]
        if model_calls_only:
            return WorkerStatus(worker=self.name, model_calls=calls)
        live = [
            (episode, i.agent.service)
            for episode, instances in self._instances.items()
            if episode not in self._finished
            for i in instances.values()
        ]
        return WorkerStatus(
            worker=self.name,
            pid=os.getpid(),
            agents=sorted(self.serving()),
            shard=f"{self.settings.shard}/{self.settings.shards}",
            system=self.settings.system,
            episodes=sorted({episode for episode, service in live if not service}),
            services=sorted({episode for episode, service in live if service}),
            handled=self.handled,
            model_calls=calls,
        )


class _PlaceFreeingBackend:
    """A backend whose calls give the handler's place under the worker's `concurrency` limit up while the
    model answers, and take one again before the handler goes on; a call of an episode the runner ends
    meanwhile, or had ended, fails with a `ModelError` (`_CallsInFlight`).

    The limit bounds handlers at work, not episodes waiting: against a model that takes seconds per call,
    a worker holds as many episodes in flight as the runner starts, and runs `concurrency` handlers at once.
    """

    __slots__ = ("_backend", "_calls", "_limiter", "_reporting")

    def __init__(self, backend: ModelBackend, limiter: anyio.CapacityLimiter, calls: _CallsInFlight) -> None:
        self._backend = backend
        self._limiter = limiter
        self._calls = calls
        self._reporting = getattr(backend, "complete_call", None)
        """The backend's own `complete_call`, if it reports its attempts: looked up once, not per call."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        freed = _give_place_up(self._limiter)
        try:
            return await self._backend.complete(request)
        finally:
            if freed:
                await _take_place_again(self._limiter)

    async def complete_call(self, request: LlmRequest, call: ModelCall) -> LlmResponse:
        scope = anyio.CancelScope()
        if not self._calls.add(call.episode, scope):
            raise _abandoned(call)
        freed = _give_place_up(self._limiter)
        try:
            with scope:
                if self._reporting is not None:
                    return await self._reporting(request, call)  # type: ignore[no-any-return]
                return await self._backend.complete(request)
            raise _abandoned(call)  # only a cancelled scope gets here
        finally:
            self._calls.remove(call.episode, scope)
            if freed:
                await _take_place_again(self._limiter)

    async def aclose(self) -> None:
        await self._backend.aclose()


def _abandoned(call: ModelCall) -> ModelError:
    return ModelError(
        f"the runner ended episode {call.episode} while {call.agent}'s model call (role {call.role}) was in"
        " flight or about to start: nobody waits for its answer, so it was cancelled",
        retryable=False,
    )


def _give_place_up(limiter: anyio.CapacityLimiter) -> bool:
    """Hand the current task's place back while its model answers; False for a task the handler started itself,
    which holds no place. Plain calls, not an async context manager: one runs per model call, thousands at once."""
    try:
        limiter.release()
    except RuntimeError:
        return False
    return True


async def _take_place_again(limiter: anyio.CapacityLimiter) -> None:
    """Take a place again (even when cancelled, so that the `_Slot` around the handler has a place to release): at
    once while one is free and nobody waits, else in turn. `acquire` alone would yield to the event loop first,
    and under load one turn of the loop is tenths of a second, for every model call of every handler."""
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        with anyio.CancelScope(shield=True):
            await limiter.acquire()


class _Slot:
    """A place under the worker's `concurrency` limit, taken without a checkpoint while one is free, and
    given up at the end of the block or before (`give_up`)."""

    __slots__ = ("_held", "_limiter")

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self._limiter = limiter
        self._held = False

    async def __aenter__(self) -> _Slot:
        try:
            self._limiter.acquire_nowait()
        except anyio.WouldBlock:
            await self._limiter.acquire()
        self._held = True
        return self

    def give_up(self) -> None:
        """Give the place up now: what the handler still does is waiting, not work."""
        if self._held:
            self._held = False
            self._limiter.release()

    async def __aexit__(self, *exc: object) -> None:
        self.give_up()
