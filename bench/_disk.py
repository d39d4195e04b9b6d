"""The journal's own disk, for the nemesis to fill and to slow: a small ext4 file system on a loop device.

Full is the kernel's ENOSPC: a file written until the file system refuses more, and deleted to free it.
Slow is the block layer's throttle (the cgroup v1 blkio controller, set in the root group for this device
alone): every read and write of the device, the page cache's write-back and ext4's own journal included,
is held to a number of operations a second. A tmpfs fills as well but has no block device to throttle, so
both faults act on one loop device. Making the disk needs root (`losetup`, `mkfs.ext4`, `mount`);
`unavailable()` says why it cannot be made where it cannot.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from faultline.journal import JournalSettings

_JOURNAL = JournalSettings()
WAL_BYTES = _JOURNAL.wal_autocheckpoint_pages * _JOURNAL.page_size
"""The journal's WAL file at its checkpoint interval (40 MiB): SQLite keeps the file that size once it grew."""
BASE_BYTES = 24 * 1024 * 1024
"""ext4's own blocks (its journal and tables) and the journal's head records, beside the WAL."""
EPISODE_BYTES = 128 * 1024
"""Room per episode of a schedule: a sim episode takes about 35 KB of the journal, and a schedule runs more
episodes than asked until its last fault has ended (612 for seed 1208's 200)."""
FILL_CHUNK_BYTES = 1024 * 1024
BLOCK_BYTES = 4096
THROTTLE = Path("/sys/fs/cgroup/blkio")
THROTTLE_FILES = ("blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")


class DiskUnavailable(Exception):
    """The disk cannot be made here: not root, no loop device, no blkio throttle."""


@dataclass
class Disk:
    """A mounted file system of its own on loop device `device` (`number` is its major:minor)."""

    mount: Path
    device: str
    number: str

    @property
    def filler(self) -> Path:
        return self.mount / "filler"

    def fill(self) -> None:
        """Write the filler until the file system refuses more: from then on every write on it fails.

        ext4 refuses a write once the blocks it reserves for the data not yet written out run short, and
        gives back what it reserved beyond need once that data is on disk: so the filler is synced and
        written again, in smaller writes, until a synced file system takes no single block more."""
        with self.filler.open("ab", buffering=0) as f:
            for size in (FILL_CHUNK_BYTES, BLOCK_BYTES, BLOCK_BYTES):
                _write_until_full(f.fileno(), b"\0" * size)
                os.fsync(f.fileno())

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def slow(self, iops: int) -> None:
        """Hold every read and every write of the device to `iops` operations a second."""
        self._throttle(iops)

    def heal(self) -> None:
        self._throttle(0)  # 0 removes the device's limit

    def _throttle(self, iops: int) -> None:
        for name in THROTTLE_FILES:
            (THROTTLE / name).write_text(f"{self.number} {iops}\n")


def disk_bytes(episodes: int) -> int:
    """The size of a disk with room for the journal of a schedule of `episodes` and its WAL: only the nemesis
    fills it. A disk the journal's own growth filled would hold the run the way a full disk should (the journal
    refuses new episodes until freed), and no fault would end it."""
    return BASE_BYTES + WAL_BYTES + episodes * EPISODE_BYTES


@contextmanager
def journal_disk(folder: Path, episodes: int = 0) -> Iterator[Disk]:
    """A disk for a schedule of `episodes` (`disk_bytes`) mounted at `folder`/disk for as long as the block lasts,
    its image in `folder`; left with no throttle, unmounted and detached after. DiskUnavailable when it cannot be
    made here."""
    missing = [name for name in THROTTLE_FILES if not (THROTTLE / name).exists()]
    if missing:
        raise DiskUnavailable(f"no blkio throttle here ({THROTTLE / missing[0]} is missing)")
    image, mount = folder / "disk.img", folder / "disk"
    with ExitStack() as stack:
        with image.open("wb") as f:
            f.truncate(disk_bytes(episodes))
        stack.callback(image.unlink)
        device = _run("losetup", "--find", "--show", str(image))
        stack.callback(_run, "losetup", "--detach", device)
        _run("mkfs.ext4", "-q", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", device)
        mount.mkdir()
        _run("mount", device, str(mount))
        stack.callback(_run, "umount", "--lazy", str(mount))
        disk = Disk(mount, device, (Path("/sys/block") / Path(device).name / "dev").read_text().strip())
        stack.callback(disk.heal)
        yield disk


def unavailable() -> str:
    """Why no disk can be made here, or "" when one can (one is made and taken down to find out)."""
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-disk-") as folder, journal_disk(Path(folder)) as disk:
            disk.heal()
    except (DiskUnavailable, OSError) as exc:
        return str(exc)
    return ""


def _write_until_full(fd: int, chunk: bytes) -> None:
    try:
        while True:
            os.write(fd, chunk)  # a short write takes the last bytes, the next one fails
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise


def _run(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise DiskUnavailable(f"{argv[0]} is not installed") from None
    except subprocess.CalledProcessError as exc:
        raise DiskUnavailable(f"{' '.join(argv)}: {exc.stderr.strip() or f'exit code {exc.returncode}'}") from None
    return done.stdout.strip()
