"""Episodes in flight against throughput, with model calls that take 2 s each (the `sim` backend's emulated latency).

sim: these numbers measure the runtime's mechanisms (holding episodes that wait on a model), never a model.

Each level runs `faultline.run` on a fresh local system (nats-server, the journal service, `--workers`
worker processes, default 1) with `bench.agents:Capacity`: a drafter asks the model `--calls` times, hands
its draft to a reviewer, which asks `--calls` times and finishes, so an episode makes 2 x calls
model calls and waits 2 x calls x latency on its model. `--waves` x N episodes run N at a time:

- episodes/s: the episodes completed in the second wave over the time it took (the first wave's
  end to the second's), all N in flight throughout;
- model-bound limit: N / (model calls per episode x latency), what the model alone allows;
- memory per episode in flight: the resident memory (VmRSS) of every process of the run (this
  one, the runner, and all it started) at its highest during the second wave, less the same sum
  once the system was up and idle, divided by N. This counts caches of a fixed size that fill as
  the run goes (the journal's SQLite pages, up to 16 MiB) as if episodes held them; with several
  levels, "KB per added episode" is the growth of that peak from one level to the next over the
  episodes added, which leaves them out.

Targets: 5,000 in flight within 10% of the model-bound limit, under 100 KB per episode in flight.

    python -m bench.capacity [--levels 100,1000,5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, machine
from faultline.api import RunPlan, RunSpec, run
from faultline.runtime import load_config, tune_collector

ROOT = Path(__file__).resolve().parent.parent
TARGET_IN_FLIGHT = 5_000
TARGET_RATIO = 0.9
TARGET_KB = 100.0
SAMPLE_S = 0.25
RECORDS = 100
SIM_NOTE = "sim: these numbers measure the runtime's mechanisms, never a model"
CONFIG = """
[plugins]
path = [{root}]

[system]
class = "bench.agents:Capacity"
inputs = "inputs.jsonl"

[runtime]
concurrency = {handlers}

[workers.main]
count = {workers}

[models.default.latency]
{latency}
"""


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def family(root: int) -> list[int]:
    """`root` and every process below it (nats-server, the journal service, the workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def total_rss_kib() -> tuple[int, int]:
    """(VmRSS summed over this process and all below it, how many processes)."""
    pids = family(os.getpid())
    return sum(rss_kib(pid) for pid in pids), len(pids)


def role_of(pid: int) -> str:
    """What a process of the run is, from its command line: runner, nats-server, journal, worker."""
    if pid == os.getpid():
        return "runner"
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    if any(word.endswith("nats-server") for word in words):
        return "nats-server"
    for role in ("journal", "worker", "memory"):
        if role in words:
            return role
    return Path(words[0]).name if words and words[0] else "other"


def by_role() -> dict[str, tuple[int, float]]:
    """(VmRSS KiB, CPU seconds) summed per kind of process of the run."""
    totals: dict[str, tuple[int, float]] = {}
    for pid in family(os.getpid()):
        try:
            cpu = cpu_seconds(pid)
        except OSError:
            continue
        rss, seconds = totals.get(role_of(pid), (0, 0.0))
        totals[role_of(pid)] = (rss + rss_kib(pid), seconds + cpu)
    return totals


@dataclass
class Watcher:
    """A `RunProgress` that notes when the system was up (and its memory then) and when each wave ended."""

    in_flight: int
    idle_kib: int = 0
    processes: int = 0
    done: int = 0
    up_at: float = 0.0
    reached: dict[int, float] = field(default_factory=dict)
    roles: dict[int, dict[str, tuple[int, float]]] = field(default_factory=dict)
    """Memory and CPU per kind of process: when the system was up (0) and when each wave had ended."""

    def started(self, plan: RunPlan, episodes: int, *, starting_system: bool) -> None:
        return None

    def system_up(self) -> None:
        self.up_at = time.monotonic()
        self.idle_kib, self.processes = total_rss_kib()
        self.roles[0] = by_role()

    def update(self, done: int, ok: int, waiting: str) -> None:
        self.done = done
        for wave in (1, 2, 3):
            if done >= wave * self.in_flight and wave not in self.reached:
                self.reached[wave] = time.monotonic()
                self.roles[wave] = by_role()

    def finished(self) -> None:
        return None


def sample(watcher: Watcher, stop: threading.Event, peaks: list[int]) -> None:
    """The highest total RSS seen while the second wave runs (N episodes in flight throughout)."""
    while not stop.wait(SAMPLE_S):
        if 1 in watcher.reached and 2 not in watcher.reached:
            peaks.append(total_rss_kib()[0])


def journal_calls(journal: Path, run_id: str) -> tuple[float, float, int]:
    """(model calls per episode, mean recorded latency_s, episodes) of the run, from its journal."""
    with sqlite3.connect(journal) as db:
        calls, latency, episodes = db.execute(
            "SELECT count(*), avg(latency_s), count(DISTINCT episode) FROM model_calls WHERE episode LIKE ?",
            (f"{run_id}-%",),
        ).fetchone()
    return calls / max(episodes, 1), float(latency or 0.0), int(episodes)


def level(in_flight: int, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="faultline-capacity-") as scratch:
        folder = Path(scratch)
        (folder / "inputs.jsonl").write_text(
            "".join(json.dumps({"id": f"c{i}", "calls": args.calls}) + "\n" for i in range(RECORDS))
        )
        config_file = folder / "faultline.toml"
        latency = (
            f'distribution = "uniform"\nlow_s = {args.latency - args.spread}\nhigh_s = {args.latency + args.spread}'
            if args.spread
            else f'distribution = "fixed"\nseconds = {args.latency}'
        )
        config_file.write_text(
            CONFIG.format(root=json.dumps(str(ROOT)), handlers=args.handlers, workers=args.workers, latency=latency)
        )
        watcher = Watcher(in_flight)
        run_id = f"cap{in_flight}"
        spec = RunSpec(
            config=load_config(config_file),
            config_path=config_file,
            journal=folder / "journal.sqlite",
            tasks=min(RECORDS, in_flight),
            trials=math.ceil(args.waves * in_flight / min(RECORDS, in_flight)),
            concurrency=in_flight,
            episode_timeout_s=args.episode_timeout,
            run_id=run_id,
            insecure=True,
        )
        stop, peaks = threading.Event(), list[int]()
        sampler = threading.Thread(target=sample, args=(watcher, stop, peaks), daemon=True)
        sampler.start()
        started = time.monotonic()
        try:
            report = run(spec, progress=watcher)
        finally:
            stop.set()
            sampler.join()
        wall = time.monotonic() - started
        calls, recorded_latency, journaled = journal_calls(folder / "journal.sqlite", run_id)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(folder / "journal.sqlite", args.keep / f"{run_id}.sqlite")
    outcomes = report.summary.outcomes
    if 1 not in watcher.reached or 2 not in watcher.reached:
        raise RuntimeError(f"{in_flight} in flight: the second wave did not complete ({outcomes})")
    wave_s = watcher.reached[2] - watcher.reached[1]
    rate = in_flight / wave_s
    limit = in_flight / (calls * recorded_latency)
    per_episode_kib = (max(peaks, default=0) - watcher.idle_kib) / in_flight
    per_process = {
        role: {
            "idle_rss_mib": watcher.roles[0].get(role, (0, 0.0))[0] / 1024,
            "rss_mib_after_wave_2": rss / 1024,
            "cpu_share_in_wave_2": (cpu - watcher.roles[1].get(role, (0, 0.0))[1]) / wave_s,
        }
        for role, (rss, cpu) in watcher.roles[2].items()
    }
    result = {
        "in_flight": in_flight,
        "episodes": report.summary.episodes,
        "outcomes": outcomes,
        "model_calls_per_episode": calls,
        "recorded_latency_s": recorded_latency,
        "journaled_episodes": journaled,
        "episodes_per_s": rate,
        "model_bound_per_s": limit,
        "ratio": rate / limit,
        "idle_rss_mib": watcher.idle_kib / 1024,
        "plateau_rss_mib": max(peaks, default=0) / 1024,
        "processes": watcher.processes,
        "kb_per_episode": per_episode_kib * 1.024,
        "wall_s": wall,
        "per_process": per_process,
    }
    for role, seen in sorted(per_process.items()):
        console.print(
            f"    {role:<12} RSS {seen['idle_rss_mib']:6.0f} -> {seen['rss_mib_after_wave_2']:6.0f} MiB,"
            f" CPU {seen['cpu_share_in_wave_2']:.0%} of a core in wave 2"
        )
    console.print(
        f"{in_flight:>6,} in flight: {rate:7.1f} episodes/s of {limit:7.1f} ({rate / limit:.1%}),"
        f" {per_episode_kib * 1.024:6.1f} KB per episode in flight, {wall:.0f} s, {outcomes}"
    )
    return result


def report_table(results: list[dict[str, Any]], args: argparse.Namespace) -> Table:
    table = Table(
        title=f"episodes in flight, {args.latency:g} s per model call (sim: the runtime's mechanisms, never a model)"
    )
    for column in (
        "in flight",
        "calls/episode",
        "episodes/s",
        "model-bound limit",
        "ratio",
        "RSS idle / plateau",
        "KB per episode in flight",
        "KB per added episode",
        "target",
    ):
        table.add_column(column)
    for r in results:
        at_target = r["in_flight"] >= TARGET_IN_FLIGHT
        ok = r["ratio"] >= TARGET_RATIO and r["kb_per_episode"] < TARGET_KB
        verdict = ("PASS" if ok else "MISS") if at_target else ""
        table.add_row(
            f"{r['in_flight']:,}",
            f"{r['model_calls_per_episode']:.1f}",
            f"{r['episodes_per_s']:.1f}",
            f"{r['model_bound_per_s']:.1f}",
            f"{r['ratio']:.1%}",
            f"{r['idle_rss_mib']:.0f} / {r['plateau_rss_mib']:.0f} MiB",
            f"{r['kb_per_episode']:.1f}",
            f"{r['kb_per_added_episode']:.1f}" if "kb_per_added_episode" in r else "-",
            verdict,
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="100,1000,5000", help="episodes in flight, comma-separated")
    parser.add_argument("--calls", type=int, default=4, help="model calls per agent and episode (2 agents)")
    parser.add_argument("--latency", type=float, default=2.0, help="mean seconds per model call")
    parser.add_argument(
        "--spread",
        type=float,
        default=0.5,
        help="latency drawn uniformly within +- this many seconds of the mean (0: every call takes exactly --latency)",
    )
    parser.add_argument("--waves", type=int, default=3, help="episodes run, in multiples of the level")
    parser.add_argument("--handlers", type=int, default=256, help="[runtime] concurrency of each worker")
    parser.add_argument("--workers", type=int, default=1, help="worker processes, each serving its share of episodes")
    parser.add_argument("--episode-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="copy each level's journal into this folder")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tune_collector()  # this process is the runner, as `faultline run`'s is
    console = Console(width=120)
    console.print(SIM_NOTE)
    results = [level(int(n), args, console) for n in args.levels.split(",")]
    for before, after in itertools.pairwise(results):
        # what one more episode in flight costs, without the caches that fill to a fixed size (SQLite's pages)
        added = (after["plateau_rss_mib"] - before["plateau_rss_mib"]) * 1024 * 1.024
        after["kb_per_added_episode"] = added / (after["in_flight"] - before["in_flight"])
    console.print(report_table(results, args))
    console.print(SIM_NOTE)
    if args.json:
        payload = {
            "machine": machine(),
            "args": vars(args) | {"json": str(args.json)},
            "results": results,
            "note": SIM_NOTE,
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))


if __name__ == "__main__":
    main()
