"""Episodes per second and the runtime's own cost per model call, with the sim model.

The sim model answers in microseconds, so an episode's latency is the runtime's
cost: NATS hops, JetStream stores, journaling, the agents' own work. Measured
for 1 and 2 worker processes per agent group:

- throughput: 65 retail tasks x 4 trials, 16 episodes in flight;
- latency: episodes one at a time, so latency is not queueing; per model call =
  episode latency / model calls in the episode; per hop = latency / messages handled.

Target: the runtime adds under 5 ms per model call on average.

    python -m bench.episodes [--json out.json]
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

from faultline.api import SIM_NOTE
from faultline.journal import JournalReader

TARGET_MS_PER_CALL = 5.0


def run(journal: Path, workers: int, tasks: int, trials: int, concurrency: int) -> dict:  # type: ignore[type-arg]
    args = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(tasks), "--trials", str(trials)]
    args += ["--concurrency", str(concurrency), "--workers", str(workers), "--journal", str(journal), "--json"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def per_episode_counts(journal: Path) -> tuple[float, float]:
    """(model calls, handled messages) per episode, from the journal."""
    calls = handled = episodes = 0
    with JournalReader(journal) as reader:
        for _, rows in reader.by_episode():
            episodes += 1
            calls += sum(1 for r in rows if r.kind == "recording" and b"llm" in r.body[:40])
            handled += sum(1 for r in rows if r.recipient)
    return calls / episodes, handled / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            throughput = run(Path(tmp) / f"t{workers}.sqlite", workers, tasks=65, trials=4, concurrency=16)
            latency_journal = Path(tmp) / f"l{workers}.sqlite"
            latency = run(latency_journal, workers, tasks=30, trials=1, concurrency=1)
            calls, hops = per_episode_counts(latency_journal)
            ms = latency["avg_latency_s"] * 1000
            results.append(
                {
                    "workers": workers,
                    "episodes_per_s": throughput["episodes_per_s"],
                    "episode_latency_ms": ms,
                    "model_calls_per_episode": calls,
                    "hops_per_episode": hops,
                    "ms_per_model_call": ms / calls,
                    "ms_per_hop": ms / hops,
                }
            )
    table = Table(title="episodes with the sim model (runtime cost only)")
    for column in (
        "workers/group",
        "episodes/s",
        "latency/episode",
        "calls/episode",
        "ms per model call",
        "ms per hop",
        "target < 5 ms/call",
    ):
        table.add_column(column)
    for r in results:
        verdict = "PASS" if r["ms_per_model_call"] < TARGET_MS_PER_CALL else "MISS"
        table.add_row(
            str(r["workers"]),
            f"{r['episodes_per_s']:.1f}",
            f"{r['episode_latency_ms']:.0f} ms",
            f"{r['model_calls_per_episode']:.1f}",
            f"{r['ms_per_model_call']:.2f}",
            f"{r['ms_per_hop']:.2f}",
            verdict,
        )
    Console().print(table)
    Console().print(f"note: {SIM_NOTE}")
    if args.json:
        args.json.write_text(json.dumps({"note": SIM_NOTE, "results": results}, indent=2))


if __name__ == "__main__":
    main()
