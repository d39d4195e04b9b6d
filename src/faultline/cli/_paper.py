"""`faultline report --paper NAME INPUT...`: a source paper's tables in the paper's own shape, with our numbers.

Each paper module turns Faultline's own outputs into `PaperTable`s (rows and columns as the paper lays
them out) and a summary: `masfire` reads a campaign folder, `fama` `fama loop` folders, `memtool` run
journals.
Text prints each table with its caption; `--json` prints each table's rows (its `kind` as the type),
then one summary. When an input was run on `sim`, every table says that its numbers measure the
runtime's mechanisms, never a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from faultline.cli import _jsonl
from faultline.cli._text import table_console

PAPERS = {
    "masfire": ("MAS-FIRE's Table 2 and Figure 4", "one CAMPAIGN_DIR"),
    "fama": ("FAMA's Table 2 and Figures 4 and 5", "LOOP_DIR... (`fama loop --out` folders)"),
    "memtool": ("MemToolAgent's Tables 3 and 4 and Figure 5", "JOURNAL... (runs with different [memory] settings)"),
}
"""Each paper `--paper` lays out: what it prints, and what it reads."""


MIN_WIDTH = 80
"""Columns a table takes at least, so that a narrow one keeps its caption readable."""


def papers_help() -> str:
    return "; ".join(f"{name}: {prints}, from {reads}" for name, (prints, reads) in PAPERS.items())


@dataclass(frozen=True)
class PaperTable:
    """One table or figure of a paper, laid out as the paper does, and its rows for `--json`."""

    kind: str
    """The JSON rows' type, the paper's name of it: `table2`, `figure4` ..."""
    title: str
    head: list[str]
    rows: list[list[str]]
    records: Sequence[Any]
    """One JSON row per record (a Struct or a mapping), each the data behind what the table shows."""
    caption: str = ""
    sections: frozenset[int] = field(default_factory=frozenset)
    """Rows after which a line separates groups (the paper's row groups)."""
    right: int = 1
    """Columns from this one on are numbers, set flush right."""


@dataclass(frozen=True)
class PaperReport:
    tables: list[PaperTable]
    summary: Mapping[str, Any]
    note: str = ""
    """Said under every table: for an input run on `sim`, what its numbers measure."""


def print_report(report: PaperReport, *, json: bool) -> None:
    if json:
        for table in report.tables:
            _jsonl.rows(table.kind, table.records)
        _jsonl.summary({**report.summary, "note": report.note})
        return
    console = table_console()
    for table in report.tables:
        console.print(_rendered(table, report.note))


def _rendered(table: PaperTable, note: str) -> Table:
    caption = "\n".join(c for c in (table.caption, note) if c) or None
    rendered = Table(title=table.title, caption=caption, min_width=MIN_WIDTH)
    for i, column in enumerate(table.head):
        rendered.add_column(column, justify="right" if i >= table.right else "left")
    for i, row in enumerate(table.rows):
        rendered.add_row(*row, end_section=i in table.sections)
    return rendered


def share(value: float | None) -> str:
    """A ratio as the papers print it; `-` for a ratio over nothing."""
    return "-" if value is None else f"{value:.2f}"
