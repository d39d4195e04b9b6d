"""What the benchmarks share: the machine a number was measured on, the command line of a repeated
measurement, so that every report states its load the same way, and waits that say what they waited for."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console


@contextlib.contextmanager
def fail_after(seconds: float, what: str, seen: Callable[[], object] | None = None) -> Iterator[None]:
    """`anyio.fail_after`, whose TimeoutError says `what` did not happen in time and, with `seen`, what was
    last seen: a schedule that stops on one names its wait."""
    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        last = f" (last seen: {seen()})" if seen is not None else ""
        raise TimeoutError(f"{what} within {seconds:g}s{last}") from None


def int_list(text: str) -> list[int]:
    """A comma-separated list of whole numbers on a benchmark's command line (`--shards 1,4`)."""
    return [int(part) for part in text.split(",") if part.strip()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc); OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # past the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    """Where and when: a number from a busy shared machine says so beside it."""
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_1m": os.getloadavg()[0],
        "load_avg": os.getloadavg(),
    }


def run_repeated(
    doc: str | None,
    measure: Callable[[int, int], Awaitable[dict[str, Any]]],
    report: Callable[[dict[str, Any], Callable[[Any], None]], None],
    *,
    messages: int,
) -> None:
    """The command line of a benchmark that repeats `--reps` runs of `--messages` each and reports medians."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=messages)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default="", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    result = anyio.run(measure, args.messages, args.reps)
    report(result, Console().print)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
