"""Starting episodes and waiting for them to complete, from outside the agents."""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Collection, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Annotated

import anyio
import msgspec

from faultline._errors import BusError, DecodeError, JournalError, NoResponderError, PluginError, ReplyTimeoutError
from faultline.bus import Bus, Delivery, Message, asked_again, decode_notice, hear
from faultline.core import (
    HELPERS,
    RUNNER,
    DefenseFired,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    MessageBody,
    ModelCall,
    Start,
    body_kind,
    error_completion,
    helper_agent,
    load_system,
    start_envelope,
    started_envelope,
)

log = logging.getLogger(__name__)

STATUS_SERVICE = "status"
"""The service every worker answers with who it is and what it runs (`faultline status`, the run's model calls)."""
JOURNAL_SERVICE = "journal"
"""The service every journal shard answers with how far it has journaled the stream (`ask_journal`)."""
PROCESS_SERVICE = "process"
"""What every process of a system tells of itself: READY, once it serves (`announce_ready`; `up` waits for it)."""
READY = "ready"
JOURNAL_STATE = "state"
"""What a journal shard tells for JOURNAL_SERVICE when it cannot write, and when it can again (`JournalState`)."""

STORED_READ_TIMEOUT_S = 10.0
"""How long reading completions back from the stream may take after a reconnect."""
STORED_READ_RETRY_S = 0.5
"""How soon a read of completions that failed (a stream between leaders) is tried again."""
JOURNAL_ASK_TIMEOUT_S = 2.0
"""How long a runner waits for the journal service to say whether it can write."""

STATUS_WINDOW_S = 0.5
"""How long a runner collects the workers' answers when it asks what they are doing."""
STATUS_WAIT_S = 5.0
"""How long `faultline status` waits for the workers the `up` it asks runs: a busy worker may answer late, and one
that does not answer in this time is reported silent."""


class JournalState(msgspec.Struct):
    """What the journal service says of itself: why it cannot write ("" when it can), and how far it is.

    A journal of several shards answers once per shard; `ask_journal` makes them one state, in which
    `last_seq` is the sequence every shard has reached and `stuck` names each shard that cannot write.
    """

    stuck: str = ""
    last_seq: int = 0
    rows: int = 0
    shard: int = 0
    shards: int = 1
    journal: str = ""
    """The journal it writes, as a whole (the file, or a set's folder), by its absolute path on the service's host."""


JOURNAL_REASK_S = 0.1
"""How soon a question the journal answered early is asked again."""


async def ask_journal(bus: Bus, timeout_s: float, until: int = 0) -> JournalState:
    """The journal's state once it holds the stream up to `until` (at once if a shard cannot write).

    A shard answers early when more questions wait on it than it keeps (anyone may ask): it is then asked again,
    until `timeout_s` has passed. NoResponderError when no journal service runs; ReplyTimeoutError when not every
    shard answered, or the journal did not reach `until`, within `timeout_s`, with what it said in its message.
    """
    deadline = anyio.current_time() + timeout_s
    state = await _ask_journal_once(bus, timeout_s, until)
    while not (state.stuck or state.last_seq >= until):
        behind = f"the journal holds the stream up to sequence {state.last_seq}, not yet {until}, after {timeout_s:g}s"
        remaining = deadline - anyio.current_time() - JOURNAL_REASK_S
        if remaining <= 0:
            raise ReplyTimeoutError(behind)
        await anyio.sleep(JOURNAL_REASK_S)  # its waiting questions are full: give it a moment before asking again
        try:
            state = await _ask_journal_once(bus, remaining, until)
        except (NoResponderError, ReplyTimeoutError):
            raise ReplyTimeoutError(behind) from None
    return state


async def _ask_journal_once(bus: Bus, timeout_s: float, until: int) -> JournalState:
    subject = bus.subjects.svc(JOURNAL_SERVICE)
    enough = functools.partial(_every_shard, until=until)
    answers = await bus.request_all(subject, msgspec.json.encode({"until": until}), timeout_s, enough=enough)
    states = _states(answers)
    if not states:
        raise (ReplyTimeoutError if answers else NoResponderError)(
            f"no journal service answers on {subject}: start it (`faultline up`, or `faultline journal serve` on"
            " its host), or give it more time"
        )
    shards = states[0].shards
    stuck = "; ".join(s.stuck if shards == 1 else f"shard {s.shard}: {s.stuck}" for s in states if s.stuck)
    state = JournalState(
        stuck=stuck,
        last_seq=min(s.last_seq for s in states),
        rows=sum(s.rows for s in states),
        shards=shards,
        journal=states[0].journal,
    )
    if len(states) < shards and not stuck:
        missing = sorted(set(range(shards)) - {s.shard for s in states})
        raise ReplyTimeoutError(
            f"journal shards {', '.join(map(str, missing))} of {shards} did not answer within {timeout_s:g}s"
            " (restarting, or busy: see their logs)"
        )
    return state


def _states(answers: list[bytes]) -> list[JournalState]:
    """One state per shard that answered, ignoring what is not a state."""
    states: dict[int, JournalState] = {}
    for answer in answers:
        state = decode_notice(answer, JournalState)
        if state is not None:
            states.setdefault(state.shard, state)
    return list(states.values())


def _every_shard(answers: list[bytes], *, until: int) -> bool:
    """Whether every shard answered, or one that cannot write did while the others hold the question until they
    reach `until`: with nothing to reach every shard answers at once, and each that cannot write is named."""
    states = _states(answers)
    return bool(states) and (len(states) >= states[0].shards or (until > 0 and any(s.stuck for s in states)))


class CallInFlight(msgspec.Struct, frozen=True, kw_only=True):
    """A model call a worker is waiting on, as its status reports it."""

    episode: str
    agent: str
    role: str
    attempt: int
    age_s: float
    """Since the call began, its earlier attempts and waits included."""
    attempt_age_s: float = 0.0
    """Since the attempt that runs began: each is bounded by the role's `timeout_s`, the call as a whole is not."""

    def describe(self) -> str:
        if self.attempt == 1:
            return f"{self.agent}'s model call (role {self.role}, attempt 1, {self.age_s:.0f}s)"
        return (
            f"{self.agent}'s model call (role {self.role}, attempt {self.attempt} for {self.attempt_age_s:.0f}s,"
            f" {self.age_s:.0f}s in all)"
        )


def in_flight(call: ModelCall) -> CallInFlight:
    now = time.monotonic()
    return CallInFlight(
        episode=call.episode,
        agent=call.agent,
        role=call.role,
        attempt=call.attempt,
        age_s=now - call.started,
        attempt_age_s=now - call.attempt_started,
    )


class StatusAsk(msgspec.Struct, frozen=True):
    """What a status request asks the workers.

    The runner asks every second for the model calls in flight alone: a worker holding thousands of
    episodes need not list them all each time.
    """

    token: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{16}$")]
    """Where the workers tell their answers: `Subjects.tell(STATUS_SERVICE, <worker's user>, token)`. An answer
    on the asker's inbox could come from any worker in any worker's name; a tell names its teller."""
    model_calls_only: bool = False


class WorkerStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a worker answers a status request (`faultline status`): only `worker` and `model_calls` when asked for
    the model calls alone (what is left at its default is not sent: the runner asks every second)."""

    worker: str
    """The process's name, in its own word."""
    identity: str = ""
    """The NATS user that told the answer, which the server vouches for (`worker_statuses` sets it from the
    subject, whatever the worker sent)."""
    pid: int = 0
    agents: list[str] = []
    shard: str = ""
    """`k/N`: its shard of its group's N."""
    system: str = ""
    """The system its agents are of, as its configuration names it (`[system] class`)."""
    episodes: list[str] = []
    """The episodes in flight in it."""
    services: list[str] = []
    """The episodes in flight in it whose agents serve others (helpers that answer every episode)."""
    handled: int = 0
    model_calls: list[CallInFlight] = []


@dataclass(frozen=True, slots=True)
class WorkerPlace:
    """A worker that a system's configuration runs: shard `shard` of `shards` of worker group `group`, serving
    `agents`, whatever its process calls itself (one started by hand names itself)."""

    group: str
    agents: tuple[str, ...]
    shard: int = 0
    shards: int = 1

    @property
    def name(self) -> str:
        """What `faultline up` calls the process it starts for this place."""
        return f"worker-{self.group}-{self.shard}"

    @property
    def shard_text(self) -> str:
        """`k/N`, as a worker of this place tells its shard (`WorkerStatus.shard`)."""
        return f"{self.shard}/{self.shards}"

    def missing(self, statuses: Iterable[WorkerStatus]) -> tuple[str, ...]:
        """The agents of this place that none of the workers that told `statuses` serves in its shard."""
        served = {agent for status in statuses if status.shard == self.shard_text for agent in status.agents}
        return tuple(agent for agent in self.agents if agent not in served)


async def worker_statuses(
    bus: Bus,
    window_s: float = STATUS_WINDOW_S,
    *,
    model_calls_only: bool = False,
    expected: Collection[str] = (),
    places: Sequence[WorkerPlace] = (),
) -> list[WorkerStatus]:
    """What every worker on `bus` tells within `window_s` when asked, each with the identity it told under; an
    answer that is not one is left out (any worker may send anything). Returns sooner once every worker named in
    `expected` has answered and every agent of the `places` is served."""
    ask = StatusAsk(token=secrets.token_hex(8), model_calls_only=model_calls_only)
    statuses: list[WorkerStatus] = []
    waiting = set(expected)
    everyone = anyio.Event()

    async def on_told(teller: str, msg: Message) -> None:
        status = decode_notice(msg.data, WorkerStatus, subject=msg.subject)
        if status is not None:
            statuses.append(msgspec.structs.replace(status, identity=teller))
            waiting.discard(status.worker)
            if (expected or places) and not waiting and not any(place.missing(statuses) for place in places):
                everyone.set()

    sub = await hear(bus, STATUS_SERVICE, ask.token, on_told)
    try:
        await bus.notify(bus.subjects.svc(STATUS_SERVICE), msgspec.json.encode(ask))
        with anyio.move_on_after(window_s):  # else no count to wait for: whoever tells in time is counted
            await everyone.wait()
    finally:
        await sub.unsubscribe()
    bus.check_subscribed(bus.subjects.tell(STATUS_SERVICE, "*", ask.token))  # a credential that may not hear them
    return sorted(statuses, key=lambda status: (status.worker, status.identity))


def system_agents(statuses: Sequence[WorkerStatus], roster: Sequence[str] = HELPERS) -> set[str]:
    """The agents of the running system whose workers told `statuses` (none when no worker did): those they serve,
    every agent of the system each says it runs (a busy worker may not have answered in time), and on the built-in
    tool-use system the helpers of `roster`, which its roster worker serves once an episode asks for them."""
    agents = {agent for status in statuses for agent in status.agents}
    for name in {status.system for status in statuses if status.system}:  # each system loaded once
        try:
            system = load_system(name)
        except PluginError:  # its code is not installed here: what its workers serve is all there is to know
            continue
        agents.update(system.agent_names)
        if not system.is_user_system:
            agents.update(map(helper_agent, roster))
    return agents


async def model_calls_in_flight(bus: Bus, window_s: float = STATUS_WINDOW_S) -> list[CallInFlight]:
    """Every model call the workers on `bus` are waiting on, the oldest first."""
    statuses = await worker_statuses(bus, window_s, model_calls_only=True)
    return sorted((call for status in statuses for call in status.model_calls), key=lambda call: -call.age_s)


async def start_episode(
    bus: Bus, episode: str, to: str, started: EpisodeStarted, body: MessageBody | None = None
) -> None:
    """Journal the episode's start, then hand the first message to agent `to` (unless `check_journal` refuses)."""
    await check_journal(bus)
    await bus.publish_all([started_envelope(episode, started), start_envelope(episode, 0, to, body or Start())])


async def check_journal(bus: Bus, timeout_s: float = JOURNAL_ASK_TIMEOUT_S) -> None:
    """Raise JournalError while the journal service reports that it cannot write: no episode starts then.

    A journal service that does not answer (not started, restarting) is no reason
    to refuse: the stream keeps every message until it is back.
    """
    try:
        stuck = (await ask_journal(bus, timeout_s)).stuck
    except (NoResponderError, ReplyTimeoutError):
        return
    if stuck:
        raise JournalError(
            f"new episodes are refused while the journal cannot write ({stuck}); nothing is lost: the stream"
            " keeps every message for the journal to take in once its file can be written again"
        )


class JournalGate:
    """`check_journal` for a run that starts many episodes at once: the starts that come while an ask is out
    wait for its answer instead of asking again. A run filling up starts hundreds of episodes a second, and
    every journal shard answers every ask."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._ask: _Ask | None = None

    async def check(self) -> None:
        """Return if the journal can write; JournalError, as `check_journal` raises it, while it cannot."""
        ask = self._ask
        if ask is not None:
            await ask.answered.wait()
            if ask.refusal:
                raise JournalError(ask.refusal)
            return
        self._ask = ask = _Ask()
        try:
            await check_journal(self._bus)
        except JournalError as exc:
            ask.refusal = str(exc)
            raise
        finally:
            self._ask = None
            ask.answered.set()


@dataclass
class _Ask:
    answered: anyio.Event = field(default_factory=anyio.Event)
    refusal: str = ""


async def recorded_run(bus: Bus, episode: str, timeout_s: float = STORED_READ_TIMEOUT_S) -> str | None:
    """The run `episode`'s start records ("" for none), read from the stream; None where the stream holds no start
    of it (not yet, or no more) or cannot be read now. What a worker scopes a run's fault rules by."""
    try:
        stored = await bus.read_envelopes([bus.subjects.event("started", episode)], timeout_s)
    except BusError as exc:
        log.debug("cannot read the start of episode %s: %s", episode, exc)
        return None
    return next((env.body.run for _, env in stored if isinstance(env.body, EpisodeStarted)), None)


DAY_S = 86_400.0
"""The oldest a timed-out episode's last message may be said to be: a sender's clock past that is not believed."""


async def last_words(bus: Bus, episode: str, timeout_s: float = STORED_READ_TIMEOUT_S) -> str:
    """What the episode's last message on the stream was, in words, for the cause of a timeout: where an episode
    went quiet says why (a question nobody answered, a message a defense dropped); "" when it cannot be read."""
    s = bus.subjects
    subjects = [s.direct(episode, "*"), s.topic(episode, "*"), s.event("*", episode)]
    try:
        stored = await bus.read_envelopes(subjects, timeout_s)
    except BusError as exc:
        log.debug("cannot read episode %s back: %s", episode, exc)
        return ""
    if not stored:
        return ""
    last = stored[-1][1]
    age = time.time() - last.ts
    ago = f"{age:.0f}s before" if 0 <= age < DAY_S else "before"  # its clock is its sender's to set
    body = last.body
    if isinstance(body, DefenseFired) and body.agent == last.sender:  # a worker says what it dropped, not another
        said = f"the {body.defense} defense dropped {body.agent}'s input {body.message_id} ({body.reason})"
    else:
        to = f" to {last.recipient}" if last.recipient else f" on #{last.topic}" if last.topic else ""
        said = f"{body_kind(body)} from {last.sender}{to}"
    return f"its last message, {ago}: {said}"


class Completions:
    """Collects `episode completed` events as they happen (the first one per episode counts).

    Only the runner and the environment agents (`completers`) may complete an episode: the server
    refuses a completion from any other agent, and one that comes anyway is logged and ignored. An
    agent whose handler raised publishes an `ErrorRaised`; this turns it into the episode's
    completion (`error_completion`).

    Completions are read from the stream as it stores them (`Bus.follow`), not heard on core NATS, which
    drops what is on its way when a node, or the route between two, is lost: a runner that missed a
    completion would wait for it until its episode's time limit (bench/chaos.py, seed 18 of `--kinds bridge`).
    """

    def __init__(self, bus: Bus, completers: Collection[str] = ("env",)) -> None:
        self.bus = bus
        self.completers = {RUNNER, *completers}
        self.done: dict[str, EpisodeCompleted] = {}
        self._waiting: dict[str, anyio.Event] = {}
        self._open = AsyncExitStack()

    async def __aenter__(self) -> Completions:
        """Follow what the stream stores from now on (every episode started inside the block)."""
        after = await self._stream_last_seq()
        async with AsyncExitStack() as stack:
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # runs first on the way out: the task group then ends
            for event in ("completed", "error"):
                subject = self.bus.subjects.event(event, "*")
                tasks.start_soon(functools.partial(self.bus.follow, subject, self._on_delivery, after=after))
            self._open = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # The followers end without the block's exception: handed to their task group, it would come out
        # wrapped in an exception group, and a caller's `except JournalError` would no longer see it.
        await self._open.aclose()

    async def _stream_last_seq(self) -> int:
        """The stream's last sequence, asked again while it has no leader as long as a publish waits out a lost
        server (`publish_retry_s`): a run begun while its cluster chooses leaders waits for them, as its starts
        would, where it stopped after 10 s with a bare TimeoutError (bench/chaos.py seed 1531 with --overlap)."""
        patience_s = self.bus.settings.publish_retry_s
        with anyio.move_on_after(patience_s):
            return (await asked_again(self.bus.stream_state)).last_seq
        raise BusError(f"stream {self.bus.subjects.stream} answered no request for its state in {patience_s:g}s")

    async def _on_delivery(self, delivery: Delivery) -> None:
        try:
            env = delivery.envelope()
        except DecodeError:
            return  # dead-lettered when it was published
        await self._handle(env)

    async def _handle(self, env: Envelope) -> None:
        if isinstance(env.body, ErrorRaised) and env.episode not in self.done:
            try:
                await self.bus.publish(error_completion(env))
            except BusError as exc:  # the episode then ends at its timeout: the run goes on
                log.warning("cannot complete episode %s after its error: %s", env.episode, exc)
        else:
            self._take(env)

    def _take(self, env: Envelope) -> None:
        if not isinstance(env.body, EpisodeCompleted) or env.episode in self.done:
            return
        if env.sender not in self.completers:
            log.error(
                "ignored a completion of episode %s by %s, which may not complete episodes", env.episode, env.sender
            )
            return
        self.done[env.episode] = env.body
        waiting = self._waiting.pop(env.episode, None)
        if waiting is not None:
            waiting.set()

    async def wait(self, episodes: Iterable[str]) -> dict[str, EpisodeCompleted]:
        """Block until every episode in `episodes` has completed (inside this block)."""
        wanted = list(episodes)
        for episode in wanted:
            if episode not in self.done:
                await self._waiting.setdefault(episode, anyio.Event()).wait()
        return {e: self.done[e] for e in wanted}

    async def stored(self, episodes: Iterable[str]) -> dict[str, EpisodeCompleted]:
        """The completions of `episodes`, with those the stream holds taken as if they had arrived.

        Core NATS delivers at most once: a completion sent as a node stops can miss this subscriber with no
        reconnect of its own to tell of it (found by bench/chaos.py seed 803). Ask this before deciding an
        episode never completed. Asked again while the stream has no leader, for up to STORED_READ_TIMEOUT_S.
        """
        wanted = list(episodes)
        with anyio.move_on_after(STORED_READ_TIMEOUT_S):
            while missing := [e for e in wanted if e not in self.done]:
                try:
                    await self._read_stored(missing)
                    break
                except BusError:
                    await anyio.sleep(STORED_READ_RETRY_S)
        return {e: self.done[e] for e in wanted if e in self.done}

    async def _read_stored(self, episodes: list[str]) -> None:
        """Take the completions and errors of `episodes` from the stream (two reads, however many episodes)."""
        wanted = set(episodes)
        subjects = [self.bus.subjects.event(event, "*") for event in ("completed", "error")]
        for _, env in await self.bus.read_envelopes(subjects, STORED_READ_TIMEOUT_S):
            if env.episode in wanted:
                await self._handle(env)
