"""`faultline run`: the main job — run tasks on a live system and print pass^k."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from faultline._errors import ConfigError, DirectoryBusyError, JournalError, RunError, UsageError
from faultline.api import (
    SIM_NOTE,
    SIM_SYSTEM_NOTE,
    RunPlan,
    RunReport,
    RunSpec,
    Summary,
    TokenOverhead,
    memory_mode,
    repeated,
    run,
    tasks_taken,
    uses_sim,
    with_system,
)
from faultline.cli import _jsonl
from faultline.cli._args import rate, seconds, seconds_or_zero, whole_number
from faultline.cli._connect import login, running_up, running_url
from faultline.cli._models import add_model_flags, effective_config, serving_local_model
from faultline.cli._system import add_defense_flag, add_insecure_flag, warn_insecure
from faultline.cli._text import PROGRESS_LINE_S, counted, stderr_console, table_console
from faultline.core import BUILTIN_SYSTEM, parse_roster
from faultline.envs import ERROR_CATEGORIES, load_domain
from faultline.runtime import Config, tune_collector
from faultline.runtime.models import sim_metadata

MAX_RATE = 1.0 / len(ERROR_CATEGORIES)
JOURNAL_LAG_SHOWN_S = 1.0
"""The journal's lag after a run that the results table names: below it, the journal kept up."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        help="run tasks of a domain K times each on a fresh local system; print pass^k",
        description="Start nats-server, the journal service and the workers, run the tasks, print pass^k. "
        + SIM_NOTE
        + ".",
    )
    p.add_argument(
        "--domain",
        help="the built-in tool-use agents' domain: retail, phone, or package.module:Class, each with ?key=value"
        f" parameters for the domain (e.g. mybench.airline:Airline?split=test; default {RunSpec.domain})",
    )
    p.add_argument(
        "--system",
        metavar="PKG.MODULE:CLASS",
        help="a system of your own (a faultline.agent.System) instead of the built-in tool-use agents on --domain"
        " (default: the config's [system] class); see docs/agents.md",
    )
    p.add_argument(
        "--inputs",
        type=Path,
        metavar="FILE.jsonl",
        help="the system's input records, one JSON object a line with an optional id (default: [system] inputs)",
    )
    add_task_flags(
        p,
        "the first N tasks of the domain (default 10), or input records (default all); all, with a note, where there"
        " are fewer",
    )
    p.add_argument(
        "--trials", type=whole_number(1), default=1, metavar="K", help="runs per task, for pass^1..pass^K (default 1)"
    )
    add_model_flags(p)
    p.add_argument("--journal", type=Path, help="journal file (default from config: runs/journal.sqlite)")
    p.add_argument(
        "--seed",
        type=whole_number(0),
        default=0,
        help="each episode's seed derives from it, its task and its trial; the sim model draws its mistakes from"
        " that seed (default 0)",
    )
    p.add_argument(
        "--error-rates",
        type=rate,
        default=0.0,
        metavar="P",
        help=f"sim: the per-decision mistake rate of each of the {len(ERROR_CATEGORIES)} FAMA categories. A decision makes"
        f" at most one mistake, so the rates add up to at most 1 and P is at most {MAX_RATE:g}, where a mistake is"
        " drawn at every decision",
    )
    p.add_argument(
        "--error-rate",
        action="append",
        default=[],
        metavar="CATEGORY=P",
        help=f"sim: one category's rate ({', '.join(ERROR_CATEGORIES)}); all rates add up to at most 1",
    )
    p.add_argument(
        "--concurrency",
        type=whole_number(1),
        default=None,
        help="episodes in flight at once (default from config's [run], else by backend: sim 8, openai 2)",
    )
    p.add_argument(
        "--workers",
        type=whole_number(1),
        default=None,
        metavar="N",
        help="worker processes per agent group (default from config: 1)",
    )
    p.add_argument(
        "--cells",
        type=whole_number(1),
        default=None,
        metavar="N",
        help="run N independent systems side by side, each a nats-server with its own stream, journal shard and"
        " workers, and divide the episodes among them; the journal is then a set of N shards (default from"
        " config's [nats] cells: 1; docs/scale.md)",
    )
    p.add_argument(
        "--episode-timeout",
        type=seconds,
        default=None,
        metavar="S",
        help="complete an episode as timeout after S seconds (default from config's [run], else by backend: sim"
        " 120, openai at least 600 and twice the longest call a role's retries allow)",
    )
    p.add_argument(
        "--stall-after",
        type=seconds_or_zero,
        default=None,
        metavar="S",
        help="end an episode as stalled (a failure whose cause says who sent what last) once nothing of it has been in"
        " flight for S seconds: every message handled, no handler running, no timer set; 0: never (default from"
        " config's [run], else 10)",
    )
    p.add_argument(
        "--max-turns",
        type=whole_number(1),
        default=None,
        help="user turns before an episode fails (default: the domain's budget, 30 for the built-ins)",
    )
    p.add_argument(
        "--max-steps",
        type=whole_number(1),
        default=None,
        help="tool-agent steps (model calls) before an episode fails (default: the domain's budget, 60 for the built-ins)",
    )
    p.add_argument(
        "--run-id",
        default="",
        help="prefix of this run's episode ids, of letters, digits, '-' and '_' (default: random); one a running system"
        " (--nats) ran already is refused",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --run-id and the arguments of a run that was cut short: run what it left undone into the same"
        " journal (its completed episodes count as they ended); the stop line of such a run prints this command",
    )
    p.add_argument(
        "--helpers",
        default=None,
        metavar="LIST",
        help="FAMA helpers every episode takes: dce,tsa,tor,planner,verifier,memory:K, or none (default from"
        " config [helpers] roster; with --nats, the running system's roster for the domain)",
    )
    p.add_argument(
        "--memory",
        default=None,
        metavar="MODE",
        help="MemToolAgent memory: off, topk[:K] or dynamic (default from config: off); entries persist next to the journal",
    )
    p.add_argument(
        "--nats",
        default="",
        metavar="URL",
        help="use the system already running at URL, its workers and journal (default: nats.url, else the"
        " `faultline up` running here; with neither, `run` starts a system of its own)",
    )
    p.add_argument(
        "--creds",
        type=Path,
        metavar="FILE",
        help="with --nats: the operator's credential (default: nats.credentials, else that of the `up` running here)",
    )
    p.add_argument(
        "--tls-ca",
        type=Path,
        metavar="FILE",
        help="with --nats: speak TLS, trusting the certificates this CA signed (default: nats.tls_ca, else the `up` here's)",
    )
    add_insecure_flag(p)
    p.add_argument(
        "--fault", action="append", default=[], metavar="TYPE[:k=v,...]",
        help="a fault rule for the length of the run, on its episodes (e.g. storm:copies=3,kind=tool_call); repeatable",
    )  # fmt: skip
    add_defense_flag(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=_run)


def add_task_flags(p: argparse.ArgumentParser, tasks: str) -> None:
    """The flags that pick tasks, one at a time: `--tasks` (which `tasks` describes), `--task-ids`, `--task-range`
    (read by `task_ids`)."""
    selection = p.add_mutually_exclusive_group()
    selection.add_argument("--tasks", type=whole_number(1), default=None, metavar="N", help=tasks)
    selection.add_argument("--task-ids", metavar="ID,ID,...", help="these tasks (input records), by id, in this order")
    selection.add_argument(
        "--task-range",
        metavar="FROM:TO",
        help="the tasks (input records) at positions FROM to TO-1 of the domain's list (the inputs file), from 0",
    )


def task_ids(args: argparse.Namespace, ids: Sequence[str], source: str) -> list[str]:
    """The ids `--task-ids` or `--task-range` select among `ids` (of `source`: the domain, the inputs), or [] for
    `--tasks`. A selection `ids` cannot satisfy is a usage error (exit 2), whichever flag made it."""
    if args.task_ids is not None:
        chosen = [part.strip() for part in args.task_ids.split(",") if part.strip()]
        if not chosen:
            raise UsageError(f"--task-ids {args.task_ids!r}: names no task; give ids separated by commas")
        twice = repeated(chosen)
        if twice is not None:
            raise UsageError(f"--task-ids: {twice!r} is named twice; --trials K runs each task K times")
        known = set(ids)
        missing = [task_id for task_id in chosen if task_id not in known]
        if missing:
            raise UsageError(f"--task-ids: {source} has no task {missing[0]!r}")
        return chosen
    if not args.task_range:
        return []
    start, colon, stop = args.task_range.partition(":")
    if not (colon and start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        raise UsageError(f"--task-range {args.task_range!r}: use FROM:TO with whole numbers, FROM < TO, e.g. 10:20")
    if int(stop) > len(ids):
        raise UsageError(f"--task-range {args.task_range!r}: {source} has {len(ids)} tasks")
    return list(ids[int(start) : int(stop)])


def chosen_domain(args: argparse.Namespace) -> str:
    """`--domain`, else the API's default: the flag defaults to None so that a system of one's own can refuse it."""
    return args.domain or RunSpec.domain


def _error_rates(args: argparse.Namespace, config: Config) -> dict[str, float]:
    """The simulator's mistake rates from the flags, checked as the simulator checks them."""
    rates = {c: args.error_rates for c in ERROR_CATEGORIES if args.error_rates}
    for item in args.error_rate:
        category, _, value = item.partition("=")
        if category not in ERROR_CATEGORIES:
            raise UsageError(f"--error-rate {item!r}: category must be one of {', '.join(ERROR_CATEGORIES)}")
        try:
            rates[category] = rate(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--error-rate {item!r}: the rate {exc}") from None
    if not rates:
        return rates
    try:
        sim_metadata(role="tool", domain=chosen_domain(args), task="", error_rates=rates)
    except ConfigError as exc:
        problem = str(exc).partition(" - at ")[0]
        raise UsageError(
            f"--error-rates, --error-rate: {problem}; a decision makes at most one mistake, so --error-rates is at most"
            f" {MAX_RATE:g}"
        ) from None
    role = config.role_of("tool")  # the simulator makes mistakes as the tool agent only
    backend = config.model(role).backend
    if backend != "sim":
        raise UsageError(
            f"--error-rates and --error-rate set the sim model's mistakes, but the tool agent's"
            f" model role {role!r} uses {backend}"
        )
    return rates


def _run(args: argparse.Namespace) -> int:
    report = serving_local_model(execute_run)(args)
    summary = report.summary
    if args.json:
        _jsonl.summary(summary)
    else:
        tables = table_console()
        tables.print(_table(report, report.ran_on or chosen_domain(args)))
        if summary.costs:
            tables.print(_costs_table(summary, uses_sim=report.uses_sim))
    console = stderr_console()
    if report.signal is not None:
        console.print(_stopped(report, args.nats), soft_wrap=True, highlight=False)
        return 128 + report.signal
    if report.refused:
        behind = f"; the journal did not catch up: {report.journal_problem}" if report.journal_problem else ""
        started = report.episodes.completed or report.episodes.running  # else the same command runs them all
        resume = _resume(report, " once the journal writes again") if started else ""
        raise JournalError(f"{report.refused}; {_how_far(report)}{behind}{resume}")
    if report.journal_problem:
        raise JournalError(f"the run ended, but the journal did not catch up: {report.journal_problem}")
    errors = sum(summary.errors.values())
    if errors and errors == summary.episodes:
        every = f"all {errors} episodes" if errors > 1 else "the 1 episode"
        raise RunError(f"{every} ended in error: {_causes(summary.errors)}")
    if errors:
        note = f"note: {errors} of {summary.episodes} episodes ended in error: {_causes(summary.errors)}"
        console.print(note, soft_wrap=True, highlight=False)
    if stalled := sum(summary.stalled.values()):
        causes = {cause.removeprefix("stalled: "): n for cause, n in summary.stalled.items()}
        note = f"note: {stalled} of {summary.episodes} episodes stalled, counted as failures: {_causes(causes)}"
        console.print(note, soft_wrap=True, highlight=False)
    return 0


def execute_run(args: argparse.Namespace, *, label: str = "", sim_note: bool = True) -> RunReport:
    """`faultline run`'s arguments as a `RunSpec`, run with a progress display (the caller reports the outcome).

    `label` names the progress bar (default: the domain's episodes); `sim_note` prints what sim's
    numbers mean when a role uses it.
    """
    if args.memory is not None:
        try:
            memory_mode(args.memory)
        except ConfigError as exc:
            raise UsageError(f"--{exc}") from None  # the flag is the API's `memory`
    config = effective_config(args)
    args.nats = args.nats or config.nats.url  # the system running there, as for `status` and `inject`
    if args.defense and args.nats:
        raise UsageError(
            "--defense sets up the workers `run` starts; on a running system (--nats, [nats] url), give it to"
            " `faultline up`"
        )
    if (args.insecure or args.tls) and args.nats:
        flag = "--insecure" if args.insecure else "--tls"
        raise UsageError(
            f"{flag} sets up the system `run` starts; on a running system (--nats, [nats] url), give it to"
            " `faultline up`"
        )
    if not (args.nats or args.defense or args.insecure or args.tls):
        up = running_up()
        if up:  # as `inject` and `status` do: the system running here
            args.nats = up["url"]
            if args.journal is None and up.get("journal"):
                args.journal = Path(up["journal"])
            stderr_console().print(
                f"note: runs on the `faultline up` running here (pid {up['pid']}, {up['url']}); its journal"
                f" is {up.get('journal', 'its own')}",
                soft_wrap=True,
                highlight=False,
            )
    if not args.nats and (args.creds or args.tls_ca):
        raise UsageError("--creds and --tls-ca go with a running system (--nats, [nats] url); without one, `run`"
                         " starts a system of its own")  # fmt: skip
    ids, source = selectable_ids(args, config)
    spec = RunSpec(
        domain=chosen_domain(args),
        system=args.system or "",
        inputs=args.inputs,
        tasks=note_all_tasks(args, ids, source),  # the count it takes: the API then has no note of its own to log
        task_ids=task_ids(args, ids, source),
        trials=args.trials,
        seed=args.seed,
        config=config,
        config_path=args.config,
        journal=args.journal,
        error_rates=_error_rates(args, config),
        concurrency=args.concurrency or 0,
        episode_timeout_s=args.episode_timeout or 0.0,
        stall_after_s=args.stall_after,
        max_turns=args.max_turns or 0,
        max_steps=args.max_steps or 0,
        run_id=args.run_id,
        resume=args.resume,
        helpers=_roster(args.helpers) if args.helpers is not None else None,
        memory=args.memory,
        faults=args.fault,
        defenses=args.defense,
        nats=args.nats,
        login=login(args, config, args.nats) if args.nats else None,
        insecure=args.insecure,
        tls=args.tls,
    )
    said = SIM_SYSTEM_NOTE if spec.system or config.system.class_ != BUILTIN_SYSTEM else SIM_NOTE
    notes = [Text(f"note: {said}", style="dim")] if sim_note and uses_sim(config) and not args.json else []
    display = _Display(stderr_console(), quiet=args.json, label=label, notes=notes, insecure=args.insecure)
    tune_collector()  # this process is the runner: it tracks every episode in flight
    try:
        return run(spec, progress=display)
    except DirectoryBusyError as exc:
        url = running_url() if exc.holder == "up" else ""
        if not url:
            raise
        raise DirectoryBusyError(f"{exc}; or run on that system: add --nats {url}", exc.pid, exc.holder) from None


def selectable_ids(args: argparse.Namespace, config: Config) -> tuple[list[str], str]:
    """The ids a selection picks from, and what holds them: the system's input records, else the domain's tasks.

    Loaded before any process starts, so that a system, an inputs file or a domain that cannot load is one line,
    and so is a `--domain` given to a system of one's own, which runs its input records, not a domain's tasks.
    """
    spec = RunSpec(system=args.system or "", inputs=args.inputs, config=config, config_path=args.config)
    system_config, records = with_system(config, spec)
    if records is not None:
        if args.domain is not None:
            raise UsageError(
                f"--domain picks the tasks of the built-in tool-use agents; system {system_config.system.class_}"
                f" runs its input records (inputs {system_config.system.inputs})"
            )
        return [record.id for record in records], f"inputs {system_config.system.inputs}"
    if args.inputs is not None:
        raise UsageError("--inputs are the input records of a system of your own: give --system (or [system] class)")
    domain = chosen_domain(args)
    return [task.id for task in load_domain(domain).checked_tasks()], f"domain {domain!r}"


def note_all_tasks(args: argparse.Namespace, ids: Sequence[str], source: str) -> int:
    """How many tasks `--tasks N` takes of those `source` holds (`ids`), 0 without it; said on stderr where N is more
    than there are: the first N are then all of them, fewer than asked for, which the results would not say."""
    if args.tasks is None:
        return 0
    tasks, note = tasks_taken(args.tasks, len(ids), source, named="--tasks {}")
    if note:
        stderr_console().print(f"note: {note}", soft_wrap=True, highlight=False)
    return tasks


class _Display:
    """A run's progress bar, with an ETA, which also says what the run waits for; where stderr is not a
    terminal, a line every PROGRESS_LINE_S says it instead, for logs that a progress bar never reaches.
    With `quiet` (JSON output) there is no bar where stderr is not a terminal. `notes` are printed
    once the run is checked and starts, and a warning with `insecure`."""

    def __init__(
        self, console: Console, *, quiet: bool, label: str = "", notes: Sequence[Text] = (), insecure: bool = False
    ) -> None:
        self.console = console
        self.notes = notes
        self.insecure = insecure
        self.lines = not console.is_terminal
        self.label = label
        self.progress = Progress(
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[ok]} ok"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            *([TextColumn("{task.fields[waiting]}", style="dim", markup=False)] if console.is_terminal else []),
            console=console,
            transient=False,
            disable=self.lines and quiet,
        )
        self.bar: TaskID | None = None
        self.boot: TaskID | None = None
        self.total = 0
        self.last_line = time.monotonic()

    def started(self, plan: RunPlan, episodes: int, *, starting_system: bool) -> None:
        self.total = episodes
        for note in self.notes:
            self.console.print(note)
        if self.insecure:
            warn_insecure(self.console, "on its local port")
        self.progress.start()
        self.bar = self.progress.add_task(
            self.label or f"{plan.system or plan.domain} episodes", total=episodes, ok=0, waiting=""
        )
        if starting_system:
            self.boot = self.progress.add_task("starting nats-server, journal, workers", total=None, ok="", waiting="")

    def system_up(self) -> None:
        if self.boot is not None:
            self.progress.remove_task(self.boot)
            self.boot = None

    def update(self, done: int, ok: int, waiting: str) -> None:
        assert self.bar is not None
        self.progress.update(self.bar, completed=done, ok=ok, waiting=waiting)
        now = time.monotonic()
        if self.lines and waiting and now - self.last_line >= PROGRESS_LINE_S:
            self.last_line = now
            self.progress.console.print(
                f"{done} of {self.total} episodes done; {waiting}", soft_wrap=True, highlight=False
            )

    def finished(self) -> None:
        if self.bar is not None:  # a run refused before it started showed nothing
            self.progress.stop()


def _roster(text: str) -> list[str]:
    try:
        return parse_roster(text)
    except ConfigError as exc:
        raise UsageError(f"--helpers {text!r}: {exc}") from None


def _stopped(report: RunReport, url: str) -> str:
    """The one line that says what a stop signal left behind."""
    done = f"faultline: stopped by {report.signal_name}: {_how_far(report)}"
    resume = _resume(report)
    if url:
        return f"{done}; the system at {url} goes on with those{resume}"
    if report.journal_problem:
        return f"{done}; every process is stopped, but the journal did not catch up: {report.journal_problem}"
    return (
        f"{done}; nats-server, the journal service and the workers are stopped, and {report.journal} holds all"
        f" they published{resume}"
    )


def _never_started(report: RunReport) -> int:
    """The planned episodes of a run cut short that it did not start."""
    episodes = report.episodes
    return len(episodes.planned) - len(episodes.completed) - len(episodes.running)


def _how_far(report: RunReport) -> str:
    """How far a run cut short got."""
    episodes = report.episodes
    running = len(episodes.running)
    return (
        f"{len(episodes.completed)} of {len(episodes.planned)} episodes completed, {running}"
        f" {'was' if running == 1 else 'were'} running, {_never_started(report)} never started (pass^k counts the"
        " completed)"
    )


def _resume(report: RunReport, when: str = "") -> str:
    """The end of a cut short run's line: the command that runs the episodes it did not complete ("" if none)."""
    rest = len(report.episodes.planned) - len(report.episodes.completed)
    return f"; to run the other {rest} into the same journal{when}: {resume_command(report)}" if rest else ""


def resume_command(report: RunReport, argv: Sequence[str] | None = None) -> str:
    """The command line that runs what `report`'s run left undone: its own, with its run id and --resume."""
    words = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--run-id":
            skip = True
        elif not word.startswith("--run-id=") and word != "--resume":
            kept.append(word)
    return shlex.join(["faultline", *kept, "--run-id", report.run_id, "--resume"])


def _causes(errors: dict[str, int]) -> str:
    """Each distinct cause once, the most frequent first, with its count when several causes differ."""
    if len(errors) == 1:
        return next(iter(errors))
    return "; ".join(f"{cause} ({n} episode{'s' if n > 1 else ''})" for cause, n in errors.items())


def _costs_table(summary: Summary, *, uses_sim: bool) -> Table:
    """Model use per agent per episode, and what the helpers add to the tool agent's (FAMA Table 2's shape)."""
    note = " (sim: tokens are words, latency is the simulator's)" if uses_sim else ""
    table = Table(title=f"model calls per episode, by agent{note}")
    for column in ("agent", "calls", "tokens in", "tokens out", "model latency"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    for row in summary.costs:
        table.add_row(
            row.agent, f"{row.calls:.1f}", f"{row.prompt_tokens:.0f}", f"{row.completion_tokens:.0f}",
            f"{row.latency_s * 1000:.0f} ms",
        )  # fmt: skip
    overhead = summary.helper_overhead
    tokens = f"+{overhead['tokens']:.0%} tokens" if "tokens" in overhead else "no tool-agent tokens to compare"
    latency = f", +{overhead['latency']:.0%} model latency" if "latency" in overhead else ""
    ours = f"helpers over the tool agent alone (Faultline's measure): {tokens}{latency}"
    table.caption = f"{_paper_overhead(summary.overhead)}\n{ours}" if summary.overhead else ours
    return table


def _paper_overhead(row: TokenOverhead) -> str:
    """The FAMA paper's overhead (Table 2) in one line: the helpers' share of the generated tokens, and their spread."""
    return (
        f"helpers' share of the generated tokens (FAMA Table 2): {row.share:.0%} of {row.mean_tokens:.0f} per episode"
        f" (min {row.min_tokens:.0f}, median {row.median_tokens:.0f}, max {row.max_tokens:.0f};"
        f" tool agent {row.assistant_tokens:.0f}, helpers {row.helper_tokens:.0f})"
    )


def _table(report: RunReport, domain: str) -> Table:
    """The results table; of a run cut short, it says what did not complete and the command that runs it, and
    leaves out the numbers that only completions give: a rate up to a stop, an average over no episode."""
    summary = report.summary
    table = Table(
        title=f"faultline run {report.run_id} — {domain}, {counted(summary.tasks, 'task')} x"
        f" {counted(summary.trials, 'trial')}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, value in summary.pass_k.items():
        table.add_row(f"pass^{k}", "-" if math.isnan(value) else f"{value:.3f}")
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(summary.outcomes.items()))
    table.add_row("episodes", f"{summary.episodes} ({outcomes})" if outcomes else "none completed")
    if summary.not_run:
        planned = len(report.episodes.planned)
        running, never = len(report.episodes.running), _never_started(report)
        table.add_row(
            "not completed",
            f"{summary.not_run} of {planned}: {running} started, {never} never started (the run was cut short;"
            " counted nowhere)",
        )
        table.add_row("to run the rest", resume_command(report))
    over = f" (of {summary.tallied} finished)" if summary.tallied < summary.episodes else ""
    averages = summary.tallied > 0
    if not (averages and not summary.avg_turns):  # finished episodes that count no turns: a system of one's own
        table.add_row(f"avg turns{over}", f"{summary.avg_turns:.1f}" if averages else "-")
    if summary.tokens_from_calls:
        table.add_row("avg tokens (all agents' model calls)", f"{summary.avg_tokens:.0f}" if summary.episodes else "-")
    else:
        table.add_row(f"avg tokens{over}", f"{summary.avg_tokens:.0f}" if averages else "-")
    table.add_row(f"avg latency / episode{over}", f"{summary.avg_latency_s * 1000:.0f} ms" if averages else "-")
    seconds = f"{summary.seconds:.1f}" if summary.seconds >= 10 else f"{summary.seconds:.2g}"  # 0.04 s, not 0.0 s
    if summary.not_run:  # the time ends at the stop, not at a completion: no rate of the run's episodes
        table.add_row("first start to the stop", f"{seconds} s")
    else:
        table.add_row("first start to last completion", f"{seconds} s ({summary.episodes_per_s:.1f} episodes/s)")
    if summary.journal_wait_s >= JOURNAL_LAG_SHOWN_S:
        table.add_row("journal lag", f"{summary.journal_wait_s:.1f} s after the last episode: it did not keep up")
    if summary.cells:
        each = ", ".join(map(str, summary.cells))
        table.add_row("cells", f"{len(summary.cells)}, episodes in each: {each}")
    if summary.journal:
        table.add_row("journal", summary.journal)
    return table
