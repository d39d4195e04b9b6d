"""Main-error counts per category, as `fama analyze` and `fama loop` both report them.

A module of its own because `_fama`, which registers the `fama` group, imports `_fama_loop`.
"""

from __future__ import annotations

from collections import Counter

from faultline.services.fama import CATEGORIES, CaseReport

SIM_JUDGE_NOTE = "sim judge: a deterministic stand-in that measures the mechanism, not a model"


def category_counts(cases: list[CaseReport]) -> dict[str, int]:
    """How many analysed failures name each category among their main errors (every category listed)."""
    found = Counter(c for case in cases if case.analysis for c in case.analysis.main.main)
    return {cat.id: found.get(cat.id, 0) for cat in CATEGORIES}
