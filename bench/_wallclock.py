"""A Python module run with its wall clock stepped by the seconds a file holds, as an NTP step moves a host's.

    python -m bench._wallclock OFFSET_FILE -m faultline.cli worker ...

Before the module runs, `time.time`, `time.time_ns`, `time.clock_gettime(_ns)` of CLOCK_REALTIME, and
`time.gmtime`, `time.localtime`, `time.ctime` and `time.strftime` asked for the present, read the system
clock plus the offset; the monotonic clocks (what timeouts and anyio read) are left alone, as a step leaves
them. The offset is read when the process starts and again on SIGWINCH: the nemesis rewrites the file, then
signals (ignored by default, so a signal that comes before the handler is set changes nothing, and the file
is read after the handler is set). `datetime.now()` and its family read the system clock in C and are not
stepped; faultline reads none of them. The changing of the system clock itself is left alone: it would
step every process on the machine.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import SupportsIndex

STEP_SIGNAL = signal.SIGWINCH
_TimeTuple = tuple[int, int, int, int, int, int, int, int, int]


class _Step:
    """The offset in force, read from its file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0

    def read(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            text = ""
        self.seconds = float(text or 0.0)


def _install(step: _Step) -> None:
    wall, wall_ns, clock, clock_ns = time.time, time.time_ns, time.clock_gettime, time.clock_gettime_ns
    gmtime, localtime, ctime, strftime = time.gmtime, time.localtime, time.ctime, time.strftime

    def stepped() -> float:
        return wall() + step.seconds

    def stepped_ns() -> int:
        return wall_ns() + round(step.seconds * 1e9)

    def stepped_clock(clk_id: int) -> float:
        return stepped() if clk_id == time.CLOCK_REALTIME else clock(clk_id)

    def stepped_clock_ns(clk_id: int) -> int:
        return stepped_ns() if clk_id == time.CLOCK_REALTIME else clock_ns(clk_id)

    def stepped_gmtime(secs: float | SupportsIndex | None = None) -> time.struct_time:
        return gmtime(stepped() if secs is None else secs)

    def stepped_localtime(secs: float | SupportsIndex | None = None) -> time.struct_time:
        return localtime(stepped() if secs is None else secs)

    def stepped_ctime(secs: float | SupportsIndex | None = None) -> str:
        return ctime(stepped() if secs is None else secs)

    def stepped_strftime(format: str, t: time.struct_time | _TimeTuple | None = None) -> str:
        return strftime(format, stepped_localtime() if t is None else t)

    time.time, time.time_ns = stepped, stepped_ns
    time.clock_gettime, time.clock_gettime_ns = stepped_clock, stepped_clock_ns
    time.gmtime, time.localtime, time.ctime, time.strftime = (
        stepped_gmtime,
        stepped_localtime,
        stepped_ctime,
        stepped_strftime,
    )
    signal.signal(STEP_SIGNAL, step.read)
    step.read()  # after the handler is set: a step written before now is read here, one after by the handler


def step(path: Path, seconds: float, pid: int | None) -> None:
    """Set the offset in `path` to `seconds` and tell process `pid` (if it runs) to read it again; a process
    started later reads it when it starts."""
    temporary = path.with_suffix(".new")
    temporary.write_text(f"{seconds!r}\n")
    os.replace(temporary, path)
    if pid is not None:
        try:
            os.kill(pid, STEP_SIGNAL)
        except ProcessLookupError:  # it died meanwhile: its successor reads the file
            pass


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit("usage: python -m bench._wallclock OFFSET_FILE -m MODULE [ARG ...]")
    path, module, args = Path(sys.argv[1]), sys.argv[3], sys.argv[4:]
    _install(_Step(path))
    sys.argv = [sys.argv[0], *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
