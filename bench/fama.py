"""The FAMA controller's cost per analysed failure, and `fama loop` on sim against all six helpers.

1. Controller cost. A sim run with every category at the given rate gives failures; each is
   turned into a case (`failure_case`, reading the journal) and analysed by the controller agent
   in-process with the sim judge. Runtime ms per failure = (wall time - time inside the judge's
   `complete`) / failures; model calls per failure are counted from the controller's recordings.
2. The loop. `faultline fama loop` with every category at the rate: pass^1 per round with its
   roster; then the same tasks with all six helpers, and each roster's overhead over the baseline
   (model tokens per episode, every agent's, and episode latency). FAMA's claim is that the
   targeted subset costs less than all helpers.

The analysts read the trajectory alone, as in the FAMA paper, unless `--analysts informed` gives
them the task's ground truth too. The sim model and the sim judge are simulations: these numbers
measure the mechanism (its cost, its wiring), never a model or a result about helpers.

    python -m bench.fama [--tasks N] [--trials K] [--rounds R] [--rate P] [--analysts MODE] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import anyio
from rich.console import Console
from rich.table import Table

from faultline.api import SIM_NOTE
from faultline.core import LlmRequest, LlmResponse
from faultline.journal import JournalReader
from faultline.runtime import FamaConfig
from faultline.runtime.models import SimBackend
from faultline.services.fama import analyze_cases, failure_cases

ALL_HELPERS = "dce,tsa,tor,planner,memory:6,verifier"


class TimedSim(SimBackend):
    """The sim judge, with the seconds spent inside it added up."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        started = time.perf_counter()
        try:
            return await super().complete(request)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


def faultline(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "faultline.cli", *args], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def controller_cost(journal: Path, analysts: Literal["trajectory", "informed"]) -> dict[str, float]:
    started = time.perf_counter()
    cases = failure_cases(journal, analysts=analysts)
    built = time.perf_counter() - started
    judge = TimedSim()

    async def go() -> int:
        result = await analyze_cases(cases, judge, FamaConfig(analysts=analysts))
        return sum(1 for c in result.cases if c.analysis is not None)

    analysed = anyio.run(go)
    total = time.perf_counter() - started
    n = max(len(cases), 1)
    return {
        "failures": len(cases),
        "analysed": analysed,
        "case_ms": built / n * 1000,
        "runtime_ms": (total - judge.seconds) / n * 1000,
        "judge_ms": judge.seconds / n * 1000,
        "model_calls": judge.calls / n,
    }


def tokens_per_episode(journal: str, run: str) -> float:
    with JournalReader(journal) as reader:
        episodes = reader.of_run(run)
        costs = reader.agent_costs(episodes=episodes)
    return sum(c.prompt_tokens + c.completion_tokens for c in costs) / max(len(episodes), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.1, help="every category's sim mistake rate")
    parser.add_argument(
        "--analysts",
        choices=("trajectory", "informed"),
        default="trajectory",
        help="what the analysts read: the trajectory (the FAMA paper's mode, default) or also the ground truth",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        common = ["--tasks", str(args.tasks), "--trials", str(args.trials), "--error-rates", str(args.rate)]
        loop = ["fama", "loop", *common, "--rounds", str(args.rounds), "--analysts", args.analysts]
        rows = faultline(*loop, "--out", str(out / "loop"), "--json")
        rounds = [r for r in rows if r["type"] == "round"]
        cost = controller_cost(Path(rounds[0]["journal"]), args.analysts)
        all_journal = out / "all.sqlite"
        [everything] = faultline(
            "run", *common, "--helpers", ALL_HELPERS, "--run-id", "all", "--journal", str(all_journal), "--json"
        )
        base = rounds[0]
        all_row = {
            "roster": ALL_HELPERS.split(","),
            "pass_1": everything["pass_k"]["1"],
            "tokens": tokens_per_episode(str(all_journal), "all"),
            "latency_s": everything["avg_latency_s"],
        }
        all_row["token_overhead"] = all_row["tokens"] / base["tokens"] - 1
        all_row["latency_overhead"] = all_row["latency_s"] / base["latency_s"] - 1
    table = Table(
        title=f"fama loop, sim, every category at {args.rate:g} ({args.tasks} tasks x {args.trials}),"
        f" {args.analysts} analysts"
    )
    for column in (
        "round",
        "roster",
        "pass^1",
        "tokens/ep",
        "token overhead",
        "latency s",
        "latency overhead",
        "failures",
    ):
        table.add_column(column)
    for r in rounds:
        table.add_row(
            str(r["round"]),
            ",".join(r["roster"]) or "none",
            f"{r['pass_k']['1']:.3f}",
            f"{r['tokens']:.0f}",
            f"{r['token_overhead']:+.0%}",
            f"{r['latency_s']:.2f}",
            f"{r['latency_overhead']:+.0%}",
            str(r["failures"]),
        )
    table.add_row(
        "all six",
        "all",
        f"{all_row['pass_1']:.3f}",
        f"{all_row['tokens']:.0f}",
        f"{all_row['token_overhead']:+.0%}",
        f"{all_row['latency_s']:.2f}",
        f"{all_row['latency_overhead']:+.0%}",
        "",
    )
    console.print(table)
    console.print(
        f"controller: {cost['runtime_ms']:.1f} ms runtime per analysed failure (judge time excluded:"
        f" {cost['judge_ms']:.1f} ms), {cost['model_calls']:.1f} model calls; case building {cost['case_ms']:.1f} ms;"
        f" {cost['analysed']}/{cost['failures']} failures analysed"
    )
    console.print("[dim]sim model and sim judge: these numbers measure the mechanism, not a model[/dim]")
    if args.json:
        report = {"analysts": args.analysts, "rounds": rounds, "all_helpers": all_row, "controller": cost}
        report["note"] = f"{SIM_NOTE}; the sim judge is a stand-in that measures the mechanism, not a model"
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
