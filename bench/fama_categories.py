"""FAMA's categories on organic failures: trajectory analysts (the paper's mode) against informed ones.

Sim campaigns, one per seed, in which the simulator makes its own mistakes at `--rate` per
category and decision; every failure becomes a case in each mode and goes through the controller
(the four analysts, the orchestrator) with the sim judge. Only then does the scorer read the
label, the category of the episode's first simulated mistake, and compare it with the
orchestrator's main errors: "first" when the first main error is the label, "among" when the
label is one of them. The confusion matrix pairs the label with the first main error.

The sim model and the sim judge are simulations: these numbers measure the mechanism (what each
mode shows the analysts, how the stages combine), never a model. The trajectory-mode stand-in
reads only the turns, by fixed rules; the informed one also reads evidence lined up with the
ground truth.

    python -m bench.fama_categories [--seeds 11,12,13] [--tasks 65] [--trials 2] [--rate 0.05] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import anyio
from rich.console import Console
from rich.table import Table

from bench.attribution_accuracy import commit, label
from faultline.cli import main as cli
from faultline.envs import ERROR_CATEGORIES
from faultline.journal import JournalReader
from faultline.replay import steps, wilson
from faultline.runtime import Config, FamaConfig, agent_lookup
from faultline.runtime.models import SimBackend
from faultline.services.fama import analyze_cases, failure_cases

MODES: tuple[Literal["trajectory", "informed"], ...] = ("trajectory", "informed")
NONE = "none"


def labels(journal: Path) -> dict[str, str]:
    """Each failure's label: its first simulated mistake's category (read after the analysis)."""
    lookup = agent_lookup(Config())
    found = {}
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome in (None, "success"):
                continue
            rows = list(reader.episode_rows(summary.episode))
            truth = label(rows, steps(rows, lookup), summary.domain)
            if truth is not None and truth.cause.startswith("mistake: "):
                found[summary.episode] = truth.cause.removeprefix("mistake: ")
    return found


def analysed(journal: Path, mode: Literal["trajectory", "informed"]) -> dict[str, list[str]]:
    """Each failure's main errors as the controller found them in `mode`."""
    cases = failure_cases(journal, analysts=mode)
    result = anyio.run(analyze_cases, cases, SimBackend(), FamaConfig(analysts=mode))
    return {c.episode: list(c.analysis.main.main) if c.analysis else [] for c in result.cases}


def rate(k: int, n: int) -> dict[str, Any]:
    low, high = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else 0.0, "low": low, "high": high}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[11, 12, 13])
    parser.add_argument("--tasks", type=int, default=65)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.05, help="simulated mistake rate per category")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pairs: dict[str, list[tuple[str, list[str]]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            journal = Path(tmp) / f"campaign-{seed}.sqlite"
            command = ["run", "--tasks", str(args.tasks), "--trials", str(args.trials), "--seed", str(seed)]
            assert cli([*command, "--error-rates", str(args.rate), "--journal", str(journal), "--json"]) == 0
            mains = {mode: analysed(journal, mode) for mode in MODES}
            for episode, truth in labels(journal).items():
                for mode in MODES:
                    pairs[mode].append((truth, mains[mode].get(episode, [])))
    result: dict[str, Any] = {"commit": commit(), "seeds": args.seeds, "campaign": vars(args) | {"json": None}}
    console = Console()
    for mode in MODES:
        got = pairs[mode]
        first = sum(1 for truth, main in got if main[:1] == [truth])
        among = sum(1 for truth, main in got if truth in main)
        confusion = Counter((truth, (main or [NONE])[0]) for truth, main in got)
        per = {
            c: rate(confusion[(c, c)], sum(v for (t, _), v in confusion.items() if t == c)) for c in ERROR_CATEGORIES
        }
        result[mode] = {
            "first": rate(first, len(got)),
            "among": rate(among, len(got)),
            "per_category": per,
            "confusion": {f"{t} -> {m}": v for (t, m), v in sorted(confusion.items())},
        }
        table = Table(title=f"{mode} analysts: label (rows) against the first main error (columns), n {len(got)}")
        table.add_column("label")
        columns = [*ERROR_CATEGORIES, NONE]
        for column in columns:
            table.add_column(column.replace("_", " "), justify="right")
        table.add_column("agreement", justify="right")
        for truth in ERROR_CATEGORIES:
            cell = per[truth]
            table.add_row(
                truth.replace("_", " "),
                *(str(confusion[(truth, c)]) for c in columns),
                f"{cell['rate']:.0%} [{cell['low']:.0%}, {cell['high']:.0%}] of {cell['n']}",
            )
        console.print(table)
        for name in ("first", "among"):
            cell = result[mode][name]
            console.print(f"  {name}: {cell['rate']:.0%} [{cell['low']:.0%}, {cell['high']:.0%}] of {cell['n']}")
    console.print("sim model and sim judge: these numbers measure the mechanism, not a model")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
