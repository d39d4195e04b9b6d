"""FAMA's categories on failures of a known cause: trajectory analysts (the paper's mode) against informed ones.

A sim campaign of the retail tasks with no simulated mistakes, so every episode succeeds. Then
each wrong action of the held-out family (`bench/heldout_mistakes.py`: written apart from the
simulator's mistake lists and from `faultline.replay.categorize`, each built as one FAMA category)
is put into its task's first episode: a fork at the tool agent's first decision towards the
ground-truth step the wrong action replaces, whose model call the runtime answers with the wrong
action (as oracle-guided repair answers with the gold one); the rest runs live, still with no
simulated mistakes. Every fork that fails becomes a case in each mode and goes through the
controller (the four analysts, the orchestrator) with the sim judge. The label is the category
the injected action was built as, known from what was injected: neither the simulator's own
labels nor anything the analysts are shown. The scorer compares it with the orchestrator's main
errors: "first" when the first main error is the label, "among" when the label is one of them.
The confusion matrix pairs the label with the first main error.

The sim model and the sim judge are simulations: these numbers measure the mechanism (what each
mode shows the analysts, how the stages combine), never a model. The trajectory-mode stand-in
reads only the turns, by fixed rules; the informed one also reads evidence lined up with the
ground truth.

    python -m bench.fama_categories [--seed 11] [--tasks 65] [--json out.json]
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

from bench.attribution_accuracy import commit
from bench.heldout_mistakes import Mistake, mistakes
from faultline.api import SIM_NOTE
from faultline.cli import main as cli
from faultline.envs import ERROR_CATEGORIES, load_domain
from faultline.journal import JournalReader
from faultline.replay import Answer, Keep, fork_episode, gold_action, steps, wilson
from faultline.runtime import Config, FamaConfig, agent_lookup, make_backend
from faultline.runtime.models import SimBackend
from faultline.services.fama import analyze_cases, failure_cases

MODES: tuple[Literal["trajectory", "informed"], ...] = ("trajectory", "informed")
NONE = "none"
TOOL_AGENT = "tool"
INJECTED = "heldout"
"""The model the injected answers name: the benchmark, not a model, chose them."""


async def inject(journal: Path, forks: Path, family: list[Mistake]) -> dict[str, str]:
    """Each failed fork with a held-out wrong action put in (see the module docstring), and the category that
    action was built as."""
    config = Config()
    lookup, domain = agent_lookup(config), load_domain("retail")
    tools = [spec.name for spec in domain.tools()]
    with JournalReader(journal) as reader:
        first = {s.task: s.episode for s in reader.episodes() if s.outcome == "success" and s.trial == 0}
        rows = {task: list(reader.episode_rows(episode)) for task, episode in first.items()}
    labels: dict[str, str] = {}
    for n, wrong in enumerate(family):
        if wrong.task not in rows:
            continue
        task, history = domain.task(wrong.task), rows[wrong.task]
        at = next(
            (
                s
                for s in steps(history, lookup)
                if s.agent == TOOL_AGENT
                and s.model_call is not None
                and gold_action(history, s, task, tools, {TOOL_AGENT}) == wrong.right
            ),
            None,
        )
        if at is None:
            continue
        answer = Answer.acting(TOOL_AGENT, wrong.wrong, model=INJECTED, call_id=f"{INJECTED}-{n}")
        result = await fork_episode(
            journal,
            first[wrong.task],
            at.input_pos,
            Keep(),
            lookup=lookup,
            backends=lambda role: make_backend(config, role),
            out=forks,
            answer=answer,
        )
        if result.outcome.outcome != "success":
            labels[result.episode] = wrong.category
    return labels


def analysed(forks: Path, mode: Literal["trajectory", "informed"]) -> dict[str, list[str]]:
    """Each failure's main errors as the controller found them in `mode`."""
    cases = failure_cases(forks, analysts=mode)
    result = anyio.run(analyze_cases, cases, SimBackend(), FamaConfig(analysts=mode))
    return {c.episode: list(c.analysis.main.main) if c.analysis else [] for c in result.cases}


def rate(k: int, n: int) -> dict[str, Any]:
    low, high = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else 0.0, "low": low, "high": high}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--tasks", type=int, default=65, help="retail tasks (default 65: every one)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    domain = load_domain("retail")
    family = mistakes(domain, domain.tasks()[: args.tasks])
    with tempfile.TemporaryDirectory() as tmp:
        journal, forks = Path(tmp) / "campaign.sqlite", Path(tmp) / "forks.sqlite"
        command = ["run", "--tasks", str(args.tasks), "--seed", str(args.seed), "--error-rates", "0"]
        assert cli([*command, "--journal", str(journal), "--json"]) == 0
        labels = anyio.run(inject, journal, forks, family)
        mains = {mode: analysed(forks, mode) for mode in MODES}
    result: dict[str, Any] = {
        "commit": commit(),
        "seed": args.seed,
        "tasks": args.tasks,
        "injected": len(family),
        "failed": len(labels),
        "note": SIM_NOTE,
    }
    console = Console()
    for mode in MODES:
        got = [(truth, mains[mode].get(episode, [])) for episode, truth in labels.items()]
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
    console.print(f"{len(labels)} of {len(family)} injected wrong actions failed their episode")
    console.print("sim model and sim judge: these numbers measure the mechanism, not a model")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
