"""Where nats-server spends its CPU in a run, read with Linux `perf` from the server's own symbols.

The server's Go binary keeps its symbols, so a call-graph sample of the process splits its CPU among the
goroutines that do JetStream's work. Each part below is a function and everything it calls (perf's
"children" share), so the parts may overlap where one calls another (finding the next message is part of
delivering). Needs `perf` on the PATH and leave to profile one's own processes
(`/proc/sys/kernel/perf_event_paranoid` at 2 or less).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from pathlib import Path

PARTS: dict[str, str] = {
    "storing (the stream's loop)": "(*stream).internalLoop",
    "delivering (consumers' loops)": "(*consumer).loopAndGatherMsgs",
    "finding each consumer's next message": "(*consumer).getNextMsg",
    "reading clients' messages": "(*client).readLoop",
    "writing consumers' state files": "(*consumerFileStore).flushLoop",
    "Go's scheduler monitor": "runtime.sysmon",
    "garbage collection": "runtime.gcBgMarkWorker",
}
"""A part of the server's work, and the function whose samples (with its callees') measure it."""

SAMPLES_PER_S = 499
STOP_WAIT_S = 30.0
_LINE = re.compile(r"^\s*(?P<children>[\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(?P<symbol>\S+)")
_EVENT_COUNT = re.compile(r"^# Event count \(approx\.\): (\d+)")


def unavailable() -> str | None:
    """Why the server cannot be profiled here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        return "this kernel does not say whether perf may sample"
    return None if paranoid <= 2 else f"perf_event_paranoid is {paranoid}: sampling one's own processes is refused"


class ServerProfile:
    """A `perf record` of one nats-server process, from `start` until the process ends."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self._perf: subprocess.Popen[bytes] | None = None

    def start(self, pid: int) -> None:
        self._perf = subprocess.Popen(
            ["perf", "record", "-F", str(SAMPLES_PER_S), "-g", "-p", str(pid), "-o", str(self.data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def parts(self) -> dict[str, float]:
        """CPU seconds of each of `PARTS`, and of the whole server ("all"), once the server has ended; empty
        when nothing was recorded."""
        if self._perf is None:
            return {}
        try:
            self._perf.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._perf.send_signal(signal.SIGINT)
            self._perf.wait(STOP_WAIT_S)
        report = subprocess.run(
            ["perf", "report", "-i", str(self.data), "--children", "--sort", "symbol", "--stdio", "-g", "none"],
            capture_output=True,
            text=True,
        )
        return _parts(report.stdout)


def _parts(report: str) -> dict[str, float]:
    total_ns = 0
    shares: dict[str, float] = {}
    for line in report.splitlines():
        if (count := _EVENT_COUNT.match(line)) is not None:
            total_ns = int(count.group(1))
        elif (sample := _LINE.match(line)) is not None:
            symbol = sample.group("symbol")
            for part, function in PARTS.items():
                if part not in shares and symbol.endswith(function):
                    shares[part] = float(sample.group("children")) / 100
    if not total_ns:
        return {}
    return {"all": total_ns / 1e9} | {part: shares.get(part, 0.0) * total_ns / 1e9 for part in PARTS}
