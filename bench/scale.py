"""Scale: live throughput against worker processes, journal shards and cells, CPU per process at saturation,
and replay against jobs, on whatever machine runs it.

Each configuration is one `faultline run` of `--tasks` retail tasks x `--trials` with the sim model
(the runtime's mechanisms, never a model's) and `--concurrency` episodes in flight, on a nats-server
of its own, all started at once (`[run] start_rate = 0`). While it runs, every process of the system is read from /proc once a second (utime +
stime); the CPU each used is reported over the `--window` seconds in which the system as a whole
used the most, which is the run at saturation. Episodes/s counts from the first start to the last
completion; the journal may still be copying the stream then, and the time the run waits for it after
(its lag) gives the rate the journal held: a lag of seconds means the journal did not keep up, and the
episodes/s is more than the system sustains. Since every episode starts at once, the first ones finish
faster than the system goes on finishing them: the settled rate, from the journal's timestamps, leaves
out a run's first 10 s (a run shorter than 20 s has none: give it more `--trials`), and `--json` holds
the rate in every 5 s. The largest journal of each shard count is then
replayed with each `--jobs`, and both the handling time replay reports and the command's wall time
are given, their difference being the command's fixed cost. `--server-cores` runs each configuration
with each number of cores for the embedded nats-server (`[nats] server_cores`; 0: faultline's default,
a quarter of the machine's), and the table says how many it ran on (its GOMAXPROCS).

`--cells 2,4` adds a run per count of cells and of `--workers` (`[nats] cells`: independent nats-servers, each with
its own stream, journal shard and that many worker processes per group), whose rows name each process's cell and
give the busiest server's share of a core beside the servers' CPU per episode in all.

Every row also gives nats-server's CPU per episode over the whole run: the rate one server process can carry
at a core is 1 / that. `--profile-server` samples the server with Linux `perf` and splits that CPU among the
parts of its work (`bench/_server_profile.py`): storing, delivering, finding each consumer's next message,
reading clients, writing consumers' state files, Go's runtime.

    python -m bench.scale [--workers 1,4,8] [--shards 1,4] [--cells 2,4] [--server-cores 0,16] [--jobs 1,2,4,8,16]
                          [--trim-after-s S] [--profile-server] [--json out.json]

Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import _server_profile
from bench._common import cpu_seconds, int_list, machine
from faultline.api import SIM_NOTE
from faultline.journal import JournalReader

SETTLE_S = 10.0
"""Seconds at a run's start left out of its steady rate: every episode starts at once, and the first ones finish
faster than the system goes on finishing them (bench/README.md, scale.py)."""
RATE_WINDOW_S = 5.0


def _descendants(root: int) -> list[int]:
    """Every living process under `root` (not itself), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu_seconds(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except OSError:
        return None


def _name(pid: int) -> str:
    """What the process is in the system: its `--name` (journal-0, a worker), nats-server, or the runner."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    words = [w.decode(errors="replace") for w in argv if w]
    if "--name" in words[:-1]:
        cell = next((m.group(1) for w in words if (m := _CELL_CONFIG.search(w))), "")
        return f"{cell}/" * bool(cell) + words[words.index("--name") + 1]
    return Path(words[0]).name if words else f"pid {pid}"


_CELL_CONFIG = re.compile(r"effective-config-(cell-\d+)\.json$")
"""The configuration file a cell's processes are started with, which names their cell."""


def _go_cores(pid: int) -> int | None:
    """The GOMAXPROCS a Go process was started with, if its environment names one."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [entry.split(b"=", 1)[1] for entry in environ if entry.startswith(b"GOMAXPROCS=")]
    return int(found[0]) if found else None


def _busiest_window(samples: list[tuple[float, dict[int, float]]], window_s: float) -> tuple[float, dict[int, float]]:
    """The window of about `window_s` in which the processes used the most CPU; each one's share of a core there."""
    best: tuple[float, dict[int, float]] = (0.0, {})
    for i, (start, first) in enumerate(samples):
        end_index = next((j for j in range(i + 1, len(samples)) if samples[j][0] - start >= window_s), None)
        if end_index is None:
            break
        end, last = samples[end_index]
        shares = {pid: (last[pid] - first[pid]) / (end - start) for pid in last if pid in first}
        total = sum(shares.values())
        if total > best[0]:
            best = (total, shares)
    return best


def completion_rates(journal: Path) -> tuple[float | None, list[float]]:
    """The episodes/s a run held once settled (None for a run too short to tell: under twice `SETTLE_S`), and its
    rate in each `RATE_WINDOW_S` from its first start, by the journal's timestamps."""
    with JournalReader(journal) as reader:
        episodes = reader.episodes()
    if not episodes:
        return None, []
    start = min(e.first_ts for e in episodes)
    ends = sorted(e.last_ts - start for e in episodes)
    windows = [0] * (int(ends[-1] // RATE_WINDOW_S) + 1)
    for end in ends:
        windows[int(end // RATE_WINDOW_S)] += 1
    rates = [count / RATE_WINDOW_S for count in windows]
    if ends[-1] < 2 * SETTLE_S:
        return None, rates
    settled = [end for end in ends if end >= SETTLE_S]
    return len(settled) / (ends[-1] - SETTLE_S), rates


def live(
    folder: Path,
    workers: int,
    shards: int,
    server_cores: int,
    tasks: int,
    trials: int,
    concurrency: int,
    window_s: float,
    trim_after_s: float | None = None,
    profile_server: bool = False,
    cells: int = 1,
) -> dict[str, Any]:
    name = f"w{workers}-s{shards}-c{server_cores}" + f"-cells{cells}" * (cells > 1)
    journal = folder / (name + (".sqlite" if shards == 1 and cells == 1 else ""))
    config = folder / f"{name}.toml"
    # every episode starts at once: the default fill-up at `[run] start_rate` (250 episodes/s) would cap a run
    # short enough for a benchmark below what the workers sustain, and measure the ramp instead
    trim = "" if trim_after_s is None else f"trim_after_s = {trim_after_s}\n"
    config.write_text(
        f'[nats]\nserver_cores = {server_cores}\ncells = {cells}\n\n[journal]\npath = "{journal}"\nshards = {shards}\n'
        f"{trim}\n"
        "[run]\nstart_rate = 0\n"
    )
    args = [sys.executable, "-m", "faultline.cli", "run", "--config", str(config), "--journal", str(journal)]
    args += ["--tasks", str(tasks), "--trials", str(trials), "--workers", str(workers)]
    args += ["--concurrency", str(concurrency), "--json"]
    run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples: list[tuple[float, dict[int, float]]] = []
    names: dict[int, str] = {}
    go_cores: int | None = None
    servers: list[int] = []
    profile = _server_profile.ServerProfile(folder / f"{name}.perf")
    while run.poll() is None:
        now = time.monotonic()
        reading: dict[int, float] = {}
        for pid in _descendants(run.pid) + [run.pid]:
            seconds = _cpu_seconds(pid)
            if seconds is not None:
                reading[pid] = seconds
                if pid not in names:
                    names[pid] = "runner" if pid == run.pid else _name(pid)
                    if names[pid] == "nats-server":
                        servers.append(pid)
                        go_cores = _go_cores(pid)
                        names[pid] += f" {len(servers) - 1}" * (cells > 1)
                        if profile_server and cells == 1:
                            profile.start(pid)
        samples.append((now, reading))
        time.sleep(1.0)  # a sampling period, not a wait for anything
    out, _ = run.communicate()
    if run.returncode != 0:
        raise SystemExit(
            f"faultline run failed (exit {run.returncode}) for {workers} workers, {shards} shards, {cells} cell(s)"
        )
    summary = json.loads(out.strip().splitlines()[-1])
    total, shares = _busiest_window(samples, window_s)
    steady, rates = completion_rates(journal)
    cpu = sorted(((names[pid], share) for pid, share in shares.items() if share > 0.01), key=lambda item: -item[1])
    server_s = sum(max((reading.get(pid, 0.0) for _, reading in samples), default=0.0) for pid in servers)
    return {
        "workers": workers,
        "shards": shards,
        "cells": cells,
        "busiest_server_share": max((shares.get(pid, 0.0) for pid in servers), default=0.0),
        "server_cores": go_cores,
        "episodes": summary["episodes"],
        "episodes_per_s": summary["episodes_per_s"],
        "journal_lag_s": summary["journal_wait_s"],
        "journaled_episodes_per_s": summary["episodes"] / (summary["seconds"] + summary["journal_wait_s"] or 1.0),
        "steady_episodes_per_s": steady,
        "episodes_per_s_by_window": rates,
        "cpu_total": total,
        "cpu": cpu,
        "server_cpu_ms_per_episode": 1000 * server_s / summary["episodes"],
        "server_profile_s": profile.parts(),
        "journal": str(journal),
    }


def replay(journal: Path, jobs: int) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "faultline.cli", "replay", str(journal), "--jobs", str(jobs), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    if not summary.get("identical"):
        raise SystemExit(f"replay of {journal} with {jobs} jobs was not identical")
    return {"jobs": jobs, "handling_s": summary["seconds"], "wall_s": wall, "episodes": summary["episodes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int_list, default=[1, 4, 8], help="worker processes per agent group")
    parser.add_argument("--shards", type=int_list, default=[1, 4], help="journal shards")
    parser.add_argument(
        "--cells", type=int_list, default=[], help="runs in cells, one per count and per --workers (workers per cell)"
    )
    parser.add_argument(
        "--server-cores", type=int_list, default=[0], help="cores of the embedded nats-server (0: faultline's default)"
    )
    parser.add_argument("--jobs", type=int_list, default=[1, 2, 4, 8, 16], help="replay jobs")
    parser.add_argument("--tasks", type=int, default=65)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=512, help="episodes in flight")
    parser.add_argument("--window", type=float, default=5.0, help="seconds of the CPU reading at saturation")
    parser.add_argument(
        "--trim-after-s",
        type=float,
        help="[journal] trim_after_s of the runs (default: the configuration's; 0: the stream is never trimmed)",
    )
    parser.add_argument(
        "--profile-server",
        action="store_true",
        help="sample nats-server with perf and split its CPU per episode among the parts of its work",
    )
    parser.add_argument("--keep", type=Path, help="keep the journals in this folder")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    host = machine()
    console.print(f"[bold]machine[/]: {host['cpus']} CPUs, {host['platform']}, Python {host['python']}")
    console.print("the sim model answers at once: these figures measure the runtime's mechanisms, never a model")
    if args.profile_server and (why := _server_profile.unavailable()) is not None:
        raise SystemExit(f"--profile-server: {why}")
    results: dict[str, Any] = {"machine": host, "live": [], "replay": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)

        def measure(workers: int, shards: int, cores: int, cells: int = 1) -> None:
            row = live(
                folder,
                workers,
                shards,
                cores,
                args.tasks,
                args.trials,
                args.concurrency,
                args.window,
                args.trim_after_s,
                args.profile_server,
                cells,
            )
            results["live"].append(row)
            console.print(_described(row))

        for shards in args.shards:
            for workers in args.workers:
                for cores in args.server_cores:
                    measure(workers, shards, cores)
            largest = Path(results["live"][-1]["journal"])
            for jobs in args.jobs:
                timing = replay(largest, jobs) | {"shards": shards}
                results["replay"].append(timing)
                console.print(
                    f"replay of {shards} shard(s), {jobs} jobs: {timing['handling_s']:.2f} s handling,"
                    f" {timing['wall_s']:.2f} s wall"
                )
        for cells in args.cells:
            for workers in args.workers:
                for cores in args.server_cores:
                    measure(workers, cells, cores, cells)
    _tables(console, results)
    if args.json:
        args.json.write_text(json.dumps(results | {"note": SIM_NOTE}, indent=2))


def _described(row: dict[str, Any]) -> str:
    """A live row in one line, as it is measured."""
    top = ", ".join(f"{name} {share:.0%}" for name, share in row["cpu"][:4])
    if row["cells"] > 1:
        layout = (
            f"{row['cells']} cell(s), {row['workers']} worker(s)/group each, nats-servers on {row['server_cores']}"
            " core(s) each"
        )
        servers = f"busiest nats-server {row['busiest_server_share']:.0%} of a core, all of them"
    else:
        layout = (
            f"{row['shards']} shard(s), {row['workers']} worker(s)/group, nats-server on {row['server_cores']} core(s)"
        )
        servers = "nats-server"
    return (
        f"{layout}: {row['episodes_per_s']:.0f} episodes/s ({row['journaled_episodes_per_s']:.0f} journaled, lag"
        f" {row['journal_lag_s']:.1f} s; {_steady(row)} once settled); busiest: {top}; {servers}"
        f" {row['server_cpu_ms_per_episode']:.2f} ms of CPU per episode"
    )


def _steady(row: dict[str, Any]) -> str:
    steady = row["steady_episodes_per_s"]
    return "-" if steady is None else f"{steady:.0f}"


def _tables(console: Console, results: dict[str, Any]) -> None:
    live_table = Table(title="live throughput (sim: the runtime's mechanisms, not a model)")
    columns = (
        "cells",
        "shards",
        "workers/group",
        "nats-server cores",
        "episodes/s",
        "x 1 worker, 1 shard",
        f"settled episodes/s (after {SETTLE_S:g} s)",
        "journal lag (s)",
        "journaled episodes/s",
        "busiest process (% of a core)",
        "busiest nats-server (% of a core)",
        "nats-server CPU per episode (ms)",
    )
    for column in columns:
        live_table.add_column(column, justify="right")
    base = next(
        (r["episodes_per_s"] for r in results["live"] if (r["workers"], r["shards"], r.get("cells", 1)) == (1, 1, 1)),
        None,
    )
    for row in results["live"]:
        busiest = row["cpu"][0] if row["cpu"] else ("-", 0.0)
        ratio = f"{row['episodes_per_s'] / base:.2f}" if base else "-"
        live_table.add_row(
            str(row.get("cells", 1)),
            str(row["shards"]),
            str(row["workers"]),
            str(row["server_cores"] or "-"),
            f"{row['episodes_per_s']:.0f}",
            ratio,
            _steady(row),
            f"{row['journal_lag_s']:.1f}",
            f"{row['journaled_episodes_per_s']:.0f}",
            f"{busiest[0]} {busiest[1]:.0%}",
            f"{row.get('busiest_server_share', 0.0):.0%}",
            f"{row['server_cpu_ms_per_episode']:.2f}",
        )
    console.print(live_table)
    profiled = [row for row in results["live"] if row["server_profile_s"]]
    if profiled:
        console.print(_profile_table(profiled))
    replay_table = Table(title="replay against jobs")
    for column in ("shards", "jobs", "episodes", "handling (s)", "wall (s)", "fixed cost (s)", "speed-up (wall)"):
        replay_table.add_column(column, justify="right")
    for row in results["replay"]:
        one = next((r["wall_s"] for r in results["replay"] if r["shards"] == row["shards"] and r["jobs"] == 1), None)
        replay_table.add_row(
            str(row["shards"]),
            str(row["jobs"]),
            str(row["episodes"]),
            f"{row['handling_s']:.2f}",
            f"{row['wall_s']:.2f}",
            f"{row['wall_s'] - row['handling_s']:.2f}",
            f"{one / row['wall_s']:.1f}x" if one else "-",
        )
    console.print(replay_table)


def _profile_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="nats-server's CPU per episode by part of its work (ms; perf samples, parts may overlap)")
    table.add_column("part")
    for row in rows:
        table.add_column(f"{row['shards']} shard(s), {row['workers']} worker(s)", justify="right")
    for part in ("all", *_server_profile.PARTS):
        table.add_row(part, *(f"{1000 * row['server_profile_s'][part] / row['episodes']:.2f}" for row in rows))
    return table


if __name__ == "__main__":
    main()
