"""The runtime's cost of a context round: ms per decision that helpers add, with the sim model.

Each roster runs the same retail tasks one episode at a time (so latency is not
queueing): no helpers, then 1 (dce), 3 (dce, tsa, memory:6) and all 6. The sim
answers in microseconds, so what a roster adds to an episode is the runtime's
work: the requests to each helper, their replies, the timer, the tool agent
handling each reply, the journal. Per decision = (episode latency with the
roster - without) / the tool agent's decisions per episode; the time the sim
spends computing helper answers (measured alone, in-process) is subtracted, so
the number excludes model time. The same difference is taken in CPU time too,
summed over every process of the run (nats-server, journal, workers), which a
busy shared machine disturbs far less than latency. These numbers measure the
runtime's mechanism with a simulator; they say nothing about any model.

Target: under 10 ms per decision with 6 helpers.

    python bench/helpers.py [--tasks N] [--json out.json]
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

from rich.console import Console
from rich.table import Table

from faultline.core import ChatMessage, LlmRequest
from faultline.envs import load_domain
from faultline.journal import JournalReader
from faultline.runtime.models import SimBackend

TARGET_MS = 10.0
ROSTERS = {0: "none", 1: "dce", 3: "dce,tsa,memory:6", 6: "dce,tsa,tor,planner,memory:6,verifier"}


def run(journal: Path, roster: str, tasks: int) -> tuple[dict, float]:  # type: ignore[type-arg]
    """The run's JSON summary, and the CPU seconds of all its processes (they are its children, waited for)."""
    args = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(tasks), "--concurrency", "1"]
    args += ["--helpers", roster, "--journal", str(journal), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out), cpu_s


def decisions_per_episode(journal: Path) -> float:
    """The tool agent's model calls per episode (its decisions, revisions included)."""
    with JournalReader(journal) as reader:
        episodes = {s.episode for s in reader.episodes()}
        calls = sum(1 for r in reader.rows() if r.kind == "recording" and r.sender == "tool" and b"llm" in r.body[:40])
    return calls / max(len(episodes), 1)


def sim_helper_ms(roster: str) -> float:
    """Milliseconds the sim spends answering one round of the roster's model calls, in-process."""
    domain = load_domain("retail")
    task = domain.tasks()[0]
    backend = SimBackend()
    asked = [h for h in roster.split(",") if h in ("dce", "tsa", "planner", "verifier")]
    conversation = [ChatMessage(role="user", content=task.instruction)]
    requests = [
        LlmRequest(
            role=h,
            messages=[ChatMessage(role="system", content=domain.policy), *conversation, ChatMessage(role="user", content="?")],
            metadata={"sim": "helper", "helper": h, "domain": "retail", "task": task.id,
                      "proposal": task.actions[0].as_dict()},
        )
        for h in asked
    ]  # fmt: skip
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        for request in requests:
            backend.respond(request)
    return (time.perf_counter() - started) * 1000 / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base_ms = base_cpu_ms = 0.0
        for size, roster in ROSTERS.items():
            journal = Path(tmp) / f"h{size}.sqlite"
            summary, cpu_s = run(journal, roster, args.tasks)
            episode_ms = summary["avg_latency_s"] * 1000
            cpu_ms = cpu_s * 1000 / summary["episodes"]
            decisions = decisions_per_episode(journal)
            if size == 0:
                base_ms, base_cpu_ms = episode_ms, cpu_ms
            sim_ms = sim_helper_ms(roster) if size else 0.0
            overhead = (episode_ms - base_ms) / decisions - sim_ms if size else 0.0
            cpu_overhead = (cpu_ms - base_cpu_ms) / decisions - sim_ms if size else 0.0
            rows.append({"helpers": size, "roster": roster, "episode_ms": episode_ms, "decisions": decisions,
                         "sim_model_ms_per_decision": sim_ms, "overhead_ms_per_decision": overhead,
                         "cpu_ms_per_episode": cpu_ms, "cpu_overhead_ms_per_decision": cpu_overhead})  # fmt: skip
    table = Table(title=f"helper overhead per decision, sim model, {args.tasks} retail tasks one at a time")
    columns = ("helpers", "roster", "episode ms", "decisions/episode", "sim model ms", "runtime ms/decision",
               "CPU ms/episode", "runtime CPU ms/decision")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        helped = bool(row["helpers"])
        table.add_row(
            str(row["helpers"]), row["roster"], f"{row['episode_ms']:.0f}", f"{row['decisions']:.1f}",
            f"{row['sim_model_ms_per_decision']:.2f}", f"{row['overhead_ms_per_decision']:.2f}" if helped else "-",
            f"{row['cpu_ms_per_episode']:.0f}", f"{row['cpu_overhead_ms_per_decision']:.2f}" if helped else "-",
        )  # fmt: skip
    console = Console()
    console.print(table)
    six, six_cpu = rows[-1]["overhead_ms_per_decision"], rows[-1]["cpu_overhead_ms_per_decision"]
    console.print(
        f"6 helpers: {six:.2f} ms per decision, {six_cpu:.2f} ms of CPU (target < {TARGET_MS:g} ms);"
        " sim numbers measure the runtime only"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
