"""How far a long command got, on stderr, for people: a bar on a terminal, a line now and then in a log."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_shown(label: str, unit: str, *, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A callback told (done, total): on a terminal it moves a bar named `label`; where stderr is a log it prints
    "N of M `unit`" every PROGRESS_LINE_S. With `quiet` (JSON output) only the bar, and where stderr is not a
    terminal none at all (None), without loading rich."""
    if quiet and not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from faultline.cli._text import PROGRESS_LINE_S, stderr_console

    console = stderr_console()
    if not console.is_terminal:
        last = time.monotonic()

        def line(done: int, total: int) -> None:
            nonlocal last
            if time.monotonic() - last >= PROGRESS_LINE_S:
                last = time.monotonic()
                console.print(f"{done} of {total} {unit}", highlight=False)

        yield line
        return
    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), "eta", TimeRemainingColumn())
    with Progress(label, *columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
