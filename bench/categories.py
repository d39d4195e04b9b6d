"""How often `faultline.replay.categorize` names the category a held-out retail mistake was built as.

The mistakes are `bench/heldout_mistakes.py`'s: written apart from the simulator's own mistake
lists, which are not the evaluation set (a categorizer agrees with those by construction). Each
one is categorized against the ground-truth action it took the place of; the table is the
confusion matrix (rows: built as, columns: named), then the agreement per category with its
Wilson 95% interval and n, and overall. No model and no episode: a pure function over the store.

    python -m bench.categories [--tasks N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._common import machine
from bench.heldout_mistakes import Mistake, mistakes
from faultline.envs import ERROR_CATEGORIES, load_domain
from faultline.replay import categorize, wilson

TARGET = 0.8
"""Overall agreement the categorizer should reach on the held-out family."""


def measure(tasks: int | None) -> dict[str, Any]:
    domain = load_domain("retail")
    chosen = domain.tasks()[:tasks] if tasks else domain.tasks()
    by_id = {t.id: t for t in chosen}
    started = time.perf_counter()
    family = mistakes(domain, chosen)
    built_s = time.perf_counter() - started
    started = time.perf_counter()
    named = [categorize(m.wrong, m.right, by_id[m.task], domain) for m in family]
    categorize_s = time.perf_counter() - started
    return {
        "tasks": len(chosen),
        "n": len(family),
        "matrix": _matrix(family, named),
        "per_category": {c: _share([m for m in family if m.category == c], family, named) for c in ERROR_CATEGORIES},
        "per_rule": {
            f"{c}/{r}": _share([m for m in family if (m.category, m.rule) == (c, r)], family, named)
            for c, r in dict.fromkeys((m.category, m.rule) for m in family)
        },
        "overall": _share(family, family, named),
        "overall_without_early_stop": _share([m for m in family if m.category != "early_stop"], family, named),
        "build_s": round(built_s, 2),
        "categorize_ms_per_mistake": round(1000 * categorize_s / max(len(family), 1), 3),
        "machine": machine(),
    }


def _matrix(family: list[Mistake], named: list[str]) -> dict[str, dict[str, int]]:
    counts = Counter((m.category, n) for m, n in zip(family, named, strict=True))
    return {
        built: {n or "(none)": c for (b, n), c in sorted(counts.items()) if b == built} for built in ERROR_CATEGORIES
    }


def _share(subset: list[Mistake], family: list[Mistake], named: list[str]) -> dict[str, Any]:
    answer = {id(m): n for m, n in zip(family, named, strict=True)}
    agree = sum(answer[id(m)] == m.category for m in subset)
    low, high = wilson(agree, len(subset))
    return {"agree": agree, "n": len(subset), "rate": agree / len(subset) if subset else 0.0, "ci95": [low, high]}


def report(result: dict[str, Any], console: Console) -> None:
    columns = [*ERROR_CATEGORIES, "(none)"]
    matrix = Table(title=f"categorize on {result['n']} held-out retail mistakes ({result['tasks']} tasks)")
    matrix.add_column("built as \\ named")
    for c in columns:
        matrix.add_column(c.replace("_", " "), justify="right")
    for built in ERROR_CATEGORIES:
        row = result["matrix"][built]
        matrix.add_row(built, *[str(row.get(c, 0)) for c in columns])
    console.print(matrix)
    agreement = Table(title="agreement with the category each mistake was built as")
    for column, justify in (("category", "left"), ("agree", "right"), ("n", "right"), ("rate", "right"),
                            ("Wilson 95%", "right")):  # fmt: skip
        agreement.add_column(column, justify=justify)  # type: ignore[arg-type]
    rows = [(c, result["per_category"][c]) for c in ERROR_CATEGORIES]
    rows += [("overall", result["overall"]), ("overall, early stop left out", result["overall_without_early_stop"])]
    for name, share in rows:
        low, high = share["ci95"]
        agreement.add_row(name, str(share["agree"]), str(share["n"]), f"{share['rate']:.1%}", f"{low:.1%}-{high:.1%}")
    console.print(agreement)
    missed = {rule: s for rule, s in result["per_rule"].items() if s["agree"] < s["n"]}
    for rule, s in missed.items():
        console.print(f"  {rule}: {s['agree']}/{s['n']} agree")
    verdict = "PASS" if result["overall"]["rate"] >= TARGET else "MISS"
    console.print(f"overall {result['overall']['rate']:.1%} (target >= {TARGET:.0%}): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=0, help="the first N retail tasks (default: all)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    result = measure(args.tasks or None)
    console = Console()
    console.width = max(console.width, 100)  # the matrix's category names, unwrapped
    report(result, console)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
