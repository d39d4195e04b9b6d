"""Chaos: seeded schedules of process, network, disk and clock faults against a 3-node JetStream cluster (R3)
while episodes run.

Each schedule starts a fresh system (three nats-server nodes on loopback, the journal service and two
worker processes under the supervisor, the built-in retail system on the sim model), runs `--episodes`
episodes four at a time, and meanwhile applies the faults drawn from its seed: SIGKILL, or SIGSTOP then
SIGCONT, of a worker, the journal service, any node or the stream's leader; a partition of a node (from
the other two and from every process) or of a process (from the three nodes), healed after a while; the
same one way only; the routes between two nodes cut while both reach the third (a bridge); every byte
of a node or a process held both ways with no word said (a black hole); a delay on every link of a node
or a process; the journal's disk full, or slow, for a while (`bench._disk`:
the journal then lives on a loop device of its own, which needs root); a process's wall clock stepped
forwards or back, and back again (`bench._wallclock`: every process is then started through it). Every
route between nodes, and every connection of the runner, the journal and the workers to a node, goes
through a link of the proxy (`bench._proxy`) that the nemesis cuts, slows and heals. `--kinds` draws from
fewer kinds (`kill,pause` draws the schedules of seeds run before the network kinds were added,
`kill,pause,partition,delay` those run before disks and clocks, and those with `one_way` added those
run before bridges and black holes); by default every kind this machine can apply. `--overlap` lets a fault begin while the one before lasts. While faults are left
once those episodes are done, more run, four at a time, so that every fault meets running episodes;
the checker counts them like the others. A run the journal refuses (its disk full) waits until the journal
writes again and goes on, as its user would. Time to recover is from a fault's end (SIGCONT sent, the node
restarted, the links healed, the disk freed or healed, the clock stepped back, or the kill of a process
the supervisor restarts) to the next completed episode, and the next fault waits for it (unless
`--overlap`), so no fault's time is lengthened by another's. Once the schedule has ended
and every process serves again, the checker compares what the runner started with what the journal
holds (none lost, none twice), verifies the journal and replays it. Schedule i uses seed `--seed` + i;
a failing schedule is rerun alone with `--seed` and `--schedules 1`. `--model local` runs the same on a
real model (llama.cpp's server and a small model on this machine, one episode in flight by default).

    python -m bench.chaos --schedules 3 --episodes 30 --json chaos.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from bench._checker import Verdict, check
from bench._cluster import CLUSTER_CONFIG, cluster, stream_ready
from bench._common import machine
from bench._disk import Disk, DiskUnavailable, journal_disk, unavailable
from bench._nemesis import (
    CUTTING_KINDS,
    DISK_KINDS,
    KINDS,
    LEADER,
    PROCESS_KINDS,
    Kind,
    Nemesis,
    Progress,
    Schedule,
    draw_schedule,
    percentile,
)
from bench._proxy import network
from faultline._errors import FaultlineError, JournalError
from faultline.api import (
    SIM_NOTE,
    PlannedEpisode,
    RunPlan,
    RunResult,
    plan_episodes,
    run_plan,
    stop_on_signal,
    wait_for_journal,
    worker_specs,
)
from faultline.bus import Bus
from faultline.envs import load_domain
from faultline.runtime import (
    LOCAL_SETTINGS,
    MODEL_NAME,
    Completions,
    ProcessSpec,
    Supervisor,
    bus_settings,
    completing_agents,
    load_config,
    local_model_server,
    parse_config,
    system_access,
)

AGENTS: tuple[str, ...] = ("env", "tool", "user")
"""The built-in tool-use system's agents, in the worker group `main`."""
GROUPS: dict[str, tuple[str, ...]] = {"main": AGENTS}
WORKERS = 2
CONCURRENCY = 4
EPISODE_TIMEOUT_S = 60.0
EXTRA_EPISODES = 1_200
"""At most this many episodes past `--episodes`, run while the schedule has faults left: at the 5.5 episodes a second
of a schedule whose faults barely slowed it (seed 1447), 25 faults of a few seconds each and their catching up took
more than the 400 there were once."""
JOURNAL_TIMEOUT_S = 60.0
LOCAL_EPISODE_TIMEOUT_S = 900.0
"""An episode's time limit against the local model: a small model on CPU takes seconds a call."""
LOCAL_MAX_TURNS = 3
"""The user's turns in an episode against the local model, as the other methods' runs on it: a small model
that never calls a tool would otherwise chat to the domain's limit."""
CONFIG = (
    CLUSTER_CONFIG
    + f"""
[workers.main]
agents = {json.dumps(list(AGENTS))}
count = {WORKERS}
"""
)


@dataclass(frozen=True)
class Load:
    """What a schedule's system runs: its models (`sim` unless `models` holds TOML tables for them), episodes
    in flight, and each one's time limit."""

    models: str = ""
    concurrency: int = CONCURRENCY
    episode_timeout_s: float = EPISODE_TIMEOUT_S
    max_turns: int = 0
    """The user's turns in an episode; 0: the plan's default."""
    trim_after_s: float = 0.0
    """How long the stream keeps a settled episode's messages (`[journal] trim_after_s`); 0: for ever, and the
    checker then also finds every message of the run in the stream."""


def local_models(url: str) -> str:
    """The `[models.default]` table pointing every role at the local model server at `url`, with the settings
    `faultline run --model local` starts from."""
    lines = [
        "[models.default]",
        'backend = "openai"',
        f"base_url = {json.dumps(url)}",
        f"model = {json.dumps(MODEL_NAME)}",
    ]
    for setting in LOCAL_SETTINGS:
        name, text = setting.split("=", 1)
        lines.append(f"{name} = {text if text.isdigit() else json.dumps(text)}")
    return "\n".join(lines) + "\n"


class ScheduleReport(msgspec.Struct, kw_only=True):
    schedule: Schedule
    verdict: Verdict
    applied: list[Any]
    """Each fault as applied (`bench._nemesis.Applied`, as builtins)."""
    completions_s: list[float]
    """When each episode completed, in seconds since the system was up (the time base of `applied`)."""
    runner_error: str
    seconds: float
    refused_s: list[float] = msgspec.field(default_factory=list)
    """When the journal refused the run new episodes (its disk full), in seconds since the system was up."""
    stream_held: tuple[int, int] = (0, 0)
    """The messages the stream held at the end, and how many it had stored: fewer once the journal trims it."""

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.runner_error


@dataclass
class LinkedSupervisor(Supervisor):
    """A supervisor that starts each process with its own URLs (its links to the nodes) and, with `clocks`, with
    a wall clock of its own, stepped by the offset in `clocks`/<name> (`bench._wallclock`)."""

    urls: dict[str, str] = field(default_factory=dict)
    clocks: Path | None = None

    def _argv(self, spec: ProcessSpec) -> list[str]:
        argv = super()._argv(spec)
        at = argv.index("--nats") + 1
        argv[at] = self.urls.get(spec.name, argv[at])
        if self.clocks is not None:
            argv[1:1] = ["-m", "bench._wallclock", str(self.clocks / spec.name)]
        return argv


def processes() -> list[str]:
    """The supervised processes a schedule may hit: the journal service and each worker."""
    config = parse_config(tomllib.loads(CONFIG))
    return ["journal", *(spec.name for spec in worker_specs(config, GROUPS, None))]


async def run_schedule(schedule: Schedule, workdir: Path, load: Load = Load()) -> ScheduleReport:
    """Run `schedule` on a fresh system in `workdir` under `load` and check what it left: with a disk fault, the
    journal on a disk of its own, copied into `workdir` once checked."""
    kinds = {fault.kind for fault in schedule.faults}
    episodes = schedule.episodes + EXTRA_EPISODES  # the most a schedule runs: the disk has room for their journal
    with journal_disk(workdir, episodes) if kinds & set(DISK_KINDS) else contextlib.nullcontext() as disk:
        clocks = workdir / "clocks" if Kind.CLOCK in kinds else None
        if clocks is not None:
            clocks.mkdir()
        report = await _run_system(schedule, workdir, load, disk, clocks)
        if disk is not None:
            for path in disk.mount.glob("journal.sqlite*"):
                shutil.copy2(path, workdir)
        return report


async def _run_system(
    schedule: Schedule, workdir: Path, load: Load, disk: Disk | None, clocks: Path | None
) -> ScheduleReport:
    config_path = workdir / "faultline.toml"
    config_path.write_text(CONFIG + load.models)
    config = load_config(config_path)
    access = system_access(workdir / "credentials", config, GROUPS, "fl").prepare()
    journal = (workdir if disk is None else disk.mount) / "journal.sqlite"
    domain = load_domain("retail")
    tasks = len(domain.tasks())
    plan = RunPlan(
        tasks=tasks,
        trials=math.ceil((schedule.episodes + EXTRA_EPISODES) / tasks),
        run_id=f"chaos-{schedule.seed}",
        concurrency=load.concurrency,
        episode_timeout_s=load.episode_timeout_s,
        tool_calls=config.model(config.role_of("tool")).tool_calls,
    )
    if load.max_turns:
        plan = msgspec.structs.replace(plan, max_turns=load.max_turns)
    pool = iter(plan_episodes(plan, domain))
    result = RunResult(list(itertools.islice(pool, schedule.episodes)))
    runner_error = ""
    completers = completing_agents(config, GROUPS)
    began = time.monotonic()
    async with network(schedule.seed) as net, cluster(workdir, access, net) as nodes:
        await stream_ready(nodes.url, access)
        supervisor = LinkedSupervisor(
            journal_path=journal,
            workers=worker_specs(config, GROUPS, config_path),
            nats_url=await nodes.client_url("runner"),
            urls={name: await nodes.client_url(name) for name in processes()},
            log_dir=workdir / "logs",
            extra_args=("--config", str(config_path)),
            access=access,
            bus_settings=bus_settings(config),
            completers=completers,
            clocks=clocks,
            journal_trim_after_s=load.trim_after_s,
        )
        async with supervisor.running():
            bus = supervisor.bus
            assert bus is not None
            progress = Progress()
            nemesis = Nemesis(schedule, nodes, supervisor, progress, disk=disk, clocks=clocks)
            refused_s: list[float] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(nemesis.run)
                try:
                    await run_alongside(bus, plan, result, pool, nemesis, refused_s, completers)
                except FaultlineError as exc:  # the runner gave up: the checker names what it left running
                    runner_error = f"{type(exc).__name__}: {exc}"
                if not nemesis.done.is_set():  # the faults waiting on episodes would wait for ever
                    runner_error = runner_error or f"the schedule outlasted {len(result.planned)} episodes"
                    tg.cancel_scope.cancel()
            await nemesis.all_back()
            await wait_for_journal(bus, timeout_s=JOURNAL_TIMEOUT_S)
            stored = await bus.stream_state()
    nemesis.settle()
    verdict = await anyio.to_thread.run_sync(check, journal, result, stored, runner_error, load.trim_after_s > 0)
    return ScheduleReport(
        schedule=schedule,
        verdict=verdict,
        applied=msgspec.to_builtins(nemesis.applied),
        completions_s=[round(t, 3) for t in progress.completions],
        runner_error=runner_error,
        seconds=time.monotonic() - began,
        refused_s=[round(t, 3) for t in refused_s],
        stream_held=(stored.messages, stored.last_seq),
    )


async def run_alongside(
    bus: Bus,
    plan: RunPlan,
    result: RunResult,
    more: Iterator[PlannedEpisode],
    nemesis: Nemesis,
    refused_s: list[float],
    completers: Collection[str],
) -> None:
    """Run `result.planned`, then `more` (added to `result.planned`), `plan.concurrency` at a time, until the schedule
    has ended: every fault meets running episodes, and episodes in flight at its end time its recovery.

    When the journal refuses new episodes (it cannot write), the run stops waiting for those it started; as
    its user would, this waits until the journal writes again, takes those the stream holds completed, and
    runs the rest (a start sent again has the same ids, and the stream keeps one copy). Each refusal's time
    goes to `refused_s`."""
    progress = nemesis.progress
    planned = list(result.planned)
    while planned:
        part = RunResult(planned)
        try:
            while True:
                try:
                    await run_plan(bus, plan, part, lambda _episode, _done: progress.completed())
                    break
                except JournalError:
                    refused_s.append(progress.now())
                    await nemesis.journal_writes()
                    await _take_stored(bus, part, completers, progress)
        finally:
            result.completed.update(part.completed)
            result.running.update(part.running)
            result.model_calls = part.model_calls
        planned = [] if nemesis.done.is_set() else list(itertools.islice(more, plan.concurrency))
        result.planned.extend(planned)


async def _take_stored(bus: Bus, part: RunResult, completers: Collection[str], progress: Progress) -> None:
    """Count as completed the episodes `part` was waiting for whose completion the stream holds."""
    async with Completions(bus, completers) as completions:
        done = await completions.stored(list(part.running))
    for episode, completed in done.items():
        del part.running[episode]
        part.completed[episode] = completed
        progress.completed()


def summarize(reports: list[ScheduleReport]) -> dict[str, Any]:
    """The numbers of a set of schedules: faults by kind and target, episodes, lost, duplicated, recovery.

    `recovery_alone_s` is by kind and target, over the faults whose next episode completed before the next
    fault began: the others' time to recover includes some of that fault's (only schedules drawn with
    `overlap`, or run before each fault waited for the one before's recovery, have such faults).
    `recovery_after_cuts_s` is the goal's figure: those of them that killed, stopped or cut off a node, or
    cut a process off the cluster."""
    applied = [a for r in reports for a in r.applied]
    recovered = [a["recovered_s"] for a in applied if a["recovered_s"] is not None]
    alone: dict[str, list[float]] = {}
    cuts: list[float] = []
    for report in reports:
        for a, after in itertools.zip_longest(report.applied, report.applied[1:]):
            if a["recovered_s"] is not None and (after is None or after["began_s"] > a["ended_s"] + a["recovered_s"]):
                alone.setdefault(_fault_class(a), []).append(a["recovered_s"])
                if _cuts(a["fault"]):
                    cuts.append(a["recovered_s"])
    return {
        "schedules": len(reports),
        "failed_schedules": [r.schedule.seed for r in reports if not r.ok],
        "faults": dict(Counter(_fault_class(a) for a in applied)),
        "episodes": sum(r.verdict.episodes for r in reports),
        "completed": sum(r.verdict.completed for r in reports),
        "outcomes": dict(sum((Counter(r.verdict.outcomes) for r in reports), Counter())),
        "lost": sum(len(r.verdict.lost) for r in reports),
        "duplicated": sum(len(r.verdict.duplicated) for r in reports),
        "recovery_s": _spread(recovered),
        "recovery_alone_s": {kind: _spread(times) for kind, times in sorted(alone.items())},
        "recovery_after_cuts_s": _spread(cuts),
        "no_episode_after": len(applied) - len(recovered),
        "refusals": sum(len(r.refused_s) for r in reports),
        "journal_caught_up_s": {
            kind: _spread([a["journal_caught_up_s"] for a in applied if a["fault"]["kind"] == kind])
            | {"most_behind": max((a["journal_behind"] or 0 for a in applied if a["fault"]["kind"] == kind), default=0)}
            for kind in sorted({a["fault"]["kind"] for a in applied if a["journal_caught_up_s"] is not None})
        },
        "seconds": sum(r.seconds for r in reports),
    }


def _spread(times: list[float]) -> dict[str, Any]:
    return {
        "n": len(times),
        "p50": percentile(times, 50),
        "p99": percentile(times, 99),
        "max": max(times, default=None),
    }


def _fault_class(applied: dict[str, Any]) -> str:
    return f"{applied['fault']['kind']} {_target_class(applied['fault']['target'])}"


def _cuts(fault: dict[str, Any]) -> bool:
    """Whether `fault` killed, stopped or cut off a node (the leader included), or cut a process off."""
    if fault["kind"] in CUTTING_KINDS:
        return True
    return fault["kind"] in PROCESS_KINDS and _target_class(fault["target"]) in ("node", LEADER)


def _target_class(target: str) -> str:
    return "worker" if target.startswith("worker") else "node" if target.startswith("n") else target


def print_report(report: ScheduleReport, say: Callable[[str], None]) -> None:
    v = report.verdict
    say(
        f"  {'ok' if report.ok else 'FAILED'} in {report.seconds:.0f}s: {v.completed}/{v.episodes} completed"
        f" {v.outcomes}, lost {len(v.lost)}, duplicated {len(v.duplicated)};"
        f" the stream holds {report.stream_held[0]} of the {report.stream_held[1]} messages it stored"
    )
    for applied in report.applied:
        recovered, during = applied["recovered_s"], applied["completed_during"]
        took = f"next episode {recovered:.2f}s after it" if recovered is not None else "no episode after it"
        lasted = f" ({during} completed while it lasted)" if applied["ended_s"] > applied["began_s"] else ""
        if applied["journal_caught_up_s"] is not None:
            behind = applied["journal_behind"]
            lasted += f"; the journal {'did not answer' if behind is None else f'was {behind} messages behind'}"
            lasted += f" and held the stream {applied['journal_caught_up_s']:.2f}s later"
        say(f"    {applied['fault']['kind']} {applied['target']} at {applied['began_s']:.1f}s: {took}{lasted}")
    if report.refused_s:
        at = ", ".join(f"{t:.1f}s" for t in report.refused_s)
        say(f"    the journal refused new episodes at {at}; the run went on once it wrote again")
    problems = {
        "runner": report.runner_error,
        "lost": v.lost,
        "duplicated": v.duplicated,
        "differing": v.differing,
        "not success": v.not_success,
        "stream": v.stream,
        "verify": v.verify,
        "replay": v.replay,
    }
    for name, problem in problems.items():
        if problem:
            say(f"    {name}: {problem}")


async def main_async(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """Run the schedules, writing what they found to `args.json` after each one: a long run cut short keeps
    the schedules it ran."""
    reports: list[ScheduleReport] = []
    broken: dict[int, str] = {}
    note = "" if args.load.models else SIM_NOTE  # no models of its own: the schedules ran on sim
    result = _result(reports, broken, note)
    # A stop signal unwinds the schedule as an error would: a paused process is resumed (a stopped one would
    # never act on the SIGTERM it gets when this process dies), every process stopped, the folder removed.
    async with stop_on_signal() as stop:
        for i in range(args.schedules):
            schedule = draw_schedule(args.seed + i, args.episodes, processes(), args.kinds, overlap=args.overlap)
            say(schedule.describe())
            report = await _attempt(schedule, args.keep, args.load)
            if isinstance(report, str):  # a process or node that never came back: the next schedule runs
                broken[schedule.seed] = report
                say(f"  FAILED before the checker: {report}")
            else:
                print_report(report, say)
                reports.append(report)
            result = _result(reports, broken, note)
            _save(result, args.json)
    result["summary"]["stopped_by"] = stop.name
    if stop.name:
        say(f"stopped by {stop.name}: the schedule it cut short is left out")
        _save(result, args.json)
    say(json.dumps(result["summary"], indent=2))
    if note:
        say(f"note: {note}")
    return result


def _save(result: dict[str, Any], path: str) -> None:
    if path:
        Path(path).write_text(json.dumps(result, indent=2))


def _result(reports: list[ScheduleReport], broken: dict[int, str], note: str) -> dict[str, Any]:
    """What the run found so far; `note` says what its numbers measure where the model was the simulator."""
    summary = summarize(reports) | {"broken_schedules": broken}
    summary["failed_schedules"] += list(broken)
    return {"machine": machine(), "summary": summary, "schedules": msgspec.to_builtins(reports), "note": note}


async def _attempt(schedule: Schedule, keep: str, load: Load) -> ScheduleReport | str:
    """The schedule's report, or what stopped it before the checker could run."""
    error = ""
    try:
        return await _run_in(schedule, keep, load)
    except* (FaultlineError, TimeoutError, DiskUnavailable) as group:
        error = "; ".join(f"{type(exc).__name__}: {exc}" for exc in _leaves(group))
    return error


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [
        leaf for exc in group.exceptions for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    ]


async def _run_in(schedule: Schedule, keep: str, load: Load) -> ScheduleReport:
    if keep:  # the journal, the stores and every process's log, to look into a schedule
        workdir = Path(keep) / f"seed-{schedule.seed}"
        workdir.mkdir(parents=True)
        return await run_schedule(schedule, workdir, load)
    with tempfile.TemporaryDirectory(prefix=f"chaos-{schedule.seed}-") as temporary:
        try:
            report = await run_schedule(schedule, Path(temporary), load)
        except* (FaultlineError, TimeoutError, DiskUnavailable):
            _keep_logs(schedule, Path(temporary))
            raise
        if not report.ok:
            _keep_logs(schedule, Path(temporary))
        return report


def _keep_logs(schedule: Schedule, workdir: Path) -> None:
    """Copy a failed schedule's process logs where they outlive its folder: a failure that passes when run again
    leaves them to read."""
    logs = workdir / "logs"
    if logs.is_dir():
        kept = Path(tempfile.mkdtemp(prefix=f"chaos-{schedule.seed}-logs-"))
        shutil.copytree(logs, kept, dirs_exist_ok=True)
        print(f"  the processes' logs of seed {schedule.seed} are kept in {kept}", flush=True)


def _kinds(text: str) -> tuple[Kind, ...]:
    try:
        return tuple(Kind(part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"kinds are among {', '.join(KINDS)}, not {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="schedule i draws from seed + i")
    parser.add_argument(
        "--json", default="", metavar="PATH", help="also write the schedules and results here, after each schedule"
    )
    parser.add_argument("--keep", default="", metavar="DIR", help="run each schedule in DIR/seed-S and keep it")
    parser.add_argument(
        "--kinds",
        type=_kinds,
        default=None,
        help=f"the fault kinds drawn, comma-separated (default: those of {','.join(KINDS)} this machine can apply)",
    )
    parser.add_argument("--overlap", action="store_true", help="a fault may begin while the one before lasts")
    parser.add_argument(
        "--model",
        choices=("sim", "local"),
        default="sim",
        help="sim (measures the runtime, never a model), or local: a real model, llama.cpp's server with a small"
        " GGUF model on this machine (`make real` installs it; slow)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help=f"episodes in flight (default {CONCURRENCY}; 1 with --model local)",
    )
    parser.add_argument(
        "--episode-timeout",
        type=float,
        default=None,
        help=f"an episode's time limit in seconds (default {EPISODE_TIMEOUT_S:g}; {LOCAL_EPISODE_TIMEOUT_S:g} with --model local)",
    )
    parser.add_argument(
        "--trim-after-s",
        type=float,
        default=0.0,
        help="the journal trims the stream of episodes silent this long, as [journal] trim_after_s (default 0: it"
        " keeps every message, and the checker finds them all in the stream)",
    )
    args = parser.parse_args(argv)
    if args.kinds is None or set(args.kinds) & set(DISK_KINDS):
        why = unavailable()
        if why and args.kinds is not None:
            parser.error(f"{'/'.join(DISK_KINDS)} need the journal on a disk of its own, which fails here: {why}")
        if why:
            print(f"leaving out {', '.join(DISK_KINDS)}: no disk of its own for the journal here ({why})")
        args.kinds = args.kinds or tuple(kind for kind in KINDS if not (why and kind in DISK_KINDS))
    local = args.model == "local"
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(local_model_server()) if local else ""
        except FaultlineError as exc:
            parser.error(str(exc))
        args.load = Load(
            models=local_models(url) if url else "",
            concurrency=args.concurrency or (1 if local else CONCURRENCY),
            episode_timeout_s=args.episode_timeout or (LOCAL_EPISODE_TIMEOUT_S if local else EPISODE_TIMEOUT_S),
            max_turns=LOCAL_MAX_TURNS if local else 0,
            trim_after_s=args.trim_after_s,
        )
        result = anyio.run(main_async, args, lambda line: print(line, flush=True))
    if result["summary"]["stopped_by"]:
        return 128 + signal.Signals[result["summary"]["stopped_by"]]
    return 1 if result["summary"]["failed_schedules"] else 0


if __name__ == "__main__":
    sys.exit(main())
