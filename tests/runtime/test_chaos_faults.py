"""The nemesis's ways to fault a disk and a clock, and to let faults overlap: each does what it says, and
undoes it.

The disk is a real file system on a loop device (skipped where one cannot be made: not root); the clock
is a real process started through `bench._wallclock`.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from bench import _wallclock
from bench._disk import THROTTLE, THROTTLE_FILES, WAL_BYTES, Disk, journal_disk, unavailable
from bench._nemesis import Applied, Fault, Kind, Nemesis, Progress, Schedule, holds
from faultline.runtime import Supervisor

ROOT = Path(__file__).parents[2]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    why = unavailable()
    if why:
        pytest.skip(f"no disk of its own here: {why}")
    with journal_disk(tmp_path) as made:
        yield made


def _rules(disk: Disk) -> list[str]:
    return [
        line for name in THROTTLE_FILES for line in (THROTTLE / name).read_text().splitlines() if disk.number in line
    ]


def _append_synced(path: Path, times: int) -> float:
    """Seconds taken by `times` appends of 4 KB, each synced to the disk."""
    began = time.monotonic()
    with path.open("ab") as f:
        for _ in range(times):
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
    return time.monotonic() - began


def test_a_schedules_disk_has_room_for_its_journal_and_a_full_wal(tmp_path: Path) -> None:
    """A 200-episode schedule runs up to about 600 episodes, some 35 KB of journal each, beside a WAL of 40 MiB.
    On a disk sized for a few hundred, the journal's own growth filled it: the run stood still, as a full disk
    should hold it, after a fault had freed the disk (seeds 1203, 1204 and 1208)."""
    if why := unavailable():
        pytest.skip(f"no disk of its own here: {why}")
    with journal_disk(tmp_path, episodes=200) as made:
        free = os.statvfs(made.mount)
        room = free.f_bavail * free.f_frsize
    assert room >= WAL_BYTES + 3 * 200 * 35_000


def test_a_full_disk_refuses_every_write_until_it_is_freed(disk: Disk) -> None:
    journal = disk.mount / "journal"
    journal.write_bytes(b"before")
    disk.fill()
    with pytest.raises(OSError) as refused:
        _append_synced(journal, 1)
    assert refused.value.errno == errno.ENOSPC
    disk.free()
    _append_synced(journal, 1)
    assert journal.read_bytes().startswith(b"before")


def test_a_slow_disk_holds_its_writes_to_its_rate_and_heals(disk: Disk) -> None:
    disk.slow(10)
    assert _rules(disk) == [f"{disk.number} 10"] * 2
    assert _append_synced(disk.mount / "journal", 2) > 0.25  # each synced append writes its data and an ext4 commit
    disk.heal()
    assert _rules(disk) == []


def test_a_disk_is_left_unthrottled_and_unmounted(tmp_path: Path) -> None:
    if why := unavailable():
        pytest.skip(f"no disk of its own here: {why}")
    with journal_disk(tmp_path) as made:
        made.slow(3)
    assert _rules(made) == []
    assert str(made.mount) not in Path("/proc/mounts").read_text()
    assert not (tmp_path / "disk.img").exists()


def test_a_stepped_clock_moves_the_wall_clock_of_its_process_and_no_other_clock(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(
        "import sys, time\n"
        "for line in sys.stdin:\n"
        "    print(time.time(), time.time_ns() / 1e9, time.monotonic(), flush=True)\n"
    )
    offset = tmp_path / "clock"
    _wallclock.step(offset, 3600.0, None)
    with subprocess.Popen(
        [sys.executable, "-m", "bench._wallclock", str(offset), "-m", "probe"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as probe:
        assert probe.stdin is not None and probe.stdout is not None

        def read() -> tuple[float, float, float]:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write("\n")
            probe.stdin.flush()
            wall, wall_ns, monotonic = map(float, probe.stdout.readline().split())
            return wall - time.time(), wall_ns - time.time(), monotonic

        ahead, ahead_ns, first = read()
        assert 3590 < ahead < 3610 and 3590 < ahead_ns < 3610
        _wallclock.step(offset, -60.0, probe.pid)
        deadline = time.monotonic() + 10
        while (behind := read())[0] > -50:  # the signal is handled between two reads
            assert time.monotonic() < deadline, "the step was not taken"
        assert -70 < behind[0] < -50 and -70 < behind[1] < -50
        assert behind[2] >= first  # the monotonic clock went on
        probe.stdin.close()
    assert probe.returncode == 0


def _fault(kind: Kind, target: str, *, with_previous: bool = False) -> Fault:
    return Fault(kind=kind, target=target, after_episodes=0, delay_s=0.0, duration_s=1.0, with_previous=with_previous)


def test_faults_that_would_take_two_nodes_or_share_links_or_a_process_hold_the_same_thing() -> None:
    def share(a: Fault, b: Fault) -> bool:
        return bool(holds(a) & holds(b))

    pause_n1, kill_leader = _fault(Kind.PAUSE, "n1"), _fault(Kind.KILL, "leader")
    assert share(pause_n1, kill_leader) and share(pause_n1, _fault(Kind.PARTITION, "n2"))
    assert share(_fault(Kind.PARTITION, "worker-main-0"), _fault(Kind.DELAY, "n3"))  # both act on links
    assert share(_fault(Kind.KILL, "journal"), _fault(Kind.PAUSE, "journal"))
    assert not share(pause_n1, _fault(Kind.PARTITION, "worker-main-0"))
    assert not share(pause_n1, _fault(Kind.DELAY, "n2"))
    assert not share(_fault(Kind.KILL, "journal"), _fault(Kind.DISK_FULL, "disk"))
    assert not share(_fault(Kind.DISK_FULL, "disk"), _fault(Kind.SLOW_DISK, "disk"))
    assert not share(_fault(Kind.CLOCK, "worker-main-0"), _fault(Kind.KILL, "worker-main-0"))


@dataclass
class Recorded(Nemesis):
    """A nemesis whose faults last until the test ends them, and say when they begin and end."""

    said: list[str] = field(default_factory=list)
    ends: dict[str, anyio.Event] = field(default_factory=dict)

    async def _apply(self, fault: Fault) -> Applied:
        name = f"{fault.kind} {fault.target}"
        self.said.append(f"begin {name}")
        await self.ends.setdefault(name, anyio.Event()).wait()
        self.said.append(f"end {name}")
        return Applied(fault=fault, target=fault.target, began_s=0.0, ended_s=self.progress.now())


async def test_overlapping_faults_begin_while_the_one_before_lasts_unless_it_holds_what_they_hold() -> None:
    faults = (
        _fault(Kind.PAUSE, "n1"),
        _fault(Kind.PARTITION, "n2", with_previous=True),  # a second node: waits for the pause to end
        _fault(Kind.CLOCK, "worker-main-0", with_previous=True),  # begins while the partition lasts
    )
    schedule = Schedule(seed=0, episodes=1, faults=faults, overlap=True)
    nemesis = Recorded(schedule, None, Supervisor(Path("unused"), []), Progress())  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(nemesis.run)
        await anyio.wait_all_tasks_blocked()
        assert nemesis.said == ["begin pause n1"]
        nemesis.ends["pause n1"].set()
        await anyio.wait_all_tasks_blocked()
        assert nemesis.said == ["begin pause n1", "end pause n1", "begin partition n2", "begin clock worker-main-0"]
        nemesis.ends["partition n2"].set()
        nemesis.ends["clock worker-main-0"].set()
    assert nemesis.done.is_set() and len(nemesis.applied) == 3


async def test_a_fault_begins_only_once_an_episode_completed_after_the_one_before_ended() -> None:
    schedule = Schedule(seed=0, episodes=1, faults=(_fault(Kind.PAUSE, "n1"), _fault(Kind.KILL, "journal")))
    progress = Progress()
    nemesis = Recorded(schedule, None, Supervisor(Path("unused"), []), progress)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(nemesis.run)
        await anyio.wait_all_tasks_blocked()
        nemesis.ends["pause n1"].set()
        await anyio.wait_all_tasks_blocked()
        assert nemesis.said == ["begin pause n1", "end pause n1"]  # its recovery not yet seen
        progress.completed()
        await anyio.wait_all_tasks_blocked()
        assert nemesis.said[-1] == "begin kill journal"
        nemesis.ends["kill journal"].set()
        await anyio.wait_all_tasks_blocked()
        assert not nemesis.done.is_set()  # the last one's recovery is waited for too
        progress.completed()
    assert nemesis.done.is_set() and len(nemesis.applied) == 2
