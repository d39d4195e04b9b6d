"""Replay speed against the live run that wrote the journal, for 200 and 2000 sim episodes.

    python -m bench.replay_speed [--episodes 200,2000] [--json out.json]

Targets: at least 20k messages/s, and at least 10x faster than the live run, on one
process. "rows/s" counts every journal row replay reads and checks (messages, recordings,
events); "handled/s" counts only the inputs handed to agents' handlers. The first replay
of a journal checks the whole hash chain ("cold"); later ones resume after the
checkpoint it left ("warm"). Tools are served from the journal by default;
"re-executed" rows run the environment again (`--reexecute-tools`). "CPU s" is the CPU time
of the replay, its worker processes included: on a shared machine it moves much less than
the wall time, and "rows/CPU s" is the rate one free core would give.
These journals come from the `sim` model: the numbers measure the runtime, not a model.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from faultline.api import SIM_NOTE
from faultline.journal import JournalReader
from faultline.journal._head import checkpoint_path
from faultline.replay import Replayer
from faultline.runtime import Config, agent_lookup

TASKS = 50

CONFIGS = (("served", 1, "cold"), ("served", 1, "warm"), ("served", 2, "warm"))
CONFIGS += (("re-executed", 1, "warm"), ("re-executed", 2, "warm"))


def measure(episodes: int, tmp: Path) -> list[dict[str, Any]]:
    journal = tmp / f"{episodes}.sqlite"
    trials = max(1, episodes // TASKS)
    cmd = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(TASKS), "--trials", str(trials)]
    cmd += ["--error-rates", "0.03", "--concurrency", "32", "--journal", str(journal), "--json"]
    live = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    with JournalReader(journal) as reader:
        rows = reader.last_pos
    size = journal.stat().st_size
    results = []
    for tools, jobs, chain in CONFIGS:
        if chain == "cold":
            checkpoint_path(journal).unlink(missing_ok=True)
        replayer = Replayer(agent_lookup(Config()), jobs=jobs, reexecute_tools=tools == "re-executed")
        cpu = _cpu_seconds()
        report = replayer.replay(journal)
        cpu = _cpu_seconds() - cpu
        assert report.identical, report.divergences[:1]
        results.append(
            {
                "episodes": report.episodes,
                "tools": tools,
                "jobs": jobs,
                "chain_check": chain,
                "rows": rows,
                "handled": report.messages,
                "seconds": report.seconds,
                "rows_per_s": rows / report.seconds,
                "cpu_seconds": cpu,
                "rows_per_cpu_s": rows / cpu,
                "handled_per_s": report.messages / report.seconds,
                "live_seconds": live["seconds"],
                "speedup_vs_live": live["seconds"] / report.seconds,
                "bytes_per_episode": size / report.episodes,
            }
        )
    return results


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the replay's worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def table(results: list[dict[str, Any]]) -> Table:
    first = results[0]
    out = Table(
        title=f"replay of {first['episodes']} sim episodes ({first['rows']:,} rows, "
        f"{first['bytes_per_episode'] / 1024:.1f} KB per episode); live run {first['live_seconds']:.1f} s"
    )
    columns = ("tools", "jobs", "chain check", "seconds", "rows/s (target 20k)", "CPU s", "rows/CPU s")
    columns += ("handled/s", "x live (target 10x)")
    for column in columns:
        out.add_column(column)
    for r in results:
        out.add_row(
            r["tools"],
            str(r["jobs"]),
            r["chain_check"],
            f"{r['seconds']:.2f}",
            f"{r['rows_per_s']:,.0f}",
            f"{r['cpu_seconds']:.2f}",
            f"{r['rows_per_cpu_s']:,.0f}",
            f"{r['handled_per_s']:,.0f}",
            f"{r['speedup_vs_live']:.1f}",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", default="200,2000", help="comma-separated run sizes (default 200,2000)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    everything = []
    with tempfile.TemporaryDirectory() as tmp:
        for episodes in (int(n) for n in args.episodes.split(",")):
            results = measure(episodes, Path(tmp))
            console.print(table(results))
            everything.extend(results)
    console.print(f"note: {SIM_NOTE}")
    if args.json:
        args.json.write_text(json.dumps({"note": SIM_NOTE, "results": everything}, indent=2))


if __name__ == "__main__":
    main()
