"""Attribution accuracy on sim episodes whose mistakes are known.

Runs a sim campaign with mistakes (a real `faultline run`), then attributes every
failed episode and checks the answer against the simulator's own record of
which decision it got wrong. Reported separately for episodes with exactly one
mistake (target: 100% at agent and step level) and with several.

    python bench/attribution_accuracy.py [--episodes 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anyio
from rich.console import Console
from rich.table import Table

from faultline.cli import main as cli
from faultline.journal import JournalReader
from faultline.replay import attribute, decisions
from faultline.runtime import Config, agent_lookup, make_backend
from faultline.runtime.models import SimBackend


def campaign(journal: Path, trials: int, rate: float) -> None:
    args = ["run", "--tasks", "1000", "--trials", str(trials), "--error-rates", str(rate), "--seed", "11"]
    assert cli([*args, "--journal", str(journal), "--json", "--concurrency", "16"]) == 0


def mistakes_of(rows: list) -> list[str]:  # type: ignore[type-arg]
    return sorted({json.dumps(d.mistake, sort_keys=True) for d in decisions(rows, "tool") if d.mistake})


async def evaluate(journal: Path, scratch: Path, want: int) -> dict[str, dict[str, float]]:
    config = Config()
    lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
    groups: dict[str, list[tuple[bool, bool, bool, int]]] = {"one mistake": [], "several mistakes": []}
    with JournalReader(journal) as reader:
        failed = [
            (s.episode, list(reader.episode_rows(s.episode))) for s in reader.episodes() if s.outcome == "failure"
        ]
    for episode, rows in failed:
        known = mistakes_of(rows)
        if not known:
            continue
        group = "one mistake" if len(known) == 1 else "several mistakes"
        if group == "one mistake" and len(groups[group]) >= want:
            continue
        result = await attribute(
            journal, episode, lookup=lookup, backends=backends, agent="tool", repair=SimBackend(), scratch=scratch
        )
        carrying = [d.index for d in decisions(rows, "tool") if d.mistake]
        step_ok = result.decision in carrying
        made = decisions(rows, "tool")[result.decision - 1] if result.decision else None
        category_ok = bool(made and made.mistake and made.mistake.get("category") == result.category)
        groups[group].append(
            (result.agent == "tool" and result.decision is not None, step_ok, category_ok, result.forks)
        )
    summary = {}
    for group, items in groups.items():
        n = len(items) or 1
        summary[group] = {
            "episodes": len(items),
            "agent_accuracy": sum(a for a, _, _, _ in items) / n,
            "step_accuracy": sum(s for _, s, _, _ in items) / n,
            "category_accuracy": sum(c for _, _, c, _ in items) / n,
            "avg_forks": sum(f for *_, f in items) / n,
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50, help="single-mistake episodes to attribute (default 50)")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--rate", type=float, default=0.06)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        journal, scratch = Path(tmp) / "campaign.sqlite", Path(tmp) / "forks.sqlite"
        started = time.perf_counter()
        campaign(journal, args.trials, args.rate)
        run_s = time.perf_counter() - started
        started = time.perf_counter()
        summary = anyio.run(evaluate, journal, scratch, args.episodes)
        attribute_s = time.perf_counter() - started
    table = Table(title=f"attribution on sim episodes (campaign {run_s:.0f}s, attribution {attribute_s:.0f}s)")
    for column in ("episodes", "n", "agent-level", "step-level", "category", "forks/episode"):
        table.add_column(column)
    for group, s in summary.items():
        table.add_row(
            group,
            str(s["episodes"]),
            f"{s['agent_accuracy']:.1%}",
            f"{s['step_accuracy']:.1%}",
            f"{s['category_accuracy']:.1%}",
            f"{s['avg_forks']:.1f}",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
