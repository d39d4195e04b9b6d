"""`faultline campaign`: the fault-free baseline, then every fault type on the same tasks and seeds.

Each cell is one `faultline run` (the same machinery: a system of its own, one journal)
with one fault applied once per episode: a rule per episode with a budget of one, so
every task meets the fault at the same point of its course in every trial. Under
`--defenses`, the baseline and every fault run again with each defense on its own.
The campaign folder holds the manifest and `cells/<cell>/journal.sqlite`; a re-run
skips finished cells and redoes an unfinished one from scratch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from faultline._errors import CampaignError, ConfigError, JournalError, UsageError
from faultline.api import STOP_SIGNALS, RunSpec, episode_id
from faultline.cli._args import seconds, seconds_or_zero, whole_number
from faultline.cli._connect import running_up
from faultline.cli._models import add_model_flags, effective_config, model_label
from faultline.cli._run import (
    add_task_flags,
    chosen_domain,
    execute_run,
    note_all_tasks,
    selectable_ids,
    task_ids,
)
from faultline.cli._text import stderr_console, table_console
from faultline.core import SIM_NOTE, SIM_SYSTEM_NOTE, System, load_system
from faultline.faults import MASFIRE_FAULTS, check_defenses, fault_types, why_not_on
from faultline.journal import journal_exists
from faultline.report import (
    BASELINE,
    MANIFEST,
    CampaignCell,
    CampaignManifest,
    CampaignSettings,
    plan_cells,
    read_manifest,
    write_manifest,
)

ALL = "all"
"""`--faults all`: every registered fault type, plugins' included."""
MASFIRE = "masfire"
"""`--faults masfire`: the 15 types of the MAS-FIRE taxonomy."""
TASKS = 10
"""The tasks or input records a campaign takes, from the first, when not told how many."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "campaign",
        help="run a fault-free baseline and every fault type on the same tasks; resumable",
        description="A fault-free baseline cell, then one cell per fault type (each fault applied once per"
        " episode), on the same tasks, trials and seeds; one journal per cell and a manifest in --out."
        " Re-running the same command skips finished cells. Read the result with `faultline report`.",
    )
    p.add_argument(
        "--domain",
        help=f"the built-in tool-use agents' domain: retail, phone, or package.module:Class (default {RunSpec.domain})",
    )
    p.add_argument(
        "--faults",
        default=ALL,
        metavar="all|masfire|TYPE,...",
        help=f"fault types, each a cell: all registered ones (default: {', '.join(sorted(fault_types()))}),"
        " masfire (MAS-FIRE's 15), or a list",
    )
    p.add_argument(
        "--system",
        metavar="PKG.MODULE:CLASS",
        help="a system of your own instead of the built-in tool-use agents on --domain (see `run`)",
    )
    p.add_argument("--inputs", type=Path, metavar="FILE.jsonl", help="the system's input records (see `run`)")
    add_task_flags(p, f"the first N tasks or input records (default {TASKS}); all, with a note, where there are fewer")
    p.add_argument("--trials", type=whole_number(1), default=1, metavar="K", help="runs per task (default 1)")
    p.add_argument(
        "--seed", type=whole_number(0), default=0, help="the seed of every cell's run, as for `run` (default 0)"
    )
    p.add_argument(
        "--defenses",
        default="",
        metavar="NAME,...",
        help="also run every cell with each of these defenses on its own (scope, cycle, dedup, rate)",
    )
    p.add_argument("--helpers", default=None, metavar="LIST", help="FAMA helpers every episode takes (see `run`)")
    p.add_argument(
        "--jobs", type=whole_number(1), default=None, metavar="J", help="episodes in flight at once in a cell"
    )
    p.add_argument(
        "--episode-timeout", type=seconds, default=None, metavar="S", help="an episode's time limit (see `run`)"
    )
    p.add_argument(
        "--stall-after",
        type=seconds_or_zero,
        default=None,
        metavar="S",
        help="end an episode as stalled once nothing of it has been in flight for S seconds; 0: never (see `run`)",
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the campaign folder (made if missing)")
    p.add_argument(
        "--nats",
        default="",
        metavar="URL",
        help="run every cell on the system already running at URL (default: nats.url; see `run`)",
    )
    p.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help="with --nats: that system's journal, which the report reads the cells' episodes from",
    )
    p.add_argument("--creds", type=Path, metavar="FILE", help="with --nats: the operator's credential (see `run`)")
    p.add_argument("--tls-ca", type=Path, metavar="FILE", help="with --nats: the CA to trust (see `run`)")
    add_model_flags(p)
    p.set_defaults(handler=_campaign)


def _faults(text: str, system: System | None = None) -> list[str]:
    """The fault types `--faults` names; on a system of one's own, `all` and `masfire` keep those that can apply
    to it (saying which they leave out), and a type named that cannot is a usage error."""
    known = fault_types()
    if text.strip() in (ALL, MASFIRE):
        chosen = sorted(known) if text.strip() == ALL else list(MASFIRE_FAULTS)
        if system is None:
            return chosen
        left_out = [name for name in chosen if why_not_on(name, system)]
        if left_out:
            stderr_console().print(
                f"note: left out {len(left_out)} fault types that cannot apply to system {system.name!r}:"
                f" {', '.join(left_out)} (`faultline run --fault TYPE` says why)",
                soft_wrap=True,
                highlight=False,
            )
        return [name for name in chosen if name not in left_out]
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"--faults {text!r}: use all, masfire or fault types among {', '.join(sorted(known))}")
    for name in names:
        why = why_not_on(name, system) if system is not None else ""
        if why:
            raise UsageError(f"--faults: {why}")
    return names


def _defenses(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    try:
        check_defenses(names)
    except ConfigError as exc:
        raise UsageError(f"--defenses {text!r}: {exc}") from None
    return list(dict.fromkeys(names))


def _model(args: argparse.Namespace) -> str:
    """The tool agent's backend and model, as the campaign names it."""
    config = effective_config(args)
    return model_label(config, config.role_of("tool"))


def _settings(args: argparse.Namespace) -> CampaignSettings:
    config = effective_config(args)
    ids, source = selectable_ids(args, config)
    note_all_tasks(args, ids, source)
    system = load_system(args.system or config.system.class_)
    return CampaignSettings(
        domain=chosen_domain(args),
        system=system.path if system.is_user_system else "",
        inputs=str(args.inputs.resolve()) if args.inputs else "",
        model=_model(args),
        tasks=task_ids(args, ids, source) or ids[: args.tasks or TASKS],
        trials=args.trials,
        seed=args.seed,
        faults=_faults(args.faults, system.system if system.is_user_system else None),
        defenses=_defenses(args.defenses),
        helpers=args.helpers or "",
    )


def _journal(args: argparse.Namespace) -> str:
    """The running system's journal with --nats (required there), else "" (a journal per cell).

    Without --nats, `[nats] url` is the system; without either and --defenses, the `faultline up` running in
    this folder is, as for `inject`.
    """
    args.nats = args.nats or effective_config(args).nats.url
    up = {} if args.nats or args.defenses or args.journal else running_up()
    if up.get("journal"):
        args.nats, args.journal = up["url"], Path(up["journal"])
        stderr_console().print(
            f"note: the cells run on the `faultline up` running here (pid {up['pid']}, {up['url']}), journal"
            f" {up['journal']}; pass --defenses none for a system of their own per cell",
            soft_wrap=True,
            highlight=False,
        )
    if not args.nats:
        if args.journal or args.creds or args.tls_ca:
            raise UsageError(
                "--journal, --creds and --tls-ca go with --nats; without it each cell has a system of its own"
            )
        return ""
    if args.defenses:
        raise UsageError(
            "--defenses sets up the workers of each cell's own system; on a running system (--nats, [nats] url),"
            " there is none"
        )
    if args.journal is None:
        raise UsageError(
            "a campaign on a running system (--nats, [nats] url) needs --journal: that system's journal file,"
            " which the report reads"
        )
    return str(args.journal.resolve())


def _manifest(folder: Path, settings: CampaignSettings, journal: str) -> CampaignManifest:
    """The folder's manifest, or a new one; CampaignError when the folder holds a campaign of other settings."""
    if not (folder / MANIFEST).exists():
        folder.mkdir(parents=True, exist_ok=True)
        cells = plan_cells(settings.faults, settings.defenses)
        manifest = CampaignManifest(id=f"c{os.urandom(3).hex()}", settings=settings, cells=cells, journal=journal)
        write_manifest(folder, manifest)
        return manifest
    manifest = read_manifest(folder)
    if manifest.settings != settings:
        theirs, ours = msgspec.to_builtins(manifest.settings), msgspec.to_builtins(settings)
        differ = ", ".join(k for k in ours if ours[k] != theirs.get(k))
        raise CampaignError(f"{folder} holds a campaign with other settings ({differ}): use another --out")
    if manifest.journal != journal:
        where = manifest.journal or "a journal per cell"
        raise CampaignError(f"{folder} holds a campaign that ran on {where}: resume it the same way")
    return manifest


def _run_argv(args: argparse.Namespace, journal: Path, settings: CampaignSettings, cell: CampaignCell) -> list[str]:
    """`faultline run`'s command line for one cell."""
    run_id = cell.run_id
    argv = [
        "run", "--task-ids", ",".join(settings.tasks), "--trials", str(settings.trials),
        "--seed", str(settings.seed), "--run-id", run_id,
    ]  # fmt: skip
    if not settings.system:  # a system of one's own runs its input records: `run` refuses a domain for it
        argv += ["--domain", settings.domain]
    if args.nats:
        argv += ["--nats", args.nats]
    else:
        argv += ["--journal", str(journal), "--defense", cell.defense or "none"]
    if cell.fault != BASELINE:
        for trial in range(settings.trials):
            for task in settings.tasks:
                argv += ["--fault", f"{cell.fault}:episode={episode_id(run_id, task, trial)},budget=1"]
    for flag, value in (
        ("--system", settings.system), ("--inputs", settings.inputs), ("--model", args.model), ("--base-url", args.base_url), ("--model-name", args.model_name),
        ("--config", args.config), ("--helpers", args.helpers), ("--concurrency", args.jobs),
        ("--episode-timeout", args.episode_timeout), ("--creds", args.creds), ("--tls-ca", args.tls_ca),
    ):  # fmt: skip
        if value:
            argv += [flag, str(value)]
    if args.stall_after is not None:  # 0 (never) is a value to pass on
        argv += ["--stall-after", f"{args.stall_after:g}"]
    argv += [a for item in args.model_setting for a in ("--model-setting", item)]
    argv += [a for path in args.plugin_path for a in ("--plugin-path", str(path))]
    return argv


def _campaign(args: argparse.Namespace) -> int:
    from faultline.cli import build_parser

    folder: Path = args.out
    settings = _settings(args)
    manifest = _manifest(folder, settings, _journal(args))
    console = stderr_console()
    if settings.model == "sim":
        said = SIM_SYSTEM_NOTE if settings.system else SIM_NOTE
        console.print(Text(f"note: {said}", style="dim"))
    lost = [
        cell.name
        for cell in manifest.cells
        if cell.done and not manifest.journal and not journal_exists(manifest.journal_of(folder, cell))
    ]
    if lost:  # finished once, but nothing of it is left to report: as good as never run
        console.print(f"cell(s) {', '.join(lost)} finished, but their journals are gone: they run again")
    todo = [cell for cell in manifest.cells if not cell.done or cell.name in lost]
    skipped = len(manifest.cells) - len(todo)
    if skipped:
        console.print(f"{skipped} of {len(manifest.cells)} cells already finished in {folder}", highlight=False)
    parser = build_parser("run")
    between = _SignalBetweenCells()
    with between.caught():
        for index, unfinished in enumerate(todo, start=skipped + 1):
            if between.signum is not None:
                return _stopped(console, between.signum, f"before cell {unfinished.name}", index - 1, manifest)
            shutil.rmtree(folder / unfinished.folder, ignore_errors=True)  # an unfinished cell starts over
            manifest, cell = manifest.attempt(unfinished)  # with a run id of its own
            write_manifest(folder, manifest)
            run_args = parser.parse_args(_run_argv(args, manifest.journal_of(folder, cell), settings, cell))
            started = time.monotonic()
            label = f"cell {index}/{len(manifest.cells)} {cell.name}" + _campaign_eta(manifest)
            outcome = execute_run(run_args, label=label, sim_note=False)
            between.catch()  # the run caught signals while it ran and left the default behind
            if outcome.signal is not None:
                return _stopped(console, outcome.signal, f"in cell {cell.name}", index - 1, manifest)
            if outcome.refused:  # an unfinished cell, run again when the campaign is
                raise JournalError(f"cell {cell.name} was cut short: {outcome.refused}")
            if outcome.journal_problem:
                problem = outcome.journal_problem
                raise JournalError(f"cell {cell.name} ended, but its journal did not catch up: {problem}")
            manifest = manifest.finished(cell, time.monotonic() - started)
            write_manifest(folder, manifest)
    table_console().print(_cells_table(manifest, folder))
    return 0


class _SignalBetweenCells:
    """Notes a stop signal that comes between two cells' runs (each run stops itself on one), so that the
    campaign stops before its next cell, says how to resume, and exits 128 + the signal like a stopped run."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def _note(self, signum: int, frame: object) -> None:
        self.signum = signum

    def catch(self) -> None:
        if threading.current_thread() is threading.main_thread():  # only it may set handlers
            for signum in STOP_SIGNALS:
                self._before.setdefault(signum, signal.getsignal(signum))
                signal.signal(signum, self._note)

    @contextlib.contextmanager
    def caught(self) -> Iterator[None]:
        self.catch()
        try:
            yield
        finally:
            for signum, handler in self._before.items():
                signal.signal(signum, handler)


def _stopped(console: Console, signum: int, where: str, finished: int, manifest: CampaignManifest) -> int:
    console.print(
        f"faultline: stopped by {signal.Signals(signum).name} {where}; run the same command again to resume:"
        f" {finished} of {len(manifest.cells)} cells are finished",
        soft_wrap=True,
        highlight=False,
    )
    return 128 + signum


def _campaign_eta(manifest: CampaignManifest) -> str:
    """The campaign's time left after this cell, from the cells finished so far (none: unknown)."""
    finished = [c.seconds for c in manifest.cells if c.done]
    left = sum(not c.done for c in manifest.cells)
    if not finished or left < 2:
        return ""
    seconds = int(sum(finished) / len(finished) * (left - 1))
    return f" (then about {seconds // 60}:{seconds % 60:02d} for {left - 1} more)"


def _cells_table(manifest: CampaignManifest, folder: Path) -> Table:
    s = manifest.settings
    table = Table(
        title=f"campaign {folder} — {s.system or s.domain}, {len(s.tasks)} tasks x {s.trials} trials, {s.model}"
    )
    for column in ("cell", "fault", "defense", "wall time"):
        table.add_column(column, justify="right" if column == "wall time" else "left")
    for cell in manifest.cells:
        table.add_row(cell.name, cell.fault, cell.defense or "-", f"{cell.seconds:.1f} s")
    table.caption = f"read it with: faultline report {folder}"
    return table
