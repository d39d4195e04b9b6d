"""Forks: an episode's history up to a position, one message changed, the rest run live.

A fork runs in this process. Every agent of the episode is rebuilt by replaying
its journaled inputs before the fork position, with every recorded call served
from the journal (no model is called again). Then the message at the position
is changed (kept, dropped, replaced, restored from the fault that altered
it, or put through a fault as a worker's fault interceptor would), the
runner's Starts journaled after it are delivered as they were, and the
episode carries on live: agents handle messages in the order they
are appended to the journal, models are called through the configured
backends, and every row goes under a new episode id whose `episode started`
event names `forked_from` and `forked_at`. When no message is left in flight
and no one completed the episode, the fork has stalled and is completed as a
failure. An `Answer` makes the runtime, not the model, give the first model
call of the handler at the position its output (an oracle's action): it is
journaled as that call's recording, so the fork replays like any other. Timers are virtual: one fires (earliest set first) only when no message is
in flight, which is the order a live wait that runs out would see.

The live part runs under the fault rules the source had in force (`_rules_in_force`):
what its handlers send and their own model requests go through a fault interceptor
as on a worker, semantic faults asking the injector model through the sender's
context, every fault journaled as its event. A fault is seeded by rule and message
id, so a message the fork sends again under its old id meets the same fault; an
`UndoFault` spares the one message it undid, an `UndoRule` leaves its rule out. The rules travel in the fork's
`episode started` event, so a fork of a fork runs under them too.

The fork's rows, its copied history and then what it ran, are written in one
transaction when it ends (forks running side by side in one process may share
a destination), to a journal of forks beside the source
(`forks_path`) unless told otherwise; that journal replays on its own. The fork
id is derived from what was forked, so a fork already in the destination is
reported and neither run nor written again, and an interrupted fork leaves no
rows. The source is written only when it is named as the destination.
"""

from __future__ import annotations

import fnmatch
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from faultline._errors import BusError, FaultlineError, JournalError
from faultline.core import (
    DEFAULT_HANDLER_TIMEOUT_S,
    RUNNER,
    Agent,
    Control,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    FaultApplied,
    Handling,
    LlmResponse,
    LlmToolCall,
    MessageBody,
    ModelBackend,
    ModelCall,
    Outbound,
    Recipients,
    Recorder,
    Recording,
    Start,
    Subjects,
    SystemRef,
    Timer,
    ToolCall,
    derive_id,
    error_completion,
    in_run,
    runner_completion,
    started_envelope,
    timer_fired,
)
from faultline.envs import DomainCatalog
from faultline.faults import (
    CONTROL_EPISODE,
    FAULTS_CONTROL,
    FaultInterceptor,
    FaultRule,
    Injector,
    RuleSet,
    add_rule_control,
    apply_fault,
    context_injector,
    fault_event,
)
from faultline.journal import EpisodeSummary, Incoming, Journal, JournalReader, JournalRow, verify
from faultline.replay._replay import (
    AgentLookup,
    agent_tracks,
    episode_lookup,
    episode_system,
    fork_changes,
    held_to,
    participants,
)

MAX_FORK_MESSAGES = 5_000
"""A fork that handles more messages than this is stopped and failed (a loop)."""


class Keep(msgspec.Struct, frozen=True, tag="keep"):
    """Deliver the message at the position again, as it was (the rest runs live)."""


class Drop(msgspec.Struct, frozen=True, tag="drop"):
    """The message at the position never arrives."""


class Replace(msgspec.Struct, frozen=True, tag="replace"):
    """The message at the position carries this body instead."""

    body: MessageBody


class UndoFault(msgspec.Struct, frozen=True, tag="undo_fault"):
    """The position holds a fault event: deliver the original message it had replaced."""


class UndoRule(UndoFault, frozen=True, tag="undo_rule"):
    """As `UndoFault`, and no fault of that event's rule applies in the fork from there on: a rule that altered
    several messages of the episode (a cycle on every message of an agent) is undone whole."""


class Inject(msgspec.Struct, frozen=True, tag="inject"):
    """The message at the position goes through fault `fault` as a worker's fault interceptor
    would apply it: the fork journals the fault event and delivers what the fault made."""

    fault: str
    params: dict[str, Any] = {}
    rule_id: str = "injected"


Change = Keep | Drop | Replace | UndoFault | UndoRule | Inject


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """The output the runtime gives the first model call `agent` makes handling the fork's message.

    The backend is not asked; the call is journaled like any other, with this response.
    """

    agent: str
    response: LlmResponse

    @classmethod
    def acting(cls, agent: str, action: dict[str, Any], *, model: str, call_id: str) -> Answer:
        """The answer that carries `action` out: a tool call (`name`, `arguments`, as `call_id`), or a message
        to the user (`name` "reply", its `text`, and `done` when it ends the conversation)."""
        if action["name"] == "reply":
            done = {"done": True} if action.get("done") else {}
            response = LlmResponse(content=action["text"], model=model, finish_reason="stop", metadata=done)
            return cls(agent=agent, response=response)
        arguments = dict(action.get("arguments") or {})
        call = LlmToolCall(
            id=call_id, name=action["name"], arguments=arguments, raw_arguments=msgspec.json.encode(arguments).decode()
        )
        return cls(agent=agent, response=LlmResponse(tool_calls=[call], model=model, finish_reason="tool_calls"))


class ForkResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a fork ended, and where its rows are; `existing`: it was there already, nothing ran.

    `outcome` is the fork's completion with the numbers of what it ran, as `journal episodes` reads them: its
    `latency_s` is its live part's seconds and its `tokens` those of the model calls it made. The completion its
    agents journaled counts from the episode's start in its source, and their tallies count the history's calls.
    """

    episode: str
    forked_from: str
    at: int
    change: str
    original: EpisodeCompleted | None
    outcome: EpisodeCompleted
    rows: int
    live_messages: int
    seconds: float
    journal: str = ""
    existing: bool = False
    model_calls: int = 0
    """Model calls the fork made live (0 for one that existed)."""


def fork_id(
    episode: str,
    at: int,
    change: Change,
    settings: Mapping[str, Any] | None = None,
    answer: Answer | None = None,
    draw: int = 0,
) -> str:
    """A deterministic, subject-safe id for the fork of `episode` at `at` with `change`."""
    parts: list[Any] = [episode, at, msgspec.to_builtins(change), settings or {}]
    if answer is not None:
        parts.append(msgspec.to_builtins(answer))
    if draw:
        parts.append({"draw": draw})
    tag = zlib.crc32(msgspec.json.encode(parts))
    base = episode if len(episode) <= 48 else episode[:48]
    return f"{base}-f{at}-{tag:08x}"


def forks_path(journal: str | Path) -> Path:
    """Where forks of the journal at `journal` go by default: `<stem>.forks.sqlite` beside it."""
    return Path(journal).with_suffix(".forks.sqlite")


@dataclass
class _LiveServices:
    backends: Callable[[str], ModelBackend]
    cache: dict[str, ModelBackend] = field(default_factory=dict)
    model_calls: set[ModelCall] = field(default_factory=set)
    made: int = 0
    """Model calls made live."""

    def backend_for(self, role: str) -> ModelBackend:
        self.made += 1
        if role not in self.cache:
            self.cache[role] = self.backends(role)
        return self.cache[role]

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        raise BusError(f"service {service!r} is not reachable from a fork (it runs without a bus)")


@dataclass
class _Oracle:
    """The backend of one answered call: it returns the answer and asks no model."""

    response: LlmResponse

    async def complete(self, request: Any) -> LlmResponse:
        return self.response

    async def aclose(self) -> None:
        return None


@dataclass
class _Answered:
    """The services of a handler whose first model call the runtime answers (`Answer`)."""

    live: _LiveServices
    answer: LlmResponse | None
    model_calls: set[ModelCall] = field(init=False)

    def __post_init__(self) -> None:
        self.model_calls = self.live.model_calls  # the same set: calls in flight are the fork's

    def backend_for(self, role: str) -> ModelBackend:
        if self.answer is None:
            return self.live.backend_for(role)
        answer, self.answer = self.answer, None
        return _Oracle(answer)

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        return await self.live.request(service, payload, timeout_s)


@dataclass
class _Fork:
    """The in-process continuation: a queue of messages in journal order, one instance per agent.

    Rows are held in `pending` until the fork ends, then written in one transaction.
    """

    episode: str
    classes: dict[str, type[Agent]]
    services: _LiveServices
    stream: str
    pending: list[Incoming] = field(default_factory=list)
    subjects: Subjects = field(default_factory=Subjects)
    instances: dict[str, Agent] = field(default_factory=dict)
    queue: deque[Envelope] = field(default_factory=deque)
    timers: deque[Envelope] = field(default_factory=deque)
    completed: EpisodeCompleted | None = None
    handled: int = 0
    answers: dict[tuple[str, str], LlmResponse] = field(default_factory=dict)
    """(agent, message id) -> the answer to that handler's first model call (`Answer`)."""
    faults: FaultInterceptor = field(default_factory=lambda: FaultInterceptor(RuleSet()))
    """The source's fault rules, applied to what the fork's handlers send as a worker's interceptor would."""
    handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S
    """How long each handler may run, history and live part alike: past it, it fails as a worker's would."""
    held: dict[str, Recipients | None] = field(default_factory=dict)
    """Whom each agent may send to: whom the source's workers held it to (`held_to`); anyone where none is given."""

    async def keep(self, env: Envelope) -> None:
        self.record([env])

    def record(self, envelopes: list[Envelope], bodies: list[bytes | None] | None = None) -> None:
        """Add rows for the journal only; `bodies` keeps copied history byte for byte where given."""
        for env, body in zip(envelopes, bodies or [None] * len(envelopes), strict=True):
            subject = self.subjects.for_envelope(env)
            self.pending.append(Incoming(stream=self.stream, stream_seq=0, subject=subject, envelope=env, body=body))

    def write(self, envelopes: list[Envelope]) -> None:
        """Record for the journal and put deliverable messages in flight."""
        self.record(envelopes)
        for env in envelopes:
            if isinstance(env.body, ErrorRaised) and self.completed is None:
                self.write([error_completion(env)])  # as the runner does live
            elif isinstance(env.body, EpisodeCompleted):
                self.completed = self.completed or env.body
            elif isinstance(env.body, Timer):
                self.timers.append(env)
            elif env.recipient or env.topic:
                self.queue.append(env)

    def recipients(self, env: Envelope) -> list[str]:
        if env.recipient:
            return [env.recipient] if env.recipient in self.classes else []
        return [n for n, c in self.classes.items() if env.topic in c.topics and n != env.sender]

    async def handle(
        self, name: str, env: Envelope, recorded: Mapping[int, Recording] | None = None, skip: set[str] | None = None
    ) -> None:
        """Run one handler: recorded calls are served, the rest made live; outputs in `skip` exist already."""

        answer = self.answers.pop((name, env.id), None)
        services = self.services if answer is None else _Answered(self.services, answer)
        faults = self.faults.request_fault(self.keep)
        recorder = Recorder(recorded=recorded or {}, services=services, store=self.keep, faults=faults)
        recipients = self.held.get(name)
        handling = Handling(self.instances[name], name, env, recorder, services=services, recipients=recipients)
        outputs = await handling.run(self.handler_timeout_s)
        for output in outputs:
            if not skip or output.id not in skip:
                sent = Outbound(output)
                results = await self.faults.outbound(sent)
                self.record(sent.events)
                self.write(list(results))

    async def run(self) -> None:
        while (self.queue or self.timers) and self.completed is None:
            if not self.queue:
                self.write([timer_fired(self.timers.popleft())])
                continue
            env = self.queue.popleft()
            for name in self.recipients(env):
                self.handled += 1
                if self.handled > MAX_FORK_MESSAGES:
                    cause = f"fork stopped after {MAX_FORK_MESSAGES} messages (a loop?)"
                    self.write([runner_completion(self.episode, "failure", cause)])
                    return
                await self.handle(name, env)


def _copy(env: Envelope, episode: str, settings: Mapping[str, Any] | None) -> Envelope:
    """A history message re-addressed to the fork; Start data takes the `settings` overrides."""
    if settings and isinstance(env.body, Start):
        env = msgspec.structs.replace(env, body=Start(text=env.body.text, data={**env.body.data, **settings}))
    return msgspec.structs.replace(env, episode=episode)


def _later_starts(
    rows: list[JournalRow], target: JournalRow, episode: str, settings: Mapping[str, Any] | None
) -> list[Envelope]:
    """The runner's Starts journaled after the position (the scorer's, after the entry's): no agent's output, so
    nothing live sends them again, and the agents they start would wait for them forever."""
    later = [r for r in rows if r.pos > target.pos and r.sender == RUNNER and r.kind == "start"]
    return [msgspec.structs.replace(_copy(r.envelope(), episode, settings), ts=time.time()) for r in later]


def _undone(row: JournalRow, change: Change) -> set[str]:
    """Ids of the messages a fault made, which an undone fault never sent."""
    if not isinstance(change, UndoFault) or row.kind != "fault_applied":
        return set()
    body = row.envelope().body
    assert isinstance(body, FaultApplied)
    return {str(result.get("id", "")) for result in body.results}


def _a(kind: str) -> str:
    """A message kind with its article: "a note", "an episode_started"."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _delivered(row: JournalRow, change: Change, episode: str) -> Envelope | None:
    """The message the fork delivers at its position, after the change."""
    env = row.envelope()
    if isinstance(change, Drop):
        return None
    if isinstance(change, Keep | Inject):
        return msgspec.structs.replace(env, episode=episode)
    if isinstance(change, Replace):
        if type(change.body) is not type(env.body):
            raise FaultlineError(
                f"position {row.pos} holds {_a(row.kind)}; the replacement is"
                f" {_a(str(type(change.body).__struct_config__.tag))}"
            )
        return msgspec.structs.replace(env, episode=episode, id=derive_id(env.id, 0, "f"), body=change.body)
    if not isinstance(env.body, FaultApplied):
        raise FaultlineError(f"position {row.pos} holds {_a(row.kind)}, not a fault event: nothing to undo")
    if env.body.model_call >= 0:
        raise FaultlineError(f"position {row.pos} holds a fault on a model request: no message to deliver instead")
    original = env.body.replaced()
    if original is None:
        raise FaultlineError(
            f"position {row.pos} holds a fault event that names no message it replaced: nothing to undo"
        )
    return msgspec.structs.replace(original, episode=episode)


async def fork_episode(
    journal_path: str | Path,
    episode: str,
    at: int,
    change: Change,
    *,
    lookup: AgentLookup,
    backends: Callable[[str], ModelBackend],
    out: str | Path | None = None,
    settings: Mapping[str, Any] | None = None,
    verified: bool = False,
    answer: Answer | None = None,
    handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S,
    system: str = "",
    draw: int = 0,
) -> ForkResult:
    """Fork `episode` at journal position `at`; see the module docstring.

    The fork is written to `out` (default `forks_path(journal_path)`; the source
    itself only when named). `settings` override keys of every agent's Start data
    in the fork (attribution passes `sample` and `sample_from`, so that the
    simulator draws afresh from a decision on). `draw` numbers one of several continuations of the same
    change without touching what any agent receives (attribution's, on a system of one's own, whose agents must
    get their records as journaled for the history to replay); it is recorded in the fork's start. `answer` gives one model call of the handler of the message at
    the position its output. The journal's chain is checked first unless the caller
    `verified` it already. A handler that runs past `handler_timeout_s` (a configuration's
    `handler_timeout_s`, where there is one) fails, and the fork with it, as it would on a worker. `system` is
    the system of the configuration (`[system] class`), that of the workers that ran an episode started by hand,
    whose start names none (`episode_system`): its agents send only to its agents, as they did there.
    """
    started = time.perf_counter()
    if not verified:
        verify(journal_path, facts=False, resume=True).raise_if_broken()
    with JournalReader(journal_path) as reader:
        reader.check_episodes([episode])
        rows = list(reader.episode_rows(episode))
        summary = reader.episode(episode)
        controls = [
            r for r in reader.episode_rows(CONTROL_EPISODE, beside=episode) if r.pos < at and r.kind == "control"
        ]
    lookup = episode_lookup(rows, lookup)
    target = next((r for r in rows if r.pos == at), None)
    if target is None:
        raise FaultlineError(
            f"position {at} is not a message of episode {episode!r} (its rows span {rows[0].pos}..{rows[-1].pos})"
        )
    if not (target.recipient or target.topic or isinstance(change, UndoFault)):
        raise FaultlineError(
            f"position {at} holds {_a(target.kind)}, which no agent receives: fork at a message "
            "(`faultline journal show` lists an episode's messages with their positions)"
        )
    new = fork_id(episode, at, change, settings, answer, draw)
    delivered = _delivered(target, change, new)
    destination = Path(out) if out is not None else forks_path(journal_path)

    def result(
        outcome: EpisodeCompleted, rows: int, live_messages: int, existing: bool = False, model_calls: int = 0
    ) -> ForkResult:
        return ForkResult(
            episode=new,
            forked_from=episode,
            at=at,
            change=type(change).__struct_config__.tag,  # type: ignore[arg-type]
            original=summary.completion() if summary else None,
            outcome=outcome,
            rows=rows,
            live_messages=live_messages,
            seconds=time.perf_counter() - started,
            journal=str(destination),
            existing=existing,
            model_calls=model_calls,
        )

    found = _existing(destination, new, target)
    if found is not None:
        rows_there, outcome = found
        return result(outcome, rows_there, 0, existing=True)
    prefix = [r for r in rows if r.pos < at and r.id not in _undone(target, change)]
    prefix += _late_recordings(prefix, [r for r in rows if r.pos >= at])
    tracks = agent_tracks(prefix, lookup, participants(rows))
    ref = episode_system(rows, system)
    classes = _agent_classes(rows, lookup, ref)

    marker = (
        {
            "change": str(type(change).__struct_config__.tag),
            "target": target.id,
            "delivered": delivered.id if delivered else "",
        }
        | ({"answer": answer.agent} if answer is not None else {})
        | ({"draw": str(draw)} if draw else {})
    )
    rules = _rules_in_force(rows, controls, target, change, new)
    started_body = EpisodeStarted(forked_from=episode, forked_at=at, fork=marker, fault_rules=_builtins(rules))
    history, bodies = _history(prefix, new, started_body, settings)

    # Outputs that already exist (or that the change governs) are not sent again.
    skip = {r.id for r in prefix} | {target.id} | ({delivered.id} if delivered else set())
    fork = _Fork(
        new,
        classes,
        _LiveServices(backends),
        stream=f"fork:{new}",
        handler_timeout_s=handler_timeout_s,
        held=_held(rows, lookup, classes, ref),
    )
    injector = context_injector(fork.services, fork.keep)
    fork.faults = _interceptor(rules, [*prefix, target], new, list(classes), injector)
    fork.record(history, bodies)
    for name, cls in classes.items():
        fork.instances[name] = cls()
        track = tracks.get(name)
        for row in track.inputs if track else ():
            await fork.handle(name, _copy(row.envelope(), new, settings), track.recordings.get(row.id), skip)  # type: ignore[union-attr]
    fork.timers.extend(t for t in history if isinstance(t.body, Timer) and timer_fired(t).id not in skip)
    if delivered is not None and answer is not None:
        fork.answers[(answer.agent, delivered.id)] = answer.response
    if delivered is not None:  # sent now, as all that follows: the live part is timed from the fork's own clock
        delivered = msgspec.structs.replace(delivered, ts=time.time())
    if delivered is not None and isinstance(change, Inject):
        results, event = await _inject(change, delivered, prefix, list(classes), fork.faults.injector)
        fork.record([event])
        fork.write(results)
    elif delivered is not None:
        fork.write([delivered])
    fork.write(_later_starts(rows, target, new, settings))
    await fork.run()
    if fork.completed is None:
        fork.write([runner_completion(new, "failure", "stalled: no message in flight after the fork")])
    for backend in fork.services.cache.values():
        await backend.aclose()
    with Journal.open(destination) as journal:  # opened only now: no await between its tail and the append
        written = journal.append(fork.pending, new_episode=new)
    assert fork.completed is not None
    with JournalReader(destination) as reader:
        outcome = _as_ran(fork.completed, reader.episode(new))
    return result(outcome, written, fork.handled, model_calls=fork.services.made)


def _as_ran(completed: EpisodeCompleted, summary: EpisodeSummary | None) -> EpisodeCompleted:
    """A fork's completion with the seconds and tokens of what it ran (see `ForkResult`), from its summary."""
    if summary is None:
        return completed
    return msgspec.structs.replace(completed, latency_s=summary.duration_s, tokens=summary.tokens)


async def _inject(
    change: Inject, env: Envelope, prefix: list[JournalRow], agents: list[str], injector: Injector | None
) -> tuple[list[Envelope], Envelope]:
    """What fault `change` makes of `env`, with the sender's Start data and earlier calls as its worker had them."""
    start: dict[str, Any] = {}
    calls: list[ToolCall] = []
    for row in prefix:
        body = row.envelope().body
        if isinstance(body, Start) and row.recipient == env.sender and not start:
            start = dict(body.data)
        elif isinstance(body, ToolCall) and row.sender == env.sender:
            calls.append(body)
    rule = _injected(change, env.episode, env.id)
    results = await apply_fault(
        rule, env, agents=agents, calls=calls, start=start, catalog=DomainCatalog(), injector=injector
    )
    if results is None:
        raise FaultlineError(f"fault {change.fault!r} does not apply to the {env.kind} from {env.sender!r}")
    return results, fault_event(rule, env, results)


def _injected(change: Inject, episode: str, message: str) -> FaultRule:
    """The rule of an injected fault: `change`'s fault on that one message."""
    rule = FaultRule(id=change.rule_id, fault=change.fault, episode=episode, message=message, params=change.params)
    return rule.validated()


def _rules_in_force(
    rows: list[JournalRow], controls: list[JournalRow], target: JournalRow, change: Change, fork: str
) -> list[FaultRule]:
    """The fault rules of the source episode, for the fork's live part (scoped to the fork).

    They are the rules the source had from its own fork (`EpisodeStarted.fault_rules`), the
    rules the journal's fault controls had put in force before the fork position, when they
    match the source episode and had not expired at the position's time (they then do not
    expire in the fork), and the fault an `Inject` makes. A fault an `UndoFault` undoes is
    spared its message; the rule of one an `UndoRule` undoes is left out. Seeding is by rule and message id, so a message the fork sends again
    under its old id meets the same fault.
    """
    found: dict[str, FaultRule] = {}
    started = next((r.envelope().body for r in rows if r.kind == "episode_started"), None)
    if isinstance(started, EpisodeStarted):
        for raw in started.fault_rules:
            rule = msgspec.convert(raw, FaultRule)
            found[rule.id] = rule
    live = RuleSet()
    for row in controls:
        body = row.envelope().body
        if isinstance(body, Control) and body.name == FAULTS_CONTROL:
            live.control(body)
    recorded = started.run if isinstance(started, EpisodeStarted) else ""
    for rule in live.rules:
        expired = rule.expires_at and target.ts >= rule.expires_at
        of_run = not rule.run or in_run(target.episode, recorded, rule.run)
        if not expired and of_run and fnmatch.fnmatchcase(target.episode, rule.episode or "*"):
            found[rule.id] = msgspec.structs.replace(rule, expires_at=0.0)
    if isinstance(change, Inject):
        found[change.rule_id] = _injected(change, fork, target.id)
    if isinstance(change, UndoRule) and isinstance(undone := target.envelope().body, FaultApplied):
        found.pop(undone.rule_id, None)
    elif isinstance(change, UndoFault) and isinstance(undone := target.envelope().body, FaultApplied):
        spared = found.get(undone.rule_id)
        if spared is not None:
            original = str(undone.original.get("id", ""))
            found[spared.id] = msgspec.structs.replace(spared, spare=[*spared.spare, original])
    return [msgspec.structs.replace(rule, episode=fork, run="") for rule in found.values()]  # the fork alone


def _builtins(rules: list[FaultRule]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(rule) for rule in rules]


def _interceptor(
    rules: list[FaultRule], seen: list[JournalRow], fork: str, agents: list[str], injector: Injector
) -> FaultInterceptor:
    """A worker's fault interceptor holding `rules`, as it stood when the rows `seen` had gone by: it
    knows the episode's Start data and each sender's tool calls (as sent, before any fault), and every
    fault among them counts against its rule's budget (an undone one too: the rest of the episode
    runs as it did without that one injection)."""
    rule_set = RuleSet()
    for rule in rules:
        control = add_rule_control(rule, rule.id).body
        assert isinstance(control, Control)
        rule_set.control(control)
    interceptor = FaultInterceptor(rule_set, agents=agents, catalog=DomainCatalog(), injector=injector)
    originals: dict[str, Envelope] = {}
    for row in seen:
        env = row.envelope()
        if isinstance(env.body, FaultApplied):
            rule_set.count(env.body)
        if isinstance(env.body, FaultApplied) and (original := env.body.replaced()) is not None:
            originals[original.id] = original
            if row is seen[-1]:  # an undone fault: its original is what the agent sent
                interceptor.observe(msgspec.structs.replace(original, episode=fork))
        elif isinstance(env.body, Start | ToolCall):
            interceptor.observe(msgspec.structs.replace(originals.get(row.id, env), episode=fork))
    return interceptor


def _existing(destination: Path, fork: str, target: JournalRow) -> tuple[int, EpisodeCompleted] | None:
    """(rows, outcome as `ForkResult` gives it) of fork `fork` when `destination` holds it already, else None.

    Raises JournalError when an episode of that id is there but is not this fork, or never completed.
    """
    if not destination.exists():
        return None
    with JournalReader(destination) as reader:
        if not reader.has_episode(fork):
            return None
        rows = list(reader.episode_rows(fork))
        summary = reader.episode(fork)
    started = next((r.envelope().body for r in rows if r.kind == "episode_started"), None)
    outcome = next((r.envelope().body for r in rows if r.kind == "episode_completed"), None)
    if not isinstance(started, EpisodeStarted) or started.fork.get("target") != target.id:
        raise JournalError(
            f"{destination}: holds an episode {fork!r} that is not this fork of message {target.id};"
            " write the fork to another journal"
        )
    if not isinstance(outcome, EpisodeCompleted):
        raise JournalError(
            f"{destination}: holds fork {fork!r} without its end (written by an earlier version);"
            " write the fork to another journal"
        )
    return len(rows), _as_ran(outcome, summary)


def _held(
    rows: list[JournalRow], lookup: AgentLookup, classes: Mapping[str, type[Agent]], system: SystemRef | None
) -> dict[str, Recipients | None]:
    """Whom each agent may send to in the fork: whom the source's workers held it to (`held_to`), as the whole
    source episode shows it, also after the fork point."""
    if system is None:
        return {}
    tracks = agent_tracks(rows, lookup)
    injected = fork_changes(rows)
    return {name: held_to(system, name, tracks.get(name), injected) for name in classes}


def _agent_classes(rows: list[JournalRow], lookup: AgentLookup, system: SystemRef | None) -> dict[str, type[Agent]]:
    """The class of every agent that sends or receives in `rows`, by name, in order of appearance, then, on a system
    of one's own, its other agents: the live part may reach one the source never did (a fault undone, another
    route taken)."""
    names = [name for row in rows for name in (row.sender, row.recipient) if name]
    classes: dict[str, type[Agent]] = {}
    for name in [*names, *(system.agent_names if system is not None else ())]:
        if name not in classes and (cls := lookup(name)) is not None:
            classes[name] = cls
    return classes


def _history(
    prefix: list[JournalRow], new: str, started: EpisodeStarted, settings: Mapping[str, Any] | None
) -> tuple[list[Envelope], list[bytes | None]]:
    """The fork's copy of the history before the fork point, with `started` as its start, and the bodies to keep
    as journaled (None: encoded afresh, where the fork changed the message).

    Every message keeps its time (replay and diff read the history as the source had it); the start records how
    many rows the copy is (`EpisodeStarted.copied`), so that readers time the fork by what it ran.
    """
    history = [_copy(r.envelope(), new, settings) for r in prefix]
    bodies: list[bytes | None] = [r.body for r in prefix]
    start = started_envelope(new, started)
    if not any(isinstance(e.body, EpisodeStarted) for e in history):
        history.insert(0, start)
        bodies.insert(0, None)
    for i, env in enumerate(history):
        if isinstance(env.body, EpisodeStarted):
            recorded = msgspec.structs.replace(
                env.body,
                forked_from=started.forked_from,
                forked_at=started.forked_at,
                fork=started.fork,
                fault_rules=started.fault_rules,
                copied=len(history),
            )
            history[i], bodies[i] = msgspec.structs.replace(env, id=start.id, body=recorded), None
        elif settings and isinstance(env.body, Start):
            bodies[i] = None
    return history, bodies


def _late_recordings(prefix: list[JournalRow], rest: list[JournalRow]) -> list[JournalRow]:
    """The recordings in `rest` of handlings that left their outputs in `prefix`: part of the history.

    A recording a worker sends again after a moment without a stream leader is stored after the outputs
    it preceded; the fork serves it as the journal did, rather than call the model anew.
    """
    handled = {(r.sender, r.causation) for r in prefix if r.kind != "recording"}
    return [r for r in rest if r.kind == "recording" and (r.sender, r.causation) in handled]
