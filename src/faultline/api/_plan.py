"""The main job: plan N tasks K times and run them on a live system (what the result says: `api/_summary.py`).

The runner only talks to the bus: it journals each episode's start, hands the
first messages to the agents, and waits for `episode completed` events. An
episode that runs past its time limit is completed by the runner as `timeout`; one
in which nothing is in flight any more for `stall_after_s`, as a `failure` whose
cause begins `stalled:` (`runtime.StallWatch`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import re
import secrets
import zlib
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio import sleep_until

from faultline._errors import ConfigError, EpisodeHeldError, JournalError
from faultline.agents import PROTOCOL, EpisodeSpec, ScorerStart
from faultline.bus import Bus
from faultline.core import (
    BUILTIN_SYSTEM,
    SCORER,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    InputRecord,
    Start,
    check_token,
    episode_cell,
    helper_agent,
    in_run,
    load_system,
    runner_completion,
    start_envelope,
    started_envelope,
)
from faultline.envs import Domain
from faultline.runtime import (
    CallInFlight,
    Completions,
    JournalGate,
    JournalState,
    RunDefaults,
    Stall,
    StallWatch,
    ask_journal,
    last_words,
    model_calls_in_flight,
    recorded_run,
)

AGENTS = ("env", "tool", "user")
"""Who gets a Start, in this order: the environment and the agent are ready before the user speaks.
The roster's helpers get one after them."""

_EPISODE = EpisodeSpec(domain="", task="")
"""What an episode takes where its run says nothing: the run plan's defaults."""

MODEL_CALLS_POLL_S = 1.0
"""How often a run asks the workers which model calls they are waiting on, for its progress line."""

TIMEOUT_READS = 8
"""How many timed-out episodes a run reads back at once for their causes (`last_words`); one that times out while
as many are being read goes without: thousands timing out together (a model down) must not each open a reader."""


class RunPlan(msgspec.Struct, frozen=True, kw_only=True):
    domain: str = "retail"
    system: str = ""
    """A system of one's own (`package.module:Class`), whose episodes begin from input records instead of
    the domain's tasks; empty for the built-in tool-use system."""
    tasks: int = 10
    """The first this many tasks of the domain, unless `task_ids` names them."""
    task_ids: list[str] = []
    trials: int = 1
    seed: int = 0
    concurrency: int = 8
    start_rate: float = RunDefaults().start_rate
    """Episodes started per second while the run fills up to `concurrency` (0: all at once); after that an
    episode starts as one completes. Thousands started in one burst keep the workers from reading the
    stream's confirmations for many seconds."""
    episode_timeout_s: float = 120.0
    stall_after_s: float = RunDefaults().stall_after_s
    """How long nothing of an episode must be in flight before the run ends it as stalled (0: never)."""
    max_turns: int = _EPISODE.max_turns
    max_steps: int = _EPISODE.max_steps
    error_rates: dict[str, float] = {}
    helpers: list[str] = []
    """The roster every episode of the run takes (canonical, see `parse_roster`)."""
    helper_wait_s: float = _EPISODE.helper_wait_s
    verifier_revisions: int = _EPISODE.verifier_revisions
    tor_threshold: int = _EPISODE.tor_threshold
    helper_effect: float = _EPISODE.helper_effect
    memory: dict[str, Any] = {}
    run_id: str = "run"
    tool_role: str = _EPISODE.tool_role
    """The model role of the tool agent's requests (its `[agents.tool] model_role`)."""
    user_role: str = _EPISODE.user_role
    """The model role of the user simulator's requests (its `[agents.user] model_role`)."""
    tool_calls: str = _EPISODE.tool_calls
    """How the tool agent offers tools to its model role: "native" or "text" (`tool_calls` of that role)."""
    reflection: str = _EPISODE.reflection
    """Whether the tool agent asks for a structured reflection after a failed call (`reflection` of its role)."""


@dataclass(frozen=True, slots=True)
class PlannedEpisode:
    episode: str
    task: str
    trial: int
    seed: int
    record: InputRecord | None = None
    """The input record the episode begins from, on a system of one's own."""


CLAIMANT_BYTES = 8
"""The random bytes of a run's claimant token (`RunResult.claimant`)."""

EPISODE_ID_CHARS = 64
"""The longest episode id: a subject token (`check_token`)."""

TASK_DIGEST_BYTES = 5
"""The digest of a task id that tells apart the tasks an episode id shortens (10 hex digits)."""


def episode_id(run_id: str, task: str, trial: int) -> str:
    """A subject-safe episode id, `<run>-<task>-t<trial>`: a task id keeps its letters, digits, '_' and '-', the rest
    made '_' (`_planned` refuses two tasks that make one id).

    One that would be longer than `EPISODE_ID_CHARS` keeps the run id whole as its prefix and the trial as its end,
    and shortens the task's part, which ends with a digest of the whole task id: `<run>-<task's start>-<digest>-t<trial>`.
    SubjectError where the run id is no subject token, ConfigError where it leaves the task no room."""
    check_token(run_id, "run id")
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", task)
    whole = f"{run_id}-{safe}-t{trial}"
    if len(whole) <= EPISODE_ID_CHARS:
        return whole
    tail = f"-{hashlib.blake2b(task.encode(), digest_size=TASK_DIGEST_BYTES).hexdigest()}-t{trial}"
    room = EPISODE_ID_CHARS - len(run_id) - 1 - len(tail)
    if room < 1:
        raise ConfigError(
            f"run id {run_id!r} is too long for the ids of its episodes, which begin with it and end with a task's"
            f" digest and trial ({EPISODE_ID_CHARS} characters in all): give one of at most"
            f" {EPISODE_ID_CHARS - len(tail) - 2} characters"
        )
    return f"{run_id}-{safe[:room]}{tail}"


def repeated(task_ids: Sequence[str]) -> str | None:
    """The first task id named a second time (its episodes would share ids), or None."""
    seen: set[str] = set()
    for task_id in task_ids:
        if task_id in seen:
            return task_id
        seen.add(task_id)
    return None


def tasks_taken(asked: int, held: int, source: str, *, named: str = "tasks={}") -> tuple[int, str]:
    """How many tasks (input records) a run asked for the first `asked` of takes, where `source` holds `held`, and
    what it says of them: all `held` where that is fewer, with a note saying so (the results would not), else
    `asked` and "". `named` writes the request as its caller gave it (`--tasks {}` on the command line)."""
    if asked <= held:
        return asked, ""
    return held, f"{source} has {held} tasks, so {named.format(asked)} takes all {held}"


def plan_episodes(plan: RunPlan, domain: Domain) -> list[PlannedEpisode]:
    tasks = [domain.task(i) for i in plan.task_ids] if plan.task_ids else domain.checked_tasks()[: plan.tasks]
    return _planned(plan, [(task.id, None) for task in tasks])


def plan_records(plan: RunPlan, records: Sequence[InputRecord]) -> list[PlannedEpisode]:
    """The episodes of a system of one's own: each record (`task_ids` selects them by id), `plan.trials` times."""
    by_id = {record.id: record for record in records}
    chosen = [by_id[i] for i in plan.task_ids] if plan.task_ids else list(records[: plan.tasks])
    return _planned(plan, [(record.id, record) for record in chosen])


def _planned(plan: RunPlan, units: Sequence[tuple[str, InputRecord | None]]) -> list[PlannedEpisode]:
    """Each (task id, input record) `plan.trials` times, trial by trial, with a seed of its own. ConfigError where
    two tasks make one episode id (`episode_id` keeps letters, digits, '_' and '-' of a task id: `a.b` and `a_b`),
    whose messages would be taken for one episode's."""
    planned = [
        PlannedEpisode(
            episode=episode_id(plan.run_id, task, trial),
            task=task,
            trial=trial,
            seed=zlib.crc32(f"{plan.seed}/{task}/{trial}".encode()),
            record=record,
        )
        for trial in range(plan.trials)
        for task, record in units
    ]
    tasks: dict[str, str] = {}
    for p in planned:
        other = tasks.setdefault(p.episode, p.task)
        if other != p.task:
            raise ConfigError(
                f"tasks {other!r} and {p.task!r} make one episode id, {p.episode!r} (an id keeps the letters,"
                " digits, '_' and '-' of a task's): rename one of them"
            )
    return planned


def resumed(result: RunResult, journal: Path, run_id: str) -> RunResult:
    """`result`'s plan for run `run_id`, resumed from what `journal` holds of it (`JournalReader.of_run`): its
    completed episodes count as they ended, and each one that started but never completed runs again under a new
    id (that of run `<run_id>-r<k>`, its start recording run `run_id`) that no episode in the journal has, so no
    message of the interrupted attempt, nor of another run, is taken for one of the new."""
    from faultline.journal import EpisodeFilter, JournalReader  # SQLite tooling stays out of the run's hot path

    with JournalReader(journal) as reader:
        held = {e.episode: e for e in reader.select(EpisodeFilter(run=run_id))}
        taken = set(reader.domains())
    planned: list[PlannedEpisode] = []
    completed: dict[str, EpisodeCompleted] = {}
    for p in result.planned:
        # Each attempt was made where every one before it was taken, so the first free id ends the attempts there are.
        for attempt in _attempts(p, run_id):
            if attempt not in taken:
                planned.append(dataclasses.replace(p, episode=attempt))
                break
            if attempt in held and (done := held[attempt].completion()) is not None:
                completed[attempt] = done
                planned.append(dataclasses.replace(p, episode=attempt))
                break
    return RunResult(planned, completed, resuming=True)


def held_episodes(journal: Path, episodes: Collection[str] | None = None) -> dict[str, str]:
    """Each episode `journal` holds (of `episodes`, where given), with the run its start records ("" for none);
    empty where there is no journal. The starts are read only where one of them is held: a run's check before it
    starts costs a look at the episode index, not a decoding of every start the journal holds."""
    from faultline.journal import JournalReader  # SQLite tooling stays out of the run's hot path

    if not journal.exists() or (journal.is_file() and not journal.stat().st_size):
        return {}
    with JournalReader(journal) as reader:
        held = set(reader.domains()) if episodes is None else set(episodes) & set(reader.domains())
        runs = reader.runs() if held else {}
    return {episode: runs.get(episode, "") for episode in sorted(held)}


def check_unheld(run_id: str, planned: Sequence[PlannedEpisode], held: Mapping[str, str], where: str) -> None:
    """EpisodeHeldError, before anything starts, for the first of `planned` that `where` (a journal, a running
    system) holds already, `held` naming the run each episode there is of ("" for none recorded): its messages and
    the new episode's would be taken for one episode's. Its own run's (`in_run`) is resumed, never run again;
    another run's is one whose id and task make the same id as this one's (`c1-1` with a task `x-a`, `c1-1-x` with a
    task `a`)."""
    for p in planned:
        if p.episode not in held:
            continue
        other = held[p.episode]
        if in_run(p.episode, other, run_id):
            raise EpisodeHeldError(
                f"run {run_id!r} ran already ({where} holds its episode {p.episode!r}): give another run id, or none"
                " for a fresh one; to run what it left undone, resume it (--resume, RunSpec.resume)",
                episode=p.episode,
                run=other,
            )
        raise _held(run_id, p, other, f"which {where} holds of {f'run {other!r}' if other else 'another run'}")


def started_first(run_id: str, planned: PlannedEpisode, other: str | None) -> EpisodeHeldError:
    """The refusal of run `run_id`, whose start of `planned` the stream refused: another process had started that
    episode on the running system, of run `other` (None where its start cannot be read now), after the checks of
    journal and stream before the run (two runs of one id, or of clashing ids, started at the same moment)."""
    if other == run_id:
        return EpisodeHeldError(
            f"run {run_id!r} would start its episode {planned.episode!r}, which another process of run {run_id!r}"
            " started first on this system: give another run id, or none for a fresh one; to resume the run, wait until"
            " that process has ended",
            episode=planned.episode,
            run=run_id,
        )
    return _held(
        run_id,
        planned,
        other or "",
        f"which {f'run {other!r}' if other else 'another run'} started first on this system",
    )


def _held(run_id: str, planned: PlannedEpisode, other: str, which: str) -> EpisodeHeldError:
    """Run `run_id`'s refusal to start `planned`, an episode of run `other` ("" unknown) as `which` says."""
    return EpisodeHeldError(
        f"run {run_id!r} would start episode {planned.episode!r} of its task {planned.task!r}, {which} (whose run id"
        " and task make the same id): give another run id, or none for a fresh one",
        episode=planned.episode,
        run=other,
    )


def _attempts(planned: PlannedEpisode, run_id: str) -> Iterator[str]:
    """The ids of a planned episode of run `run_id`, in the order a resumed run tries them: its own, then its
    retries' (`<run_id>-r1-...`, `<run_id>-r2-...` ...)."""
    yield planned.episode
    for k in itertools.count(1):
        yield episode_id(f"{run_id}-r{k}", planned.task, planned.trial)


def start_envelopes(plan: RunPlan, planned: PlannedEpisode) -> list[Envelope]:
    """The episode-started event, which records the run, and one Start per agent: on a system of one's own, the
    entry's and the scorer's; on the tool-use system, every agent's and each helper's."""
    if planned.record is not None:
        return system_start_envelopes(plan, planned, planned.record)
    spec = EpisodeSpec(
        domain=plan.domain,
        task=planned.task,
        seed=planned.seed,
        trial=planned.trial,
        max_turns=plan.max_turns,
        max_steps=plan.max_steps,
        tool_role=plan.tool_role,
        user_role=plan.user_role,
        tool_calls=plan.tool_calls,
        reflection=plan.reflection,
        error_rates=plan.error_rates,
        helpers=plan.helpers,
        helper_wait_s=plan.helper_wait_s,
        verifier_revisions=plan.verifier_revisions,
        tor_threshold=plan.tor_threshold,
        helper_effect=plan.helper_effect,
        memory=plan.memory,
        protocol=PROTOCOL,
    )
    started = EpisodeStarted(
        run=plan.run_id,
        domain=plan.domain,
        task=planned.task,
        trial=planned.trial,
        seed=planned.seed,
        roster=list(plan.helpers),
        settings=msgspec.to_builtins(spec),
    )
    e = planned.episode
    agents = (*AGENTS, *map(helper_agent, plan.helpers))
    return [
        started_envelope(e, started),
        *(start_envelope(e, i, agent, spec.start()) for i, agent in enumerate(agents)),
    ]


def system_start_envelopes(plan: RunPlan, planned: PlannedEpisode, record: InputRecord) -> list[Envelope]:
    ref = load_system(plan.system)
    started = EpisodeStarted(
        run=plan.run_id,
        task=planned.task,
        trial=planned.trial,
        seed=planned.seed,
        system=plan.system,
        settings={"input": record.data},
    )
    e = planned.episode
    starts = [
        (ref.system.entry, ref.system.start(record)),
        (SCORER, Start(data=msgspec.to_builtins(ScorerStart(system=plan.system, input=record)))),
    ]
    return [
        started_envelope(e, started),
        *(start_envelope(e, i, agent, body) for i, (agent, body) in enumerate(starts)),
    ]


@dataclass
class RunResult:
    """A run as it goes: filled in by `run_plan`, readable at any time, also after a run was cut short."""

    planned: list[PlannedEpisode]
    completed: dict[str, EpisodeCompleted] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    """Episodes started and not completed yet, with the `anyio.current_time()` of their start, in order of start."""
    model_calls: list[CallInFlight] = field(default_factory=list)
    """The model calls the workers were waiting on when last asked, the oldest first."""
    seconds: float = 0.0
    journal_wait_s: float = 0.0
    """How long the run waited, once its episodes were over, for the journal to hold all the stream held."""
    journal: str = ""
    """The journal that holds the run, as its service names it (on the service's host): known once it was waited for."""
    refused: str = ""
    """Why the journal refused new episodes, which ended the run before its plan ("" when it did not)."""
    resuming: bool = False
    """A resumed run's (`resumed`): an episode of its own run that the stream holds started, its start not copied to
    the journal when the run was planned, runs again under its next retry's id, as one the journal held would."""
    claimant: str = field(default_factory=lambda: secrets.token_hex(CLAIMANT_BYTES))
    """Whose claims on its episodes' starts these are (`Bus.publish_first`): run again in this process, after the
    journal held it up, the run finds the episodes it started its own."""

    def outcomes(self) -> list[tuple[PlannedEpisode, EpisodeCompleted]]:
        return [(p, self.completed[p.episode]) for p in self.planned if p.episode in self.completed]

    def waiting_in(self, episode: str) -> str:
        """What `episode` waits for, in words, as the workers last said (for the cause of a timeout)."""
        calls = [call.describe() for call in self.model_calls if call.episode == episode]
        if calls:
            return "still waiting for " + ", ".join(calls)
        return "no model call was in flight when last asked"

    def waiting_for(self, now: float, limit_s: float, stall_after_s: float = 0.0) -> str:
        """What the run waits for, in words: how many episodes run, for how long the oldest has, and how they end
        (at `limit_s` as timeout, or once stalled for `stall_after_s`, where it is above 0).

        Empty once every episode completed.
        """
        if not self.running:
            return "" if len(self.completed) == len(self.planned) else "starting episodes"
        oldest = now - next(iter(self.running.values()))  # kept in order of start: the first is the oldest
        count = len(self.running)
        text = (
            f"waiting for {count} running episode{'s' if count > 1 else ''}, the oldest for {oldest:.0f}s;"
            f" each still running at {limit_s:g}s ends as timeout"
        )
        if stall_after_s > 0:
            text += f", or as stalled once nothing of it is in flight for {stall_after_s:g}s"
        if self.model_calls:
            calls = len(self.model_calls)
            text += (
                f"; {calls} model call{'s' if calls > 1 else ''} in flight,"
                f" the slowest {self.model_calls[0].describe()}"
            )
        return text


@dataclass
class _Cell:
    """What a run holds of one cell's server (a system without cells has one): the connection, and the gate, stall
    watch and completions of the episodes that run there."""

    bus: Bus
    gate: JournalGate
    stalls: StallWatch
    completions: Completions


async def run_plan(
    bus: Bus | Sequence[Bus],
    plan: RunPlan,
    result: RunResult,
    on_done: Callable[[str, EpisodeCompleted], None],
    *,
    in_force: Callable[[], AbstractAsyncContextManager[object]] = contextlib.nullcontext,
) -> None:
    """Run every episode of `result.planned`, `plan.concurrency` at a time, recording them in `result`.

    `bus` is the system's server, or each cell's (`runtime.Cells`): an episode runs in the cell `episode_cell` gives it.
    JournalError, and no further episode starts, once the journal reports it cannot write. EpisodeHeldError, before
    anything of that episode is published, where another process started an episode of the plan first.
    `in_force` (the run's fault rules, `rules_in_force`) is entered once the first episode is the run's own, before
    its Starts, and left when the run ends: a run refused its first episode puts nothing in force.
    """
    # A place is taken before an episode's task is made: the run holds a task per episode running, not one
    # per planned episode (15,000 tasks at once for a run of 15,000 at 5,000 in flight).
    places = anyio.Semaphore(plan.concurrency)
    reads = anyio.Semaphore(TIMEOUT_READS)
    buses = [bus] if isinstance(bus, Bus) else list(bus)
    started = anyio.current_time()
    completers = (load_system(plan.system or BUILTIN_SYSTEM).system.completer,)

    def cell(bus: Bus) -> _Cell:
        async def end_stalled(episode: str, stall: Stall) -> None:
            await bus.publish(stall.completion(episode))

        stalls = StallWatch(bus, plan.stall_after_s, end_stalled)
        return _Cell(bus, JournalGate(bus), stalls, Completions(bus, completers))

    cells = [cell(bus) for bus in buses]

    def cell_of_episode(episode: str) -> _Cell:
        return cells[episode_cell(episode, len(cells))] if len(cells) > 1 else cells[0]

    async def claim(p: PlannedEpisode) -> tuple[PlannedEpisode, list[Envelope]]:
        """The episode (a resumed run's may have moved to a retry's id) and its Starts, once its start event is
        stored as the first on its subject: of two runs that would start one episode id, the stream lets one
        start it and this refuses the other."""
        attempts = _attempts(p, plan.run_id)
        while True:
            episode = next(attempts)
            attempt = p if episode == p.episode else dataclasses.replace(p, episode=episode)
            at = cell_of_episode(episode)
            await at.gate.check()
            started, *starts = start_envelopes(plan, attempt)
            if await at.bus.publish_first(started, result.claimant):
                if attempt is not p:
                    result.planned[result.planned.index(p)] = attempt
                return attempt, starts
            other = await recorded_run(at.bus, episode)
            if not (result.resuming and other == plan.run_id):
                raise started_first(plan.run_id, attempt, other)

    todo = [p for p in result.planned if p.episode not in result.completed]  # a resumed run's rest
    try:
        # The first claim is settled before any other is made, and before anything of the run's own goes out (its
        # fault rules): of two runs of one plan started at once, the one refused it has published nothing, where
        # claims made together could each win some, and rules put in force first would fault the other's episodes.
        first = await claim(todo[0]) if todo else None
        async with in_force(), _following(cells), anyio.create_task_group() as tg:
            watching = anyio.CancelScope()

            async def watch_model_calls() -> None:
                while True:
                    result.model_calls = await _model_calls_in_flight(cells)
                    await anyio.sleep(MODEL_CALLS_POLL_S)

            async def watch() -> None:
                """What the workers wait on, for the progress line; and the stalled episodes, to end them."""
                with watching:
                    async with anyio.create_task_group() as watchers:
                        watchers.start_soon(watch_model_calls)
                        if plan.stall_after_s > 0:
                            for each in cells:
                                watchers.start_soon(each.stalls.run)

            async def one(p: PlannedEpisode, claimed: tuple[PlannedEpisode, list[Envelope]] | None) -> None:
                at: _Cell | None = None
                try:
                    p, starts = await claim(p) if claimed is None else claimed
                    at = cell_of_episode(p.episode)
                    result.running[p.episode] = anyio.current_time()
                    await at.bus.publish_all(starts)
                    at.stalls.watch(p.episode)  # its starts are stored: what it does from now on is its agents'
                    # stored now: not held while the episode runs, for minutes, beside thousands of others
                    claimed = None
                    del starts
                    with anyio.move_on_after(plan.episode_timeout_s) as scope:
                        done = await at.completions.wait([p.episode])
                    if scope.cancelled_caught:  # a completion the stream holds and core NATS never brought counts
                        done = await at.completions.stored([p.episode])
                    if p.episode not in done:
                        cause = f"no completion within {plan.episode_timeout_s:g}s; {result.waiting_in(p.episode)}"
                        if said := await _last_words(at.bus, p.episode, reads):
                            cause += f"; {said}"
                        await at.bus.publish(runner_completion(p.episode, "timeout", cause))
                        done = await at.completions.wait([p.episode])
                    del result.running[p.episode]
                    result.completed[p.episode] = done[p.episode]
                    on_done(p.episode, done[p.episode])
                    if len(result.completed) == len(result.planned):
                        watching.cancel()
                finally:
                    if at is not None:
                        at.stalls.forget(p.episode)
                    places.release()

            if todo:
                tg.start_soon(watch)
            for starts, p in enumerate(todo):
                await places.acquire()
                if starts < plan.concurrency and plan.start_rate > 0:  # filling up: at `start_rate`
                    await sleep_until(started + starts / plan.start_rate)
                tg.start_soon(one, p, first)
                first = None  # the first episode's Starts are held by its task alone, which lets them go once stored
    except* (JournalError, EpisodeHeldError) as refused:
        raise refused.exceptions[0] from None
    finally:
        result.seconds = anyio.current_time() - started


async def _model_calls_in_flight(cells: Sequence[_Cell]) -> list[CallInFlight]:
    """`model_calls_in_flight` of every cell, asked of all at once, the oldest first."""
    found: list[CallInFlight] = []

    async def ask(bus: Bus) -> None:
        found.extend(await model_calls_in_flight(bus))

    async with anyio.create_task_group() as asking:
        for cell in cells:
            asking.start_soon(ask, cell.bus)
    return sorted(found, key=lambda call: -call.age_s)


@contextlib.asynccontextmanager
async def _following(cells: Sequence[_Cell]) -> AsyncIterator[None]:
    """Every cell's completions followed for the length of the block."""
    async with contextlib.AsyncExitStack() as stack:
        for cell in cells:
            await stack.enter_async_context(cell.completions)
        yield


async def _last_words(bus: Bus, episode: str, reads: anyio.Semaphore) -> str:
    """`last_words` of `episode`, when fewer than `TIMEOUT_READS` are being read now; else ""."""
    try:
        reads.acquire_nowait()
    except anyio.WouldBlock:
        return ""
    try:
        return await last_words(bus, episode)
    finally:
        reads.release()


async def wait_for_journal(bus: Bus, timeout_s: float = 60.0) -> int:
    """Block until the journal service holds everything the stream holds now; return that sequence."""
    return (await caught_up_journal(bus, timeout_s)).last_seq


async def caught_up_journal(bus: Bus, timeout_s: float = 60.0) -> JournalState:
    """The journal service's state once it holds everything the stream holds now."""
    last = (await bus.stream_state()).last_seq
    return await ask_journal(bus, timeout_s, until=last)
