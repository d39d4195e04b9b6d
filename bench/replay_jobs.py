"""What one `faultline replay` command costs besides replaying, and how `--jobs` scales it.

    python -m bench.replay_jobs [--episodes 500] [--jobs 1,2] [--reps 3] [--json out.json]

Each figure times the whole command as a user runs it (`python -m faultline.cli replay --json`,
a process of its own, warm: an earlier replay left the chain checkpoint). "Fixed cost" is the
wall time of replaying a journal of one episode: start-up, imports, opening, the chain check and
the pool, with almost nothing to replay. For each `--jobs`: the command's wall time and the
handling time the report states (`seconds`: from the replay's start to its report), each with its
speed-up over one job on the same journal. Medians of `--reps` runs. Not a test; a 16-core
machine shows what 2 cores cannot, so run it there with `--jobs 1,2,4,8,16`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._common import machine
from faultline.api import SIM_NOTE

TASKS = 50


def record(journal: Path, episodes: int) -> None:
    """A sim run of `episodes` retail episodes (at most 50 tasks, trials for the rest) into `journal`."""
    tasks = min(TASKS, episodes)
    cmd = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(tasks), "--trials", str(episodes // tasks)]
    cmd += ["--error-rates", "0.03", "--concurrency", "32", "--journal", str(journal), "--json"]
    subprocess.run(cmd, check=True, capture_output=True)


def replay(journal: Path, jobs: int) -> tuple[float, dict[str, Any]]:
    """(wall seconds of the whole command, its JSON summary); a divergence stops the benchmark."""
    cmd = [sys.executable, "-m", "faultline.cli", "replay", str(journal), "--jobs", str(jobs), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"replay --jobs {jobs} of {journal} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, summary


def measure(episodes: int, jobs: list[int], reps: int, tmp: Path) -> dict[str, Any]:
    one, many = tmp / "one.sqlite", tmp / f"{episodes}.sqlite"
    record(one, 1)
    record(many, episodes)
    replay(one, 1)  # the first replay checks the whole chain and leaves the checkpoint
    replay(many, 1)
    fixed = statistics.median(replay(one, 1)[0] for _ in range(reps))
    runs: dict[int, list[tuple[float, float]]] = {j: [] for j in jobs}
    summary: dict[str, Any] = {}
    for _ in range(reps):
        for j in jobs:  # in turn, so that each job count sees the same machine
            wall, summary = replay(many, j)
            runs[j].append((wall, float(summary["seconds"])))
    rows = []
    base_wall = statistics.median(w for w, _ in runs[jobs[0]])
    base_handling = statistics.median(h for _, h in runs[jobs[0]])
    for j in jobs:
        wall = statistics.median(w for w, _ in runs[j])
        handling = statistics.median(h for _, h in runs[j])
        rows.append(
            {
                "jobs": j,
                "wall_s": wall,
                "handling_s": handling,
                "outside_handling_s": wall - handling,
                "wall_speedup": base_wall / wall,
                "handling_speedup": base_handling / handling,
            }
        )
    return {
        "episodes": summary.get("episodes", 0),
        "handled": summary.get("messages", 0),
        "fixed_cost_s": fixed,
        "reps": reps,
        "runs": rows,
    }


def table(result: dict[str, Any]) -> Table:
    out = Table(
        title=f"faultline replay of {result['episodes']} sim episodes ({result['handled']:,} handled inputs);"
        f" fixed cost (1-episode journal) {result['fixed_cost_s']:.2f} s, target <= 0.5 s"
    )
    for column in ("jobs", "wall s", "handling s", "wall - handling s", "wall speed-up", "handling speed-up"):
        out.add_column(column, justify="right")
    for r in result["runs"]:
        out.add_row(
            str(r["jobs"]),
            f"{r['wall_s']:.2f}",
            f"{r['handling_s']:.2f}",
            f"{r['outside_handling_s']:.2f}",
            f"{r['wall_speedup']:.2f}x",
            f"{r['handling_speedup']:.2f}x",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=500, help="episodes in the journal replayed with --jobs")
    parser.add_argument("--jobs", default="1,2", help="comma-separated job counts, the first the baseline")
    parser.add_argument("--reps", type=int, default=3, help="runs of each command; medians are reported")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()
    info = machine()
    with tempfile.TemporaryDirectory(prefix="faultline-replay-jobs-") as tmp:
        result = measure(args.episodes, [int(j) for j in args.jobs.split(",")], args.reps, Path(tmp))
    Console().print(table(result))
    Console().print(f"note: {SIM_NOTE}")
    if args.json:
        args.json.write_text(json.dumps(result | {"machine": info, "note": SIM_NOTE}, indent=2) + "\n")


if __name__ == "__main__":
    main()
