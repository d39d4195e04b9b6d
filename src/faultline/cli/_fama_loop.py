"""`faultline fama loop`: the FAMA paper's Algorithm 1 end to end on a local system.

Round 0 runs the tasks with no helpers. After each round the controller's stages analyse its
failures, and the helpers recommended for at least `[fama] share` of them join the roster the
next round runs with (a helper once chosen stays). Each round is a real `faultline run` in its own
process with its own journal (`OUT/round-R.sqlite`), so every round replays on its own. The table
sets the rounds side by side with the baseline, as the paper's Table 2: pass^1..pass^k, model
tokens per episode and latency, each with its overhead over round 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.console import Console
from rich.table import Table

from faultline._errors import RunError, UsageError
from faultline.cli import _jsonl
from faultline.cli._fama_counts import SIM_JUDGE_NOTE, add_analysts_flag, category_counts, with_fama_flags
from faultline.cli._plots import count_axis, png
from faultline.cli._run import add_model_flags, effective_config, serving_local_model, whole_number
from faultline.core import parse_roster
from faultline.journal import JournalReader
from faultline.runtime import Config, make_backend
from faultline.services.fama import CATEGORIES, SHORT, analyze_cases, attribute_cases, choose_roster, failure_cases


class Round(msgspec.Struct, frozen=True, kw_only=True):
    """One round: the roster it ran with, how it did, what it cost, and what its failures were."""

    round: int
    roster: list[str]
    journal: str
    episodes: int
    pass_k: dict[int, float]
    tokens: float
    """Model tokens per episode, every agent's (helpers included)."""
    latency_s: float
    failures: int
    analysed: int
    categories: dict[str, int]
    chosen: list[str]
    """The roster the next round takes."""
    token_overhead: float = 0.0
    latency_overhead: float = 0.0


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "loop",
        help="Algorithm 1: a baseline run, analysis of its failures, a roster, a re-run with it, for R rounds",
        description="Run the tasks with no helpers, analyse the failures, run again with the helpers the analysis"
        " chose, and so on; print pass^k, tokens and latency per round against the baseline. With --model sim the"
        " runs and the judge are simulations: their numbers measure the mechanism, not a model.",
    )
    p.add_argument("--domain", default="retail", help="domain of the runs (default retail)")
    p.add_argument("--tasks", type=whole_number(1), default=10, metavar="N", help="the first N tasks (default 10)")
    p.add_argument("--trials", type=whole_number(1), default=1, metavar="K", help="runs per task (default 1)")
    p.add_argument(
        "--rounds", type=whole_number(1), default=2, metavar="R", help="rounds after the baseline (default 2)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--error-rates", default=None, metavar="P", help="sim: every category's mistake rate (as for run)")
    p.add_argument("--error-rate", action="append", default=[], metavar="CATEGORY=P", help="sim: one category's rate")
    p.add_argument("--out", type=Path, default=Path("runs/fama-loop"), help="folder of the rounds' journals")
    p.add_argument("--json", action="store_true", help="JSON lines: one per round, then a summary")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="pass^k per round and main-error counts per round")
    add_analysts_flag(p)
    add_model_flags(p)
    p.set_defaults(handler=_loop)


@serving_local_model
def _loop(args: argparse.Namespace) -> int:
    config = with_fama_flags(effective_config(args), analysts=args.analysts)
    args.out.mkdir(parents=True, exist_ok=True)
    taken = sorted(p.name for p in args.out.glob("round-*.sqlite"))
    if taken:
        raise UsageError(f"fama loop: {args.out} already holds {', '.join(taken)}; choose another --out")
    console = Console(stderr=True)
    rounds: list[Round] = []
    roster: list[str] = []
    for number in range(args.rounds + 1):
        journal = args.out / f"round-{number}.sqlite"
        console.print(f"round {number}: running with helpers {','.join(roster) or 'none'}", highlight=False)
        summary = _run_round(args, number, roster, journal)
        done = anyio.run(_analyse_round, config, journal, roster)
        rounds.append(_round(number, roster, journal, summary, *done, baseline=rounds[0] if rounds else None))
        roster = rounds[-1].chosen
    if args.plot:
        _plot(args.plot, rounds)
    if args.json:
        _jsonl.rows("round", rounds)
        last = rounds[-1]
        summary_line = {
            "rounds": len(rounds),
            "roster": last.roster,
            "next_roster": last.chosen,
            "baseline_pass_1": rounds[0].pass_k.get(1, 0.0),
            "final_pass_1": last.pass_k.get(1, 0.0),
            "token_overhead": last.token_overhead,
            "latency_overhead": last.latency_overhead,
            "analysts": config.fama.analysts,
        }
        _jsonl.summary(summary_line)
        return 0
    Console().print(_table(rounds, args.trials, config.fama.analysts))
    if config.model(config.fama.role).backend == "sim":
        Console().print(f"[dim]{SIM_JUDGE_NOTE}; sim runs exercise the runtime, they are no result about models[/dim]")
    return 0


def _run_round(args: argparse.Namespace, number: int, roster: list[str], journal: Path) -> dict[str, Any]:
    """One `faultline run` in a process of its own; its JSON summary."""
    command = [sys.executable, "-m", "faultline.cli", "run", "--domain", args.domain, "--tasks", str(args.tasks)]
    command += ["--trials", str(args.trials), "--seed", str(args.seed), "--journal", str(journal), "--json"]
    command += ["--run-id", f"round{number}", "--helpers", ",".join(roster) or "none"]
    if args.error_rates is not None:
        command += ["--error-rates", args.error_rates]
    for item in args.error_rate:
        command += ["--error-rate", item]
    for flag, value in (("--model", args.model), ("--base-url", args.base_url), ("--model-name", args.model_name)):
        if value:
            command += [flag, value]
    for item in args.model_setting:
        command += ["--model-setting", item]
    if args.config:
        command += ["--config", str(args.config)]
    for folder in args.plugin_path:
        command += ["--plugin-path", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RunError(f"round {number}: faultline run failed: {done.stderr.strip().splitlines()[-1:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


async def _analyse_round(
    config: Config, journal: Path, roster: list[str]
) -> tuple[int, int, dict[str, int], list[str]]:
    """Failures, analysed failures, main-error counts, and the roster for the next round."""
    cases = await attribute_cases(journal, failure_cases(journal, analysts=config.fama.analysts), config)
    backend = make_backend(config, config.fama.role)
    try:
        result = await analyze_cases(cases, backend, config.fama)
    finally:
        await backend.aclose()
    recommended = [c.analysis.mitigation.helpers for c in result.cases if c.analysis is not None]
    chosen = parse_roster(list(dict.fromkeys([*roster, *choose_roster(recommended, config.fama)])))
    return len(cases), len(recommended), category_counts(result.cases), chosen


def _round(
    number: int,
    roster: list[str],
    journal: Path,
    summary: dict[str, Any],
    failures: int,
    analysed: int,
    categories: dict[str, int],
    chosen: list[str],
    *,
    baseline: Round | None,
) -> Round:
    episodes = int(summary["episodes"])
    with JournalReader(journal) as reader:
        costs = reader.agent_costs(f"round{number}-")
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in costs) / max(episodes, 1)
    latency = float(summary["avg_latency_s"])
    overheads = {}
    if baseline is not None:
        overheads = {
            "token_overhead": tokens / baseline.tokens - 1 if baseline.tokens else 0.0,
            "latency_overhead": latency / baseline.latency_s - 1 if baseline.latency_s else 0.0,
        }
    return Round(
        round=number,
        roster=roster,
        journal=str(journal),
        episodes=episodes,
        pass_k={int(k): float(v) for k, v in summary["pass_k"].items()},
        tokens=tokens,
        latency_s=latency,
        failures=failures,
        analysed=analysed,
        categories=categories,
        chosen=chosen,
        **overheads,
    )


def _table(rounds: list[Round], trials: int, analysts: str) -> Table:
    table = Table(title=f"FAMA loop: each round against the baseline (round 0, no helpers); {analysts} analysts")
    table.add_column("round", justify="right")
    table.add_column("helpers")
    for k in range(1, trials + 1):
        table.add_column(f"pass^{k}", justify="right")
    table.add_column("tokens/ep", justify="right")
    table.add_column("latency s", justify="right")
    for cat in CATEGORIES:
        table.add_column(SHORT[cat.id], justify="right")
    table.add_column("next roster")
    for r in rounds:
        over = "" if r.round == 0 else f" ({r.token_overhead:+.0%})"
        slower = "" if r.round == 0 else f" ({r.latency_overhead:+.0%})"
        table.add_row(
            str(r.round),
            ",".join(r.roster) or "none",
            *[f"{r.pass_k.get(k, 0.0):.3f}" for k in range(1, trials + 1)],
            f"{r.tokens:.0f}{over}",
            f"{r.latency_s:.2f}{slower}",
            *[str(r.categories.get(c.id, 0)) for c in CATEGORIES],
            ",".join(r.chosen) or "none",
        )
    return table


def _plot(path: Path, rounds: list[Round]) -> None:
    with png(path, width=11.0) as figure:
        left, right = figure.subplots(1, 2)
        for r in rounds:
            ks = sorted(r.pass_k)
            left.plot(
                ks, [r.pass_k[k] for k in ks], marker="o", label=f"round {r.round}: {','.join(r.roster) or 'none'}"
            )
        most_k = max((max(r.pass_k, default=1) for r in rounds), default=1)
        left.set_xticks(range(1, most_k + 1))  # k is a whole number, one trial or many
        left.set_xlim(0.5, most_k + 0.5)
        left.set_xlabel("k")
        left.set_ylabel("pass^k")
        left.set_ylim(0, 1.05)
        left.legend(fontsize=7)
        width = 0.8 / len(rounds)
        for i, r in enumerate(rounds):
            xs = [j + i * width for j in range(len(CATEGORIES))]
            right.bar(xs, [r.categories.get(c.id, 0) for c in CATEGORIES], width=width, label=f"round {r.round}")
        right.set_xticks([j + width * (len(rounds) - 1) / 2 for j in range(len(CATEGORIES))])
        right.set_xticklabels([SHORT[c.id] for c in CATEGORIES])
        right.set_ylabel("failures (main error)")
        count_axis(right, max((n for r in rounds for n in r.categories.values()), default=0))
        right.legend(fontsize=7)
