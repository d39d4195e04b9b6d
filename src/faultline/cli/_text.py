"""Text for people: a console that keeps piped tables whole, and cells clipped to one line."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 200
"""Console width when output is not a terminal, so piped tables are not wrapped at 80 columns."""


def table_console() -> Console:
    """A console as wide as the terminal, or `$COLUMNS`; piped without `$COLUMNS`, PIPE_WIDTH wide."""
    return Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPE_WIDTH, highlight=False)


def clip(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
