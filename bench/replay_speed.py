"""Replay speed on a journal of 1000+ sim episodes, against the live run that wrote it.

    python bench/replay_speed.py [--trials 16] [--json out.json]

Targets: at least 20k messages/s, and at least 10x faster than the live run. Tools are
served from the journal by default; `--reexecute-tools` rows run the environment again.
"messages" are the handled inputs replay feeds to agents; journal rows (which
also count recordings and events) are reported too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from faultline.journal import JournalReader
from faultline.replay import Replayer
from faultline.runtime import Config, agent_lookup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16, help="65 tasks x TRIALS episodes (default 16: 1040)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "j.sqlite"
        cmd = [sys.executable, "-m", "faultline.cli", "run", "--tasks", "65", "--trials", str(args.trials)]
        cmd += ["--error-rates", "0.03", "--concurrency", "32", "--journal", str(journal), "--json"]
        live = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        with JournalReader(journal) as reader:
            rows = reader.last_pos
        size = journal.stat().st_size
        results = []
        for reexecute, jobs in ((False, 1), (False, 2), (True, 1), (True, 2)):
            report = Replayer(agent_lookup(Config()), jobs=jobs, reexecute_tools=reexecute).replay(journal)
            assert report.identical, report.divergences[:1]
            results.append(
                {
                    "tools": "re-executed" if reexecute else "served",
                    "jobs": jobs,
                    "episodes": report.episodes,
                    "messages": report.messages,
                    "rows": rows,
                    "seconds": report.seconds,
                    "messages_per_s": report.messages / report.seconds,
                    "rows_per_s": rows / report.seconds,
                    "episodes_per_s": report.episodes / report.seconds,
                    "live_seconds": live["seconds"],
                    "speedup_vs_live": live["seconds"] / report.seconds,
                    "bytes_per_episode": size / report.episodes,
                }
            )
    table = Table(
        title=f"replay of {results[0]['episodes']} episodes ({rows} journal rows, "
        f"{results[0]['bytes_per_episode'] / 1024:.0f} KB per episode); live run {live['seconds']:.1f} s"
    )
    for column in (
        "tools",
        "jobs",
        "seconds",
        "messages/s (target 20k)",
        "rows/s",
        "episodes/s",
        "x live (target 10x)",
    ):
        table.add_column(column)
    for r in results:
        table.add_row(
            str(r["tools"]),
            str(r["jobs"]),
            f"{r['seconds']:.2f}",
            f"{r['messages_per_s']:,.0f}",
            f"{r['rows_per_s']:,.0f}",
            f"{r['episodes_per_s']:.0f}",
            f"{r['speedup_vs_live']:.1f}",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
