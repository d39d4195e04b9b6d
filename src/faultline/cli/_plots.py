"""PNG plots for `--plot`: one place that knows matplotlib.

Plots are written with the Agg backend, so they work on a machine with no
display, and imported lazily, so a command that plots nothing never pays for
matplotlib's import.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from faultline._errors import UsageError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@contextmanager
def png(path: str | Path, *, width: float = 8.0, height: float = 4.5, note: str = "") -> Iterator[Figure]:
    """A figure that is saved to `path` as a PNG when the block ends without error, which stderr then says (the
    tables and JSON lines on stdout say nothing of it); `note` is written beneath it and into the file's description
    (where the numbers are a simulator's, that they measure the runtime, not a model), so it stays with the image
    wherever it is shown."""
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise UsageError(f"--plot {target}: the file name must end in .png")
    if not target.parent.is_dir():
        raise UsageError(f"--plot {target}: folder {target.parent} does not exist")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    yield figure
    if note:
        figure.supxlabel(note, fontsize=8, wrap=True)
    figure.savefig(target, dpi=120, metadata={"Description": note} if note else None)
    print(f"plot written to {target}", file=sys.stderr)


def count_axis(axes: Axes, most: float) -> None:
    """A y axis of counts: from zero, whole numbers only, and a visible range when every count is zero."""
    from matplotlib.ticker import MaxNLocator

    axes.set_ylim(0, max(most, 1) * 1.1)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not most:
        axes.text(0.5, 0.5, "none", transform=axes.transAxes, ha="center", va="center", color="gray")
