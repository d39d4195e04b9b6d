"""`faultline run`'s results table, as its user reads it."""

from __future__ import annotations

import io

from rich.console import Console

from faultline.api import Summary
from faultline.cli._run import _table


def shown(summary: Summary) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(_table(summary, "retail", "r1"))
    return out.getvalue()
