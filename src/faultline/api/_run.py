"""`run`: run a domain's tasks K times each on a live system, and report pass^k.

The run `faultline run` makes, for a notebook, a test or a script: a fresh local system
(nats-server on a free loopback port, the journal service, the workers, and a memory service
when memory is on) started for the run and stopped in order after it, or the system already
running at `RunSpec.nats`. Every message goes to the journal file the report names.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

from faultline._errors import (
    ConfigError,
    JournalError,
    NoResponderError,
    PluginError,
    ReplyTimeoutError,
    SubscribeRefusedError,
)
from faultline.api._plan import (
    RunPlan,
    RunResult,
    caught_up_journal,
    check_unheld,
    held_episodes,
    plan_episodes,
    plan_records,
    repeated,
    resumed,
    run_plan,
    tasks_taken,
)
from faultline.api._summary import Summary, summarize, with_costs, with_model_tokens
from faultline.api._system import (
    StopRequest,
    config_source,
    journal_problem,
    made_tls,
    run_supervised,
    stop_on_signal,
    with_helpers,
    worker_specs,
)
from faultline.bus import OPERATOR, Access, Bus, Login, TLSFiles
from faultline.core import (
    SIM_NOTE,
    SIM_SYSTEM_NOTE,
    EpisodeCompleted,
    InputRecord,
    ModelBackend,
    System,
    episode_cell,
    load_system,
    parse_roster,
    read_inputs,
    registered,
    system_path,
)
from faultline.envs import load_domain
from faultline.faults import FaultRule, check_agents, why_not_on
from faultline.runtime import (
    MEMORY_IDENTITY,
    Cells,
    Config,
    MemoryConfig,
    ProcessSpec,
    Supervisor,
    WorkerStatus,
    apply_defense_flags,
    ask_journal,
    bus_settings,
    cell_config,
    cells_problem,
    check_system,
    completing_agents,
    connect,
    follow_settings,
    hold_directories,
    make_backend,
    parse_fault_spec,
    read_rosters,
    recorded_run,
    rules_in_force,
    scoped_to_run,
    state_dir,
    system_access,
    system_agents,
    worker_statuses,
)

log = logging.getLogger(__name__)

SIM_CONCURRENCY, SIM_EPISODE_TIMEOUT_S = 8, 120.0
"""The defaults when every role is simulated: sim answers at once."""
OPENAI_CONCURRENCY, OPENAI_EPISODE_TIMEOUT_S = 2, 600.0
"""The defaults with an openai role: a model server, often a small local one, answers slowly."""
PROGRESS_TICK_S = 1.0
"""How often a run tells its watcher what it is waiting for."""
JOURNAL_ASK_S = 5.0
"""How long a run on a running system waits for its journal service to say which journal it writes."""
DOMAIN_TASKS = 10
"""The tasks of a domain a run takes when it is not told how many."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What to run, how often, on what system, under which faults.

    A zero or None leaves the choice to the configuration (`[run]`, `[helpers]`, `[memory]`),
    else to the default for the tool agent's backend. `task_ids` overrides `tasks`, the first
    that many tasks of the domain. `helpers` is a roster (`["dce", "memory:3"]`); `memory`
    is `off`, `topk`, `topk:K` or `dynamic`. `faults` are rule specs as `faultline inject`
    takes them (`storm:copies=3,kind=tool_call`), in force for the run's episodes only (one
    that names an agent the system that runs them lacks is refused), and `defenses` the
    `--defense` lists of the workers it starts. With `nats`, the run uses the
    system at that URL, connecting as `login` (the operator), and starts nothing.
    """

    domain: str = "retail"
    system: str | type[System] = ""
    """A system of one's own: its class, or its path `package.module:Class` (default: the configuration's `[system]
    class`, else the built-in tool-use system on `domain`). The workers import it by that path, so a class defined
    in the script that runs (`__main__`) is refused."""
    inputs: Path | None = None
    """Its input records, a JSON-lines file (default: the configuration's `[system] inputs`)."""
    tasks: int = 0
    """The first this many tasks of the domain (0: 10) or input records (0: all); all of them where there are fewer,
    which the report says (`RunReport.tasks_note`)."""
    task_ids: Sequence[str] = ()
    trials: int = 1
    seed: int = 0
    config: Config = field(default_factory=Config)
    config_path: Path | None = None
    """The file `config` was read from, named in its errors (None: the built-in defaults)."""
    journal: Path | None = None
    """The journal file (default: the configuration's `journal.path`)."""
    error_rates: Mapping[str, float] = field(default_factory=dict)
    """The `sim` tool agent's mistake rate per FAMA category."""
    concurrency: int = 0
    start_rate: float | None = None
    """Episodes started per second while the run fills up to `concurrency` (None: the config's `[run] start_rate`,
    0: all at once)."""
    episode_timeout_s: float = 0.0
    stall_after_s: float | None = None
    """How long nothing of an episode must be in flight before it ends as stalled (None: the config's `[run]
    stall_after_s`, 0: never)."""
    max_turns: int = 0
    max_steps: int = 0
    run_id: str = ""
    helpers: Sequence[str] | None = None
    memory: str | None = None
    faults: Sequence[str] = ()
    defenses: Sequence[str] = ()
    resume: bool = False
    """Run only what run `run_id` left undone in `journal`: its completed episodes count as they ended, the
    others run (again, under new ids when they had started)."""
    nats: str = ""
    login: Login | None = None
    insecure: bool = False
    """Start NATS without credentials or permissions (for debugging)."""
    tls: bool = False
    """The started nats-server speaks TLS only (the configuration's certificates, else made ones)."""


@dataclass(frozen=True)
class RunReport:
    """How a run went: pass^k and the outcomes (`summary`), each episode (`episodes`), the journal."""

    summary: Summary
    episodes: RunResult
    journal: Path
    run_id: str
    uses_sim: bool
    """Some model role was the offline simulator: the numbers exercise the runtime, not a model."""
    signal: int | None = None
    """The signal that cut the run short, if one did; the episodes it did not complete are not counted."""
    journal_problem: str = ""
    """What went wrong with the journal service, in words ("" when it copied the whole stream)."""
    refused: str = ""
    """Why the journal refused new episodes, which cut the run short ("" when it did not): it could not write. The
    episodes it did not complete are not counted; `resume` runs them once the journal writes again."""
    plan: RunPlan | None = None
    """What ran: the domain or system, the selection, the settings every episode took."""
    tasks_asked: int = 0
    """The tasks (input records) `RunSpec.tasks` asked for (0: none by number). More than `plan.tasks` where the
    domain (the inputs) holds fewer: the run took all of them, and `tasks_note` says so."""
    tasks_note: str = ""
    """Where the run took fewer tasks than `RunSpec.tasks` asked for, that it took all there are, in words (also
    logged as a warning under `faultline.api`, before the run starts); "" otherwise."""

    @property
    def ran_on(self) -> str:
        """The system (`package.module:Class`) or the domain the episodes ran on."""
        return (self.plan.system or self.plan.domain) if self.plan else ""

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else ""


class RunProgress(Protocol):
    """Whoever watches a run (the command line's progress bar). Each call must return at once."""

    def started(self, plan: RunPlan, episodes: int, *, starting_system: bool) -> None:
        """The run is planned; with `starting_system`, its local system is starting."""

    def system_up(self) -> None:
        """The local system runs: nats-server, the journal service and the workers."""

    def update(self, done: int, ok: int, waiting: str) -> None:
        """After each episode and every PROGRESS_TICK_S: episodes completed, successes, what the run waits for."""

    def finished(self) -> None:
        """The run is over (also after an error or a signal)."""


class SilentProgress:
    """A `RunProgress` that watches nothing: what `run` takes without one, and a base for a watcher of some of it."""

    def started(self, plan: RunPlan, episodes: int, *, starting_system: bool) -> None:
        return None

    def system_up(self) -> None:
        return None

    def update(self, done: int, ok: int, waiting: str) -> None:
        return None

    def finished(self) -> None:
        return None


def run(spec: RunSpec | None = None, *, progress: RunProgress | None = None) -> RunReport:
    """Run `spec`'s episodes and report them; a signal (SIGINT, SIGTERM) ends the run early, in order.

    Raises FaultlineError subclasses for what is wrong before anything starts (a domain that does
    not load, a bad fault rule, a configuration the system refuses), and EpisodeHeldError where an
    episode it would start is taken: journaled already, or started first by another run on the system.
    """
    spec = spec or RunSpec()
    watcher = progress or SilentProgress()
    config = apply_defense_flags(spec.config, list(spec.defenses))
    journal = spec.journal or Path(config.journal.path)
    if spec.nats and config.nats.cells > 1:
        raise ConfigError(
            f"cells are systems a run starts for itself, so a run on the system at {spec.nats} cannot have them:"
            " leave out cells (--cells, [nats] cells) or the running system's URL"
        )
    twice = repeated(spec.task_ids)
    if twice is not None:
        raise ConfigError(f"task_ids names {twice!r} twice: trials runs each task several times")
    config, records = with_system(config, spec)
    if records is not None:
        return _run_system(spec, config, journal, records, watcher)
    config = _with_memory(config, spec.memory, journal)
    domain = load_domain(spec.domain)  # before any process starts: a domain that cannot load is one line
    connect_as = spec.login or Login()
    roster = list(spec.helpers) if spec.helpers is not None else parse_roster(config.helpers.roster)
    if spec.nats and spec.helpers is None:
        roster = anyio.run(_live_roster, spec.nats, config, spec.domain, connect_as)
    tasks, note = _tasks(spec, len(domain.checked_tasks()), f"domain {spec.domain!r}", DOMAIN_TASKS)
    plan = _plan(
        spec,
        config,
        domain=spec.domain,
        tasks=tasks,
        max_turns=spec.max_turns or domain.budgets.user_turns,
        max_steps=spec.max_steps or domain.budgets.agent_steps,
        error_rates=dict(spec.error_rates),
        memory=msgspec.to_builtins(config.memory) if config.memory.mode != "off" else {},
        helpers=roster,
        helper_wait_s=config.helpers.wait_s,
        verifier_revisions=config.helpers.verifier_revisions,
        tor_threshold=config.helpers.tor_threshold,
        helper_effect=config.helpers.sim_effect,
        tool_role=config.role_of("tool"),
        user_role=config.role_of("user"),
        tool_calls=config.model(config.role_of("tool")).tool_calls,
        reflection=config.model(config.role_of("tool")).reflection,
    )
    return _run_planned(spec, config, journal, plan, RunResult(plan_episodes(plan, domain)), watcher, note)


def with_system(config: Config, spec: RunSpec) -> tuple[Config, list[InputRecord] | None]:
    """The configuration with the run's system in `[system]`, for its workers; and that system's input records
    (checked against its `needs` and `spec.task_ids`), or None for the built-in tool-use system."""
    if isinstance(spec.system, type) and spec.system.__module__ == "__main__":
        raise ConfigError(
            f"system {spec.system.__qualname__} is defined in __main__, which the worker processes and replay"
            " cannot import: move it into a module and import it from there"
        )
    path = system_path(spec.system) if spec.system else config.system.class_
    try:
        system = load_system(path)
    except PluginError as exc:
        raise ConfigError(
            f"{exc}" if spec.system else f"{config_source(spec.config_path)}: {exc} - at $.system.class"
        ) from None
    if not system.is_user_system:  # the workers read their agents from `[system]`, whatever the file named
        return msgspec.structs.replace(config, system=msgspec.structs.replace(config.system, class_=path)), None
    inputs = spec.inputs or (Path(config.system.inputs) if config.system.inputs else None)
    if inputs is None:
        raise ConfigError(f"system {path!r} needs input records: give inputs (--inputs FILE.jsonl, [system] inputs)")
    records = read_inputs(inputs, system.system.needs)
    known = {record.id for record in records}
    missing = [task_id for task_id in spec.task_ids if task_id not in known]
    if missing:
        raise ConfigError(f"{inputs}: no input record has id {missing[0]!r}")
    for given, flag in ((spec.helpers, "helpers"), (spec.memory, "memory"), (spec.error_rates or None, "error_rates")):
        if given is not None:
            raise ConfigError(f"{flag} steer the built-in tool-use agents; system {path!r} has none of them")
    for text in spec.faults:
        why = why_not_on(parse_fault_spec(text).fault, system.system)
        if why:
            raise ConfigError(f"fault {text!r}: {why}")
    system_config = msgspec.structs.replace(config.system, class_=path, inputs=str(inputs))
    return msgspec.structs.replace(config, system=system_config), records


def _run_system(
    spec: RunSpec, config: Config, journal: Path, records: list[InputRecord], watcher: RunProgress
) -> RunReport:
    tasks, note = _tasks(spec, len(records), f"inputs {config.system.inputs}", len(records))
    plan = _plan(spec, config, domain="", system=config.system.class_, tasks=tasks)
    return _run_planned(spec, config, journal, plan, RunResult(plan_records(plan, records)), watcher, note)


def _tasks(spec: RunSpec, held: int, source: str, default: int) -> tuple[int, str]:
    """How many of the `held` tasks of `source` the run takes (`default` where `spec` asks for none by number), and
    the note, logged as a warning, where it asked for more than there are (`tasks_taken`)."""
    tasks, note = tasks_taken(spec.tasks or default, held, source)
    if spec.task_ids or not spec.tasks:
        return tasks, ""
    if note:
        log.warning(note)
    return tasks, note


def _plan(spec: RunSpec, config: Config, **system: Any) -> RunPlan:
    """The run's plan: what every system's run takes from `spec` and `config`, and what its `system` adds."""
    concurrency, episode_timeout_s = run_limits(config, spec.concurrency, spec.episode_timeout_s)
    return RunPlan(
        task_ids=list(spec.task_ids),
        trials=spec.trials,
        seed=spec.seed,
        concurrency=concurrency,
        start_rate=config.run.start_rate if spec.start_rate is None else spec.start_rate,
        episode_timeout_s=episode_timeout_s,
        stall_after_s=config.run.stall_after_s if spec.stall_after_s is None else spec.stall_after_s,
        run_id=spec.run_id or f"r{os.urandom(3).hex()}",
        **system,
    )


def _run_planned(
    spec: RunSpec,
    config: Config,
    journal: Path,
    plan: RunPlan,
    result: RunResult,
    watcher: RunProgress,
    tasks_note: str = "",
) -> RunReport:
    if spec.resume:
        if not spec.run_id:
            raise ConfigError("resume needs the id of the run to resume (run_id, --run-id)")
        if not journal.exists():
            raise ConfigError(f"{journal}: no such journal, so run {spec.run_id!r} has nothing to resume")
        result = resumed(result, journal, spec.run_id)
    rules = [scoped_to_run(parse_fault_spec(text), plan.run_id) for text in spec.faults]
    connect_as = spec.login or Login()
    cells = config.nats.cells
    if problem := cells_problem(config):
        raise ConfigError(problem)
    if not spec.nats:
        from faultline.journal import check_journal_target  # SQLite tooling stays out of start-up

        check_journal_target(journal, config.journal_shards, cells=cells > 1)
        todo = [p for p in result.planned if p.episode not in result.completed]
        check_unheld(plan.run_id, todo, held_episodes(journal, [p.episode for p in todo]), str(journal))
    run_dir = state_dir(journal)
    groups = {} if spec.nats else with_helpers(check_system(config, config_source(spec.config_path)), plan.helpers)
    if not spec.nats:
        _check_agents(spec.faults, rules, {agent for agents in groups.values() for agent in agents})
    per_cell = [cell_config(config, journal, k) for k in range(cells)] if cells > 1 else [config]
    supervisor: Supervisor | Cells | None = None
    problem = ""
    ticker = _Ticker(watcher, result, plan.episode_timeout_s, plan.stall_after_s)
    try:
        with (
            hold_directories([] if spec.nats else [run_dir], "run"),
            _throwaway_access(spec, per_cell[0], groups) as access,
        ):
            watcher.started(plan, len(result.planned), starting_system=not spec.nats)
            if spec.nats:
                request, problem = anyio.run(
                    _run_remote, spec.nats, config, plan, result, ticker, rules, spec.faults, connect_as
                )
            else:
                tls = made_tls(config, run_dir / "tls") if spec.tls else None
                local = _LocalSystem(run_dir, groups, access, tls)
                if cells > 1:
                    from faultline.journal import create_set

                    create_set(journal, cells, cells=True)
                    cell_systems = [
                        local.supervisor(c, Path(c.journal.path), f"cell-{k}") for k, c in enumerate(per_cell)
                    ]
                    supervisor = Cells(cell_systems, journal)
                else:
                    supervisor = local.supervisor(config, journal)
                request = anyio.run(_run_local, supervisor, config, plan, result, ticker, rules)
    finally:
        watcher.finished()
    if supervisor:
        problem = journal_problem(supervisor)
    held: Path | None = journal  # the run's journal, where this host holds it
    if spec.nats:
        held = Path(result.journal) if result.journal else None
    summary = summarize(result, spec.trials, str(held or ""))
    if held is not None and held.exists() and not problem:  # a running system's too, from its own host
        if plan.helpers:
            episodes = [p.episode for p, _ in result.outcomes()]
            summary = with_costs(summary, held, plan.run_id, plan.helpers, episodes)
        if plan.system:
            summary = with_model_tokens(summary, held, plan.run_id)
    if cells > 1:
        ran = [episode_cell(p.episode, cells) for p, _ in result.outcomes()]
        summary = msgspec.structs.replace(summary, cells=[ran.count(cell) for cell in range(cells)])
    if uses_sim(config):
        summary = msgspec.structs.replace(summary, note=SIM_SYSTEM_NOTE if plan.system else SIM_NOTE)
    return RunReport(
        summary,
        result,
        journal,
        plan.run_id,
        uses_sim(config),
        request.signum,
        problem,
        result.refused,
        plan,
        tasks_asked=0 if spec.task_ids else spec.tasks,
        tasks_note=tasks_note,
    )


def run_limits(config: Config, concurrency: int = 0, episode_timeout_s: float = 0.0) -> tuple[int, float]:
    """Episodes in flight and the episode timeout: the given ones, else the config's `[run]`, else by backend.

    With an openai role, the timeout is at least twice the longest call a role's retries allow, so
    a call that fails for good ends its episode as a journaled model error, not as a timeout.
    """
    remote = [m for m in (config.model(config.role_of(a)) for a in ("tool", "user")) if m.backend == "openai"]
    by_backend = (
        (OPENAI_CONCURRENCY, max(OPENAI_EPISODE_TIMEOUT_S, *(2 * m.call_budget_s for m in remote)))
        if remote
        else (SIM_CONCURRENCY, SIM_EPISODE_TIMEOUT_S)
    )
    return (
        concurrency or config.run.concurrency or by_backend[0],
        episode_timeout_s or config.run.episode_timeout_s or by_backend[1],
    )


def uses_sim(config: Config) -> bool:
    """Whether some model role is the offline simulator."""
    return any(m.backend == "sim" for m in config.models.values()) or not config.models


def memory_mode(text: str) -> tuple[str, int | None]:
    """`off`, `topk`, `topk:K` or `dynamic` as (mode, K); ConfigError for anything else."""
    name, _, k = text.partition(":")
    if name not in ("off", "topk", "dynamic") or (k and (name != "topk" or not k.isdigit())):
        raise ConfigError(f"memory {text!r}: use off, topk, topk:K or dynamic")
    return name, int(k) if k else None


def _with_memory(config: Config, mode: str | None, journal: Path) -> Config:
    memory = config.memory
    if mode is not None:
        name, k = memory_mode(mode)
        memory = msgspec.structs.replace(memory, mode=name, **({"k": k} if k is not None else {}))
    if memory.store == MemoryConfig().store:
        memory = msgspec.structs.replace(memory, store=str(journal.parent / "memory.sqlite"))
    return msgspec.structs.replace(config, memory=memory)


@dataclass
class _Ticker:
    """Tells the watcher how the run goes: after each episode, and every PROGRESS_TICK_S what it waits for."""

    watcher: RunProgress
    result: RunResult
    limit_s: float
    stall_after_s: float
    after: str = ""
    """What the run waits for once no episode runs any more."""
    ok: int = -1
    """Episodes completed as a success so far, counted as they complete (recounting all of them after each
    one cost the runner a third of its CPU at 15,000 episodes)."""

    def on_done(self, _episode: str, done: EpisodeCompleted) -> None:
        if self.ok >= 0:
            self.ok += done.outcome == "success"
        self._tell()

    async def tick(self) -> None:
        while True:
            await anyio.sleep(PROGRESS_TICK_S)
            self._tell()

    def _tell(self) -> None:
        if self.ok < 0:  # the first time: those a resumed run had completed before
            self.ok = sum(c.outcome == "success" for c in self.result.completed.values())
        waiting = self.result.waiting_for(anyio.current_time(), self.limit_s, self.stall_after_s) or self.after
        self.watcher.update(len(self.result.completed), self.ok, waiting)


@contextlib.contextmanager
def _throwaway_access(spec: RunSpec, config: Config, groups: dict[str, tuple[str, ...]]) -> Iterator[Access | None]:
    """Credentials for the system the run starts, made for it and deleted after it; None with `nats` or `insecure`."""
    if spec.nats or spec.insecure:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="faultline-access-") as folder:
        yield system_access(Path(folder), config, groups, config.nats.prefix).prepare()


@dataclass(frozen=True)
class _LocalSystem:
    """What every system a local run starts shares (its only one, or each of its cells)."""

    run_dir: Path
    groups: dict[str, tuple[str, ...]]
    access: Access | None
    tls: TLSFiles | None

    def supervisor(self, config: Config, journal: Path, cell: str = "") -> Supervisor:
        """The supervisor of the system `config` describes, writing `journal` (cell `cell`'s, named in its files'
        names)."""
        effective = self.run_dir / (f"effective-config-{cell}.json" if cell else "effective-config.json")
        effective.write_bytes(msgspec.json.encode(config))
        return Supervisor(
            journal_path=journal,
            journal_shards=config.journal.shards,
            journal_trim_after_s=config.journal.trim_after_s,
            workers=worker_specs(config, self.groups, effective),
            services=_services(config, effective),
            prefix=config.nats.prefix,
            log_dir=self.run_dir / "logs" / cell if cell else self.run_dir / "logs",
            access=self.access,
            completers=completing_agents(config, self.groups),
            journal_args=("--config", str(effective)),  # the run's settings, not the folder's faultline.toml
            bus_settings=bus_settings(config),
            server_tls=self.tls,
            tls_ca=self.tls.ca if self.tls else None,
            sync_interval=config.nats.sync_interval,
            server_cores=config.nats.server_cores,
        )


def _services(config: Config, effective: Path) -> list[ProcessSpec]:
    if config.memory.mode == "off":
        return []
    return [ProcessSpec("memory", ("memory", "serve", "--config", str(effective)), MEMORY_IDENTITY)]


async def _run_local(
    system: Supervisor | Cells,
    config: Config,
    plan: RunPlan,
    result: RunResult,
    ticker: _Ticker,
    rules: list[FaultRule],
) -> StopRequest:
    """Start the system (or each cell's), run the episodes, wait until the memory service and the journal have them
    all, stop."""

    @contextlib.asynccontextmanager
    async def in_force() -> AsyncIterator[None]:
        """The run's fault rules, in force in every cell, each confirmed by that cell's workers."""
        async with contextlib.AsyncExitStack() as stack:
            for supervisor in supervisors:
                assert supervisor.bus is not None
                rules_there = rules_in_force(
                    supervisor.bus,
                    rules,
                    workers=supervisor.worker_ids,
                    settings=follow_settings(config),
                    models=_models(config),
                )
                await stack.enter_async_context(rules_there)
            yield

    supervisors = system.supervisors if isinstance(system, Cells) else [system]

    async def work(system: Supervisor | Cells) -> None:
        ticker.watcher.system_up()
        buses = system.buses if isinstance(system, Cells) else [system.bus] if system.bus else []
        await _run_until_refused(buses, plan, result, ticker.on_done, in_force)
        if config.memory.mode != "off":
            from faultline.services.memory import wait_for_memory

            ticker.after = "waiting for the memory service to take in the episodes"
            await wait_for_memory(buses[0])
        await _wait_for_journal(buses, result, ticker)
        if isinstance(system, Cells):
            result.journal = str(system.journal)

    _, request = await run_supervised(system, work, ticker.tick)
    return request


async def _run_remote(
    url: str,
    config: Config,
    plan: RunPlan,
    result: RunResult,
    ticker: _Ticker,
    rules: list[FaultRule],
    specs: Sequence[str],
    connect_as: Login,
) -> tuple[StopRequest, str]:
    """Run the episodes on the system already running at `url` (its workers and journal) under `rules` (made from
    `specs`), and wait for its journal to hold them; with what went wrong with the journal, in words ("" when it
    holds the whole run)."""
    problem = ""
    async with stop_on_signal(ticker.tick) as request:
        bus = await connect(config, url, name=OPERATOR, login=connect_as)
        try:
            await bus.check_layout()
            agents = system_agents(await _check_system(bus, url, config.system.class_), plan.helpers)
            if agents:  # else no worker told what it runs: nothing to check the rules against
                _check_agents(specs, rules, agents)
            await _check_unused(bus, plan, result)
            in_force = functools.partial(
                rules_in_force, bus, rules, workers=None, settings=follow_settings(config), models=_models(config)
            )
            await _run_until_refused(bus, plan, result, ticker.on_done, in_force)
            try:  # so that what reads the journal next finds the whole run in it
                await _wait_for_journal(bus, result, ticker)
            except (NoResponderError, ReplyTimeoutError) as exc:
                problem = f"{exc}; the stream keeps the run's messages for it"
        finally:
            with anyio.CancelScope(shield=True):
                await bus.close()
    return request, problem


async def _run_until_refused(
    bus: Bus | Sequence[Bus],
    plan: RunPlan,
    result: RunResult,
    on_done: Callable[[str, EpisodeCompleted], None],
    in_force: Callable[[], AbstractAsyncContextManager[object]],
) -> None:
    """`run_plan` under `in_force` (the run's fault rules, put in force once its first episode is its own), with
    the journal's refusal of new episodes kept in `result.refused` rather than raised: the episodes completed
    before it still count, and the report can say how to run the rest."""
    try:
        await run_plan(bus, plan, result, on_done, in_force=in_force)
    except JournalError as refused:
        result.refused = str(refused)


async def _check_system(bus: Bus, url: str, system: str) -> list[WorkerStatus]:
    """ConfigError when the workers running at `url` are of another system than the run's: theirs would handle its
    episodes by the names of their own agents, and its journal would name a system that did not run them. Else
    what the workers told of themselves.

    A worker that does not answer in time, or a credential that may not hear the workers, leaves nothing to
    compare: the run goes on."""
    try:
        statuses = await worker_statuses(bus)
    except SubscribeRefusedError:
        return []
    names = registered("system")  # a registered name and the path it stands for are one system
    others = sorted(
        {s.system for s in statuses if s.system and names.get(s.system, s.system) != names.get(system, system)}
    )
    if others:
        raise ConfigError(
            f"the system running at {url} is {', '.join(others)}, not {system}: its workers would handle this run's"
            " episodes; run it on a system of its own (without --nats and outside the folder of a `faultline up`)"
        )
    return statuses


def _check_agents(specs: Sequence[str], rules: Sequence[FaultRule], agents: Collection[str]) -> None:
    """FaultRuleError, naming the rule by its spec, for a rule that names an agent the system that runs the
    episodes does not have: the run would go on fault-free without a word."""
    for spec, rule in zip(specs, rules, strict=True):
        check_agents(rule, agents, f"--fault {spec!r}")


async def _check_unused(bus: Bus, plan: RunPlan, result: RunResult) -> None:
    """EpisodeHeldError when the running system holds an episode the run would start (`check_unheld`): its journal,
    where this host holds it, or its stream the start of the run's first episode (what the journal may not hold
    yet). The starts would be dropped as copies of those, and their completions reported as the run's own."""
    todo = [p for p in result.planned if p.episode not in result.completed]
    if not todo:
        return
    try:
        journal = (await ask_journal(bus, JOURNAL_ASK_S)).journal
    except (NoResponderError, ReplyTimeoutError):
        journal = ""
    if journal:  # where this host holds it (a `faultline up` here): the stream holds only its last hours
        check_unheld(
            plan.run_id,
            todo,
            await anyio.to_thread.run_sync(held_episodes, Path(journal), [p.episode for p in todo]),
            journal,
        )
    first = todo[0]
    run = await recorded_run(bus, first.episode)
    if run is not None:
        check_unheld(plan.run_id, [first], {first.episode: run}, "this system")


async def _wait_for_journal(bus: Bus | Sequence[Bus], result: RunResult, ticker: _Ticker) -> None:
    """Wait until the journal holds everything the stream holds now (each cell's, its own), and record how long that
    took."""
    ticker.after = "waiting for the journal to copy the stream"
    waiting_since = anyio.current_time()
    for each in [bus] if isinstance(bus, Bus) else bus:
        result.journal = (await caught_up_journal(each)).journal
    result.journal_wait_s = anyio.current_time() - waiting_since


def _models(config: Config) -> Callable[[str], ModelBackend]:
    """The backends of this process's fault injector (the instruction faults at the entry point)."""
    return lambda role: make_backend(config, role)


async def _live_roster(url: str, config: Config, domain: str, connect_as: Login) -> list[str]:
    """The roster the system at `url` gives new episodes of `domain` with the tool agent's model."""
    bus = await connect(config, url, name=OPERATOR, login=connect_as)
    try:
        rosters = await read_rosters(bus)
    finally:
        await bus.close()
    return rosters.for_episode(domain, config.model(config.role_of("tool")).model)
