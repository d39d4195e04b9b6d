"""Text for people: a console that keeps piped tables whole, cells clipped to one line, tables that fit."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, JustifyMethod, RenderableType
from rich.table import Table

PIPE_WIDTH = 200
"""Console width when output is not a terminal, so piped tables are not wrapped at 80 columns."""
PROGRESS_LINE_S = 10.0
"""How often a long command whose stderr is not a terminal prints a line saying how far it got: logs never show
a progress bar."""


def table_console() -> Console:
    """A console as wide as the terminal, or `$COLUMNS`; piped without `$COLUMNS`, PIPE_WIDTH wide.

    It reads no markup: what agents, models and scorers wrote is printed as written, square brackets and all
    (a model's "[/INST]" is no closing tag); styles are given as `Text`."""
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPE_WIDTH
    return Console(width=width, highlight=False, markup=False)


def stderr_console() -> Console:
    """The console of notes, warnings and progress on stderr; like `table_console`, it reads no markup."""
    return Console(stderr=True, markup=False)


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, with an s unless `n` is 1: "1 fork", "3 forks"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def clip(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dataclass(frozen=True)
class Column:
    """A table column that may be dropped on a narrow terminal: the higher `drop`, the sooner (0: never)."""

    name: str
    min_width: int
    drop: int = 0
    justify: JustifyMethod = "left"
    wrap: bool = False
    """Wrap at words (and fold a word longer than the column) instead of keeping the cell on one line."""


def fitted_table(
    columns: Sequence[Column], rows: Sequence[Sequence[RenderableType]], width: int, **table: Any
) -> Table:
    """A table of `rows` with the columns that fit `width` at their least widths, dropping the most droppable first.

    What stays is never cut: one-line cells keep their whole text, wrapping ones fold at words.
    """
    kept = list(range(len(columns)))
    while len(kept) > 1 and sum(columns[i].min_width + 3 for i in kept) + 1 > width:
        worst = max(kept, key=lambda i: (columns[i].drop, i))
        if columns[worst].drop == 0:
            break
        kept.remove(worst)
    result = Table(**table)
    for i in kept:
        column = columns[i]
        result.add_column(
            column.name,
            justify=column.justify,
            no_wrap=not column.wrap,
            overflow="fold",
            min_width=column.min_width,
            ratio=1 if column.wrap else None,
        )
    for row in rows:
        result.add_row(*(row[i] for i in kept))
    return result
