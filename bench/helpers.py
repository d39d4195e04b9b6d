"""The runtime's cost of a context round: ms per decision that helpers add, with the sim model.

Each roster runs the same retail tasks one episode at a time (so latency is not
queueing): no helpers, then 1 (dce), 3 (dce, tsa, memory:6) and all 6. The sim
answers in microseconds, so what a roster adds to an episode is the runtime's
work: the requests to each helper (from protocol 4, to the helpers whose last
answer the conversation can have changed), their replies, the timer, the tool
agent handling each reply, the journal. Per decision = (episode latency with the
roster - without) / the tool agent's decisions per episode, less the model
time: every answer the sim computes in those episodes (the tool agent's, whose
prompt grows with its helpers' notes, and the helpers') is timed in the
in-process run below, on the same tasks, and the difference subtracted, so the
number excludes model time. The same difference is taken in CPU time,
which a busy shared machine disturbs far less than latency: the same tasks run
again with every agent (env, tool, user, helpers) in one worker in this process
against a nats-server of its own, after one warm-up episode, and the CPU time
of this process and of nats-server is counted (the journal service is not
running there). These numbers measure the
runtime's mechanism with a simulator; they say nothing about any model.

Every roster runs once per round, in an order that turns each round, and each
round's rosters are set against that round's run without helpers: the medians
over rounds are reported, with each round's latency figure beside them, so a
machine whose speed drifts during the run moves them all alike.

Target: under 10 ms per decision with 6 helpers.

    python -m bench.helpers [--tasks N] [--rounds R] [--json out.json]
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

import anyio
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, machine
from faultline.agents import EnvironmentHost, ToolAgent, UserSimulator
from faultline.agents.helpers import HELPER_CLASSES
from faultline.api import SIM_NOTE, RunPlan, RunResult, plan_episodes, run_plan
from faultline.bus import Bus, EmbeddedServer
from faultline.core import Agent, LlmRequest, LlmResponse
from faultline.envs import load_domain
from faultline.journal import JournalReader
from faultline.runtime import Worker
from faultline.runtime.models import SimBackend

TARGET_MS = 10.0
ROSTERS = {0: "none", 1: "dce", 3: "dce,tsa,memory:6", 6: "dce,tsa,tor,planner,memory:6,verifier"}


def run(journal: Path, roster: str, tasks: int) -> dict:  # type: ignore[type-arg]
    args = [sys.executable, "-m", "faultline.cli", "run", "--tasks", str(tasks), "--concurrency", "1"]
    args += ["--helpers", roster, "--journal", str(journal), "--json"]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)  # type: ignore[no-any-return]


class TimedSim(SimBackend):
    """The sim, counting the CPU time it spends computing answers: the model time of a run."""

    spent_s = 0.0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        started = time.thread_time()
        try:
            return self.respond(request)
        finally:
            TimedSim.spent_s += time.thread_time() - started


def cpu_ms_per_episode(roster: str, tasks: int, store: Path) -> tuple[float, float]:
    """CPU ms per episode of this process (every agent in one worker) and its nats-server, and the ms
    of it the sim spent computing answers (model time), with the sim model."""
    helpers = [] if roster == "none" else roster.split(",")
    domain = load_domain("retail")

    async def measure() -> tuple[float, float]:
        with EmbeddedServer(store_dir=store) as server:
            assert server.pid is not None
            bus = await Bus.connect(server.url)
            await bus.ensure_stream()
            agents: list[type[Agent]] = [EnvironmentHost, ToolAgent, UserSimulator, *HELPER_CLASSES]
            worker = Worker(bus, agents, backends=lambda role: TimedSim())
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await worker.wait_ready()
                for run_id, count in (("warm", 1), ("cpu", tasks)):
                    plan = RunPlan(tasks=count, concurrency=1, helpers=helpers, run_id=run_id)
                    result = RunResult(plan_episodes(plan, domain))
                    cpu, server_cpu, TimedSim.spent_s = time.process_time(), cpu_seconds(server.pid), 0.0
                    await run_plan(bus, plan, result, lambda *_: None)
                    used = time.process_time() - cpu + cpu_seconds(server.pid) - server_cpu
                worker.stop()
            await bus.close()
            return used * 1000 / len(result.completed), TimedSim.spent_s * 1000 / len(result.completed)

    return anyio.run(measure)


def decisions_per_episode(journal: Path) -> float:
    """The tool agent's model calls per episode (its decisions, revisions included)."""
    with JournalReader(journal) as reader:
        episodes = {s.episode for s in reader.episodes()}
        calls = sum(1 for r in reader.rows() if r.kind == "recording" and r.sender == "tool" and b"llm" in r.body[:40])
    return calls / max(len(episodes), 1)


def measure_round(tmp: Path, round_: int, tasks: int) -> dict[int, dict[str, float]]:
    """One episode latency, CPU time and decision count per roster, the rosters in an order that turns
    with `round_` (so none always runs first, on a machine that warms up or slows down)."""
    sizes = list(ROSTERS)
    turn = round_ % len(sizes)
    found: dict[int, dict[str, float]] = {}
    for size in sizes[turn:] + sizes[:turn]:
        roster = ROSTERS[size]
        journal = tmp / f"h{size}-{round_}.sqlite"
        summary = run(journal, roster, tasks)
        cpu_ms, model_ms = cpu_ms_per_episode(roster, tasks, tmp / f"nats{size}-{round_}")
        found[size] = {
            "episode_ms": summary["avg_latency_s"] * 1000,
            "cpu_ms": cpu_ms,
            "model_ms": model_ms,
            "decisions": decisions_per_episode(journal),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every roster; medians are reported")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            rounds.append(measure_round(Path(tmp), round_, args.tasks))
    rows: list[dict[str, Any]] = []
    for size, roster in ROSTERS.items():

        def per_decision(key: str, size: int = size) -> list[float]:
            """The roster's cost per decision over the no-helper run of the same round, model time left out."""
            return [(r[size][key] - r[0][key] - (r[size]["model_ms"] - r[0]["model_ms"])) / r[size]["decisions"]
                    for r in rounds]  # fmt: skip

        overhead, cpu_overhead = per_decision("episode_ms"), per_decision("cpu_ms")
        rows.append({"helpers": size, "roster": roster,
                     "episode_ms": statistics.median(r[size]["episode_ms"] for r in rounds),
                     "decisions": statistics.median(r[size]["decisions"] for r in rounds),
                     "sim_model_ms_per_decision": statistics.median(
                         (r[size]["model_ms"] - r[0]["model_ms"]) / r[size]["decisions"] for r in rounds),
                     "overhead_ms_per_decision": statistics.median(overhead), "overhead_each_round": overhead,
                     "cpu_ms_per_episode": statistics.median(r[size]["cpu_ms"] for r in rounds),
                     "cpu_overhead_ms_per_decision": statistics.median(cpu_overhead),
                     "cpu_overhead_each_round": cpu_overhead})  # fmt: skip
    table = Table(
        title=f"helper overhead per decision, sim model, {args.tasks} retail tasks one at a time,"
        f" median of {args.rounds} rounds"
    )
    columns = ("helpers", "roster", "episode ms", "decisions/episode", "sim model ms added", "runtime ms/decision",
               "each round", "CPU ms/episode", "runtime CPU ms/decision")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        helped = bool(row["helpers"])
        table.add_row(
            str(row["helpers"]), row["roster"], f"{row['episode_ms']:.0f}", f"{row['decisions']:.1f}",
            f"{row['sim_model_ms_per_decision']:.2f}", f"{row['overhead_ms_per_decision']:.2f}" if helped else "-",
            " ".join(f"{x:.1f}" for x in row["overhead_each_round"]) if helped else "-",
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
        args.json.write_text(
            json.dumps({"machine": machine(), "rounds": args.rounds, "rows": rows, "note": SIM_NOTE}, indent=2)
        )


if __name__ == "__main__":
    main()
