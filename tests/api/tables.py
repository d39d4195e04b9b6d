"""`faultline run`'s results table, as its user reads it."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from faultline.api import RunReport, RunResult, Summary
from faultline.cli._run import _table


def shown(summary: Summary, episodes: RunResult | None = None) -> str:
    """The table of a run with `summary` and, for a run cut short, its `episodes` as they were at the stop."""
    report = RunReport(summary, episodes or RunResult([]), Path("runs/journal.sqlite"), "r1", uses_sim=False)
    out = io.StringIO()
    Console(file=out, width=200).print(_table(report, "retail"))
    return out.getvalue()
