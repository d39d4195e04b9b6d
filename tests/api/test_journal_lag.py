"""A run says how long it waited, after its last episode, for the journal to copy the stream: the journal's lag."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from pathlib import Path

import msgspec

from faultline.api import RunPlan, RunSpec, run
from faultline.journal import JournalReader, verify
from tests.api.tables import shown
from tests.processes import children

HOLD_S = 1.0


class HeldJournal:
    """Watches a run: stops its journal service (SIGSTOP) once the system is up, and lets it go on `HOLD_S` after
    the last episode completed. A journal that did not keep up, and then catches up."""

    def __init__(self, episodes: int) -> None:
        self.episodes = episodes
        self.pid = 0
        self.release: threading.Timer | None = None

    def started(self, plan: RunPlan, episodes: int, *, starting_system: bool) -> None:
        return None

    def system_up(self) -> None:
        [self.pid] = [pid for pid, command in children(os.getpid()).items() if " journal serve " in command]
        os.kill(self.pid, signal.SIGSTOP)

    def update(self, done: int, ok: int, waiting: str) -> None:
        if done == self.episodes and self.release is None:
            self.release = threading.Timer(HOLD_S, self.go_on)  # the fault's length, not a synchronisation
            self.release.start()

    def finished(self) -> None:
        self.go_on()

    def go_on(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):  # it ended with the run
                os.kill(self.pid, signal.SIGCONT)


def test_a_run_whose_journal_fell_behind_says_how_long_it_waited_for_it(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    held = HeldJournal(episodes=2)
    try:
        report = run(RunSpec(tasks=2, journal=journal, insecure=True), progress=held)
    finally:
        held.go_on()
    assert report.summary.outcomes == {"success": 2}
    assert report.summary.journal_wait_s >= HOLD_S  # its episodes were over; the journal was not
    with JournalReader(journal) as reader:
        assert sum(1 for e in reader.episodes() if e.outcome) == 2  # and then it caught up, nothing lost
    assert verify(journal).ok
    table = shown(report.summary)
    assert re.search(r"journal lag .* \d+\.\d s after the last episode: it did not keep up", table), table
    assert "journal lag" not in shown(msgspec.structs.replace(report.summary, journal_wait_s=0.2))
