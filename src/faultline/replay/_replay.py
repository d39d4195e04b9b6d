"""Exact replay: re-run every (episode, agent) of a journal against today's code.

Each agent gets a fresh instance and its journaled inputs in their original
order; every `llm`, `request`, `now` and `random` call is served from the
journal after its request digest is checked. Each handler's outputs are
compared with what the journal holds for that input. No NATS, no model: only
the journal file and the installed package.

Faults and defenses. The journal holds faulted traffic: what a fault sent
instead of a message is delivered to its recipients as it was, but the agent
that wrote the message is compared with the original recorded in the
`FaultApplied` event, never with the fault's copies. The defenses that dropped
an agent's inputs (named, with their settings, in its `DefenseFired` events)
are rebuilt and run over its inputs again: a dropped input is not handed to the
agent, and a defense that decides otherwise than it did live is a divergence.
Defenses that never fired passed every input, so leaving them out changes
nothing; they run in a fixed order, so the ones that fired see what they saw live.

Recipients. An agent of a system of one's own sends only to its system's agents
(`held_to`): to those its worker held it to live, which the journal tells.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from faultline._errors import ChainError, DomainError, NonDeterminismError, PluginError
from faultline.core import (
    CONTROL_EPISODE,
    NON_AGENT_SENDERS,
    Agent,
    DefenseFired,
    Envelope,
    EpisodeStarted,
    ErrorRaised,
    FaultApplied,
    Handling,
    NoOutput,
    Recipients,
    Recorder,
    Recording,
    SystemRef,
    failed_by_agent,
    load_system,
)
from faultline.envs import load_domain
from faultline.faults import Defense, build_defenses, screen, settings_from
from faultline.journal import JournalReader, JournalRow, verify

AgentLookup = Callable[[str], type[Agent] | None]
ReplayProgress = Callable[[int, int], None]
"""Told (episodes done so far, episodes in all) as a replay or an attribution goes."""

LOOP_HANDLER_LIMIT_S = 60.0
"""How long a handler replayed on an event loop may run: its calls are served at once, so only waits of its own
(a sleep) take time. Past it the handler fails as a live one past its limit does, and replay says so; it never hangs."""

CHUNKS_PER_JOB = 8
"""A parallel replay hands its processes episodes in this many pieces per process: the processes that finish
early take more, and progress is told as each piece comes back."""


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The first point where today's code and the journal part ways in one episode."""

    episode: str
    agent: str
    input_pos: int
    input_kind: str
    input_id: str
    what: str
    expected: Any = None
    got: Any = None

    def diff(self) -> str:
        """A unified diff of what the journal holds against what the code produced now."""
        a = json.dumps(self.expected, indent=2, sort_keys=True, default=str).splitlines()
        b = json.dumps(self.got, indent=2, sort_keys=True, default=str).splitlines()
        return "\n".join(difflib.unified_diff(a, b, "journal", "code now", lineterm="", n=2))


class Unreplayable(msgspec.Struct, frozen=True, kw_only=True):
    """An episode replay cannot run here, and why: its start names a domain or a system that does not load (a
    plugin this installation lacks, or a start forged to name one), so its agents cannot be rebuilt."""

    episode: str
    reason: str


class ReplayReport(msgspec.Struct, kw_only=True):
    journal: str
    episodes: int = 0
    """The episodes replayed: those in `unreplayable` are not among them."""
    agents: int = 0
    messages: int = 0
    seconds: float = 0.0
    divergences: list[Divergence] = []
    skipped_agents: list[str] = []
    served_agents: list[str] = []
    """Environment agents whose outputs were served from the journal, not re-executed."""
    unhandled: int = 0
    """Journaled inputs the journal shows no handling of, so not compared: their agent had not handled them when the
    run stopped or the journal was copied, or a fork dropped every message that handling one sent."""
    unreplayable: list[Unreplayable] = []
    """Episodes not replayed because what their start names does not load here, by episode id: the others are
    replayed all the same."""

    @property
    def identical(self) -> bool:
        """Every episode replayed, and none diverged."""
        return not self.divergences and not self.unreplayable


@dataclass
class _AgentTrack:
    """One agent's share of an episode: what it received, what reached its handler, what it left.

    `inputs` are the messages its handler saw, in order; `received` adds the ones a
    defense dropped (listed in `dropped` by id). `outputs` are keyed by the input
    that caused them, with faulted messages replaced by their originals.
    """

    inputs: list[JournalRow] = field(default_factory=list)
    outputs: dict[str, list[Envelope]] = field(default_factory=lambda: defaultdict(list))
    recordings: dict[str, dict[int, Recording]] = field(default_factory=lambda: defaultdict(dict))
    received: list[JournalRow] = field(default_factory=list)
    dropped: dict[str, DefenseFired] = field(default_factory=dict)
    quiet: set[str] = field(default_factory=set)

    def reached(self) -> int:
        """How many of `received` the agent reached live: up to the last one with evidence.

        Handling is in order, so every input before one that left outputs, a
        `NoOutput` marker or a defense drop was handled too. Inputs after the last
        such one were journaled but never handled (the run stopped first, or the
        agent was still behind when the journal was copied), or their handling's only
        evidence was a message that a fork dropped.
        """
        for i in range(len(self.received) - 1, -1, -1):
            id = self.received[i].id
            if id in self.outputs or id in self.quiet or id in self.dropped:
                return i + 1
        return 0


def comparable(env: Envelope) -> dict[str, Any]:
    """The parts of an output replay compares: not its time, not a traceback's line numbers."""
    body = msgspec.to_builtins(env.body)
    if isinstance(env.body, ErrorRaised):
        body.pop("traceback", None)
    return {"id": env.id, "to": env.recipient or env.topic, "body": body}


def participants(rows: Sequence[JournalRow]) -> set[str]:
    """Who took part in `rows`: every sender (an agent leaves evidence of every input it handled, a quiet marker
    at least) and every recipient."""
    return {row.sender for row in rows if row.kind != "control"} | {row.recipient for row in rows if row.recipient}


def agent_tracks(
    rows: Sequence[JournalRow], lookup: AgentLookup, taking_part: Collection[str] | None = None
) -> dict[str, _AgentTrack]:
    """Split an episode's rows by agent: first find who took part, then what each received and left.

    `taking_part` (default: `participants(rows)`) names them where `rows` are only the start of an episode: before
    a fork point, an agent that has heard a topic may not have said anything yet."""
    names = participants(rows) if taking_part is None else taking_part
    classes = {name: cls for name in sorted(names) if (cls := lookup(name)) is not None}
    tracks = {name: _AgentTrack() for name in classes}
    made: set[str] = set()  # ids of the messages faults sent instead of originals
    for row in rows:
        if row.kind == "fault_applied":
            applied = row.envelope().body
            assert isinstance(applied, FaultApplied)
            made.update(str(result.get("id", "")) for result in applied.results)
        elif row.kind == "defense_fired":
            fired = row.envelope().body
            assert isinstance(fired, DefenseFired)
            if fired.agent in tracks and not fired.redelivery:
                tracks[fired.agent].dropped[fired.message_id] = fired

    def receive(name: str, row: JournalRow) -> None:
        track = tracks[name]
        track.received.append(row)
        if row.id not in track.dropped:
            track.inputs.append(row)

    subscribers: dict[str, list[str]] = {}
    for row in rows:
        if row.kind == "recording":
            recorded = row.envelope()
            if row.sender in tracks and isinstance(recorded.body, Recording):
                tracks[row.sender].recordings[recorded.causation][recorded.body.index] = recorded.body
            continue
        if row.kind == "no_output":
            if row.sender in tracks:
                tracks[row.sender].quiet.add(row.causation)
            continue
        if row.kind in ("defense_fired", "control", "fault_skipped"):
            continue
        if row.kind == "fault_applied":
            applied = row.envelope().body
            assert isinstance(applied, FaultApplied)
            original = applied.replaced()
            if original is not None and original.causation and original.sender in tracks:
                tracks[original.sender].outputs[original.causation].append(original)
            continue
        if row.causation and row.sender in tracks and row.id not in made:
            output = row.envelope()
            if not failed_by_agent(output):  # an old journal's completion by a failing handler: served as recorded
                tracks[row.sender].outputs[row.causation].append(output)
        if row.recipient:
            if row.recipient in tracks:
                receive(row.recipient, row)
        elif row.topic:
            if row.topic not in subscribers:
                subscribers[row.topic] = [n for n, c in classes.items() if row.topic in c.topics]
            for name in subscribers[row.topic]:
                if name != row.sender:
                    receive(name, row)
    return tracks


def held_to(
    system: SystemRef | None, name: str, track: _AgentTrack | None, injected: frozenset[str] = frozenset()
) -> Recipients | None:
    """Whom agent `name` may send to in replay and in a fork: whom its worker held it to live.

    A worker holds the agents of the system of its configuration to that system's agents (`SystemRef.recipients`);
    `system` is that system, as the episode's start names it or, for an episode started by hand, as the
    configuration does (`episode_system`). A worker that ran no such system (one built without it, one where it
    did not load) let the agent send to any name, and the agent's `track` shows it: a message to a name outside
    them. Replay and a fork then let it too. `injected` are the messages a fork changed, none of them the agent's.
    """
    recipients = system.recipients(name) if system is not None else None
    if recipients is None or track is None:
        return recipients
    sent = (env for envs in track.outputs.values() for env in envs if env.recipient and env.id not in injected)
    return recipients if all(recipients.allows(env.recipient) for env in sent) else None


def _defenses_of(track: _AgentTrack) -> list[Defense]:
    """The defenses that dropped something of this agent's, rebuilt with their recorded settings."""
    recorded: dict[str, Any] = {}
    for fired in track.dropped.values():
        recorded |= fired.settings
    return build_defenses({fired.defense for fired in track.dropped.values()}, settings_from(recorded))


def replay_agent(
    episode: str,
    name: str,
    cls: type[Agent],
    track: _AgentTrack,
    settings: Mapping[str, Any] | None = None,
    injected: frozenset[str] = frozenset(),
    *,
    served: bool = False,
    recipients: Recipients | None = None,
) -> tuple[int, Divergence | None]:
    """Feed one agent the inputs it reached live; return how many were handled and the first divergence.

    `injected` are ids of messages a fork changed: the one the agent had produced and the
    one delivered instead; neither counts as an output of the agent. A `served` agent's
    outputs are taken from the journal: only the defenses in front of it run again. `recipients` are those
    the agent may send to, as live (`SystemRef.recipients` of the episode's system).
    Handlers are driven by hand; an agent one of whose handlers only an event loop decides
    (`Handling.run_served`) is replayed again from a fresh instance, each handler on a loop.
    """
    args = (episode, name, cls, track, settings, injected, recipients)
    try:
        with Handling.by_hand():
            return _replay_inputs(*args, served=served, loop=None)
    except _OnLoop:
        with ThreadPoolExecutor(max_workers=1) as loop:  # a thread: the caller may be running a loop of its own
            return _replay_inputs(*args, served=served, loop=loop)


class _OnLoop(Exception):
    """A handler driven by hand that only an event loop decides: its agent is replayed again, on one."""


def _replay_inputs(
    episode: str,
    name: str,
    cls: type[Agent],
    track: _AgentTrack,
    settings: Mapping[str, Any] | None,
    injected: frozenset[str],
    recipients: Recipients | None,
    *,
    served: bool,
    loop: ThreadPoolExecutor | None,
) -> tuple[int, Divergence | None]:
    agent = cls()
    handled = 0
    defenses = _defenses_of(track)
    if served and not defenses:
        return 0, None
    for row in track.received[: track.reached()]:
        message = row.envelope()

        def diverged(what: str, expected: Any = None, got: Any = None, at: JournalRow = row) -> Divergence:
            return Divergence(
                episode=episode,
                agent=name,
                input_pos=at.pos,
                input_kind=at.kind,
                input_id=at.id,
                what=what,
                expected=expected,
                got=got,
            )

        if defenses:
            drop = screen(defenses, message, name)
            now = drop[0].name if drop else None
            live = track.dropped[message.id].defense if message.id in track.dropped else None
            if now != live:
                was = f"defense {live} dropped it" if live else "it was delivered"
                is_ = f"{now} drops it" if now else "it passes"
                return handled, diverged(f"defense decision differs: live {was}; now {is_}")
            if drop:
                continue
        if served:
            continue
        recorded = track.recordings.get(message.id, {})
        recorder = Recorder(recorded=recorded)
        handling = Handling(agent, name, message, recorder, settings=settings, recipients=recipients)
        try:
            if loop is None:
                produced = handling.run_served()
                if produced is None:
                    raise _OnLoop
            else:
                produced = loop.submit(handling.run_offline, LOOP_HANDLER_LIMIT_S).result()
        except NonDeterminismError as exc:  # the journal's side is read where requests are expanded (`_with_requests`)
            return handled, diverged(str(exc), got=exc.got)
        handled += 1
        missing = recorder.unserved()
        if missing is not None:
            return handled, diverged(
                f"the journal holds call #{missing.index} {missing.call}() that the code no longer makes",
                expected=msgspec.to_builtins(missing),
            )
        expected = [comparable(e) for e in track.outputs.get(message.id, []) if e.id not in injected]
        got = [comparable(e) for e in produced if e.id not in injected and not isinstance(e.body, NoOutput)]
        if expected != got:
            return handled, diverged(_describe_output_change(expected, got), expected=expected, got=got)
    return handled, None


def _with_requests(path: str | Path, divergence: Divergence) -> Divergence:
    """`divergence`, where a call differs from the journal's, with the journal's call beside the code's, and where
    the code no longer makes a call, with that call: replay reads requests as stored (their items by key), so the
    one call a diff shows is read again, whole."""
    got, expected = divergence.got, divergence.expected
    missing = isinstance(expected, dict) and expected.get("kind") == "recording"
    if not missing and (expected is not None or not (isinstance(got, dict) and "request" in got)):
        return divergence
    index = (expected if missing else got)["index"]
    with JournalReader(path) as reader:
        for row in reader.episode_rows(divergence.episode):
            if row.kind != "recording" or row.sender != divergence.agent or row.causation != divergence.input_id:
                continue
            recording = row.envelope().body
            if isinstance(recording, Recording) and recording.index == index:
                request = msgspec.to_builtins(recording.request)
                whole = msgspec.to_builtins(recording) if missing else {"call": recording.call, "index": index}
                return msgspec.structs.replace(divergence, expected=whole | {"request": request})
    return divergence


def fork_changes(rows: Sequence[JournalRow]) -> frozenset[str]:
    """The message ids a fork changed, from the fork's `episode started` event."""
    for row in rows:
        if row.kind == "episode_started":
            body = row.envelope().body
            if isinstance(body, EpisodeStarted) and body.fork:
                return frozenset(i for i in (body.fork.get("target"), body.fork.get("delivered")) if i)
            break
    return frozenset()


def _describe_output_change(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> str:
    failed = [e["body"] for e in got if e["body"].get("kind") == "error_raised" and e not in expected]
    if failed:
        return f"the handler now fails: {failed[0]['error_type']}: {failed[0]['message']}"
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return f"output #{i} differs"
    if len(got) > len(expected):
        return f"the code now emits {len(got) - len(expected)} more output(s)"
    return f"the code no longer emits {len(expected) - len(got)} output(s)"


def _forks() -> bool:
    """Whether pool processes are forked, which the parallel replay needs (they inherit the agent lookup)."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) in (None, "fork")


class Replayer:
    """Replays journals; `lookup` maps an agent name to its class (None: not replayed).

    With `jobs` > 1, episodes are replayed in that many worker processes, handed out in
    pieces (`CHUNKS_PER_JOB`), while the hash chain is checked in ranges in as many
    processes beside them; episodes are independent, so the report is the same. The episodes' domains are
    loaded once, before any is replayed.
    """

    def __init__(
        self,
        lookup: AgentLookup,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        jobs: int = 1,
        reexecute_tools: bool = False,
        system: str = "",
    ) -> None:
        self.lookup = lookup
        self.settings = settings or {}
        self.jobs = max(1, jobs)
        self.reexecute_tools = reexecute_tools
        self.system = system
        """The system of the configuration that replays (`[system] class`): that of the workers that ran an
        episode started by hand, whose start names none (`episode_system`)."""

    def replay(
        self, path: str | Path, episodes: Iterable[str] | None = None, *, progress: ReplayProgress | None = None
    ) -> ReplayReport:
        """Replay `episodes` (default: all); an episode the journal does not hold is a JournalError.

        An episode whose domain or system does not load here is reported in `ReplayReport.unreplayable`, and the
        others are replayed; where none of them could be (one episode asked for, or a journal of a plugin this
        installation lacks), that is the error (a DomainError or a PluginError).
        `progress`, if given, is told how many episodes are done as they are (from this thread)."""
        started = time.perf_counter()
        wanted = list(episodes) if episodes else None
        if wanted:
            with JournalReader(path) as reader:
                reader.check_episodes(wanted)  # not an empty replay reported as identical
        names, unloaded = _episodes_with_domains(path, wanted)

        def tell(done: int) -> None:
            if progress is not None:
                progress(done, max(done, len(names)))

        if self.jobs == 1 or not _forks():
            verify(path, facts=False, resume=True).raise_if_broken()
            report = self._replay_episodes(path, wanted, tell, {u.episode for u in unloaded})
        else:
            report = self._replay_parallel(path, names, tell)
        report.unreplayable = sorted([*unloaded, *report.unreplayable], key=lambda u: u.episode)
        if report.unreplayable and not report.episodes:
            raise PluginError(report.unreplayable[0].reason)
        report.divergences = [_with_requests(path, d) for d in report.divergences]
        report.seconds = time.perf_counter() - started
        return report

    def _replay_parallel(self, path: str | Path, names: list[str], tell: Callable[[int], None]) -> ReplayReport:
        size = max(1, math.ceil(len(names) / (self.jobs * CHUNKS_PER_JOB)))
        chunks = [names[i : i + size] for i in range(0, len(names), size)]
        if names:
            self._look_up_agents(path, names[0])
        global _active
        _active = self
        import multiprocessing  # here: one job, the usual case, loads no process pool
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(chunks)) or 1, mp_context=context) as pool:
            futures = {pool.submit(_replay_chunk, str(path), chunk): len(chunk) for chunk in chunks}
            try:
                # The chain check too is split in ranges over `jobs` processes, which run beside the replay's.
                verify(path, facts=False, resume=True, jobs=self.jobs).raise_if_broken()
            except ChainError:
                for future in futures:
                    future.cancel()
                raise
            parts: list[ReplayReport] = []
            done = 0
            for future in as_completed(futures):
                parts.append(future.result())
                done += futures[future]
                tell(done)
        report = ReplayReport(journal=str(path))
        for part in parts:
            report.episodes += part.episodes
            report.agents += part.agents
            report.messages += part.messages
            report.unhandled += part.unhandled
            report.divergences.extend(part.divergences)
            report.unreplayable.extend(part.unreplayable)
            report.skipped_agents = sorted({*report.skipped_agents, *part.skipped_agents})
            report.served_agents = sorted({*report.served_agents, *part.served_agents})
        order = {name: i for i, name in enumerate(names)}
        report.divergences.sort(key=lambda d: order.get(d.episode, 0))
        return report

    def _look_up_agents(self, path: str | Path, episode: str) -> None:
        """Look up `episode`'s agents here, before the pool forks: its processes then inherit the system and
        the registered agents already loaded, where each would read the installed packages' entry points
        and import the system's module again (about 40 ms a process). A system that does not load is left to the
        process that replays the episode, which reports it."""
        with JournalReader(path, expand_requests=False) as reader:
            rows = list(reader.episode_rows(episode))
        with contextlib.suppress(PluginError):
            agent_tracks(rows, episode_lookup(rows, self.lookup))

    def _replay_episodes(
        self,
        path: str | Path,
        wanted: list[str] | None,
        tell: Callable[[int], None] | None = None,
        unloaded: Collection[str] = (),
    ) -> ReplayReport:
        """Replay `wanted` (None: every episode) but `unloaded`, whose domains do not load here."""
        report = ReplayReport(journal=str(path))
        skipped: set[str] = set()
        served: set[str] = set()

        with JournalReader(path, expand_requests=False) as reader:  # requests are compared by digest only
            for episode, rows in reader.by_episode(wanted):
                if episode == CONTROL_EPISODE:
                    continue  # fault rules and other commands: no agent handles them
                if episode in unloaded:
                    continue
                try:
                    classes = episode_lookup(rows, self.lookup)
                    system = episode_system(rows, self.system)
                except PluginError as exc:
                    report.unreplayable.append(Unreplayable(episode=episode, reason=str(exc)))
                    if tell is not None:
                        tell(report.episodes + len(report.unreplayable))
                    continue
                report.episodes += 1
                injected = fork_changes(rows)

                def lookup(name: str, classes: AgentLookup = classes) -> type[Agent] | None:
                    cls = classes(name)
                    if cls is None:
                        skipped.add(name)
                    return cls

                for name, track in agent_tracks(rows, lookup).items():
                    cls = classes(name)
                    assert cls is not None
                    serve = cls.environment and not self.reexecute_tools
                    if serve:
                        served.add(name)
                    else:
                        report.agents += 1
                        report.unhandled += len(track.received) - track.reached()
                    handled, divergence = replay_agent(
                        episode,
                        name,
                        cls,
                        track,
                        self.settings.get(name),
                        injected,
                        served=serve,
                        recipients=held_to(system, name, track, injected),
                    )
                    report.messages += handled
                    if divergence is not None:
                        report.divergences.append(divergence)
                        break
                if tell is not None:
                    tell(report.episodes + len(report.unreplayable))
        report.skipped_agents = sorted(skipped - NON_AGENT_SENDERS)
        report.served_agents = sorted(served)
        return report


def episode_lookup(rows: Sequence[JournalRow], lookup: AgentLookup) -> AgentLookup:
    """`lookup`, but for an episode of a system of one's own, that system's agents first: the journal names its
    system, so it replays, forks and is attributed with no configuration (`episode_system`)."""
    ref = episode_system(rows)
    if ref is None:
        return lookup
    return lambda name: ref.agent(name) or lookup(name)


def episode_system(rows: Sequence[JournalRow], configured: str = "") -> SystemRef | None:
    """The system of one's own an episode ran on, as its start names it; None for the built-in tool-use system.

    An episode started by hand, whose start names none, ran on the system of its workers' configuration: that of
    `configured` where given (the `[system] class` of the configuration that reads the journal), as the workers'.
    Its agents' sends are checked against it (`held_to`) as they were live. A system that cannot
    be loaded here is a PluginError that says so: without its agents the episode would replay as diverged and
    fork as stalled, for a reason that is not the episode's."""
    started = next((row for row in rows if row.kind == "episode_started"), None)
    body = started.envelope().body if started is not None else None
    if not (isinstance(body, EpisodeStarted) and body.system):
        ref = load_system(configured) if configured else None
        return ref if ref is not None and ref.is_user_system else None
    try:
        return load_system(body.system)
    except PluginError as exc:
        raise PluginError(
            f"episode {rows[0].episode!r} ran on a system of its own, and {exc}: install its package, or name the"
            " folder that holds it with --plugin-path (plugins.path in the configuration)"
        ) from None


def _episodes_with_domains(path: str | Path, wanted: list[str] | None) -> tuple[list[str], list[Unreplayable]]:
    """The episodes to replay (`wanted`, or every one) from the journal's kind index, having loaded their domains
    and listed their tasks, and apart from them those whose domain cannot load, with why: each domain is tried
    once, not once per episode, and the processes of a parallel replay inherit the task lists instead of each
    building them (about 40 ms for retail). Where no episode's domain loads, its error is raised now, in one line."""
    with JournalReader(path) as reader:
        domains = reader.domains()
    chosen = set(wanted) if wanted is not None else None
    failed: dict[str, PluginError | DomainError] = {}
    for spec in sorted({d for e, d in domains.items() if d and (chosen is None or e in chosen)}):
        try:
            load_domain(spec).checked_tasks()
        except (PluginError, DomainError) as exc:
            failed[spec] = exc
    names = wanted if wanted is not None else list(domains)  # by id: the order of `by_episode`
    unloaded = [Unreplayable(episode=e, reason=str(failed[domains[e]])) for e in names if domains.get(e) in failed]
    if unloaded and len(unloaded) == len(names):
        raise failed[domains[names[0]]]
    return [e for e in names if domains.get(e) not in failed], unloaded


_active: Replayer | None = None
"""The replayer a forked worker process inherits (its lookup need not be picklable)."""


def _replay_chunk(path: str, episodes: list[str]) -> ReplayReport:
    assert _active is not None
    return _active._replay_episodes(path, episodes)
