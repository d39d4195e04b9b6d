"""A small disk to fill up: a tmpfs of its own, so "disk full" is the kernel's ENOSPC, not a simulation."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SMALL_DISK_BYTES = 16 * 1024 * 1024
RUN_DISK_BYTES = 64 * 1024 * 1024
"""Room for a journal of 100 sim episodes, as a run writes it: its WAL holds the whole run until it checkpoints
(`JournalSettings.wal_autocheckpoint_pages`), each commit's pages again, and so takes several times the rows."""
FILL_CHUNK_BYTES = 64 * 1024


@contextlib.contextmanager
def _tmpfs(mount: Path, size: int) -> Iterator[Path]:
    """`mount`, a tmpfs of `size` bytes; the test is skipped where mounting is not allowed (not root)."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of SMALL_DISK_BYTES."""
    with _tmpfs(tmp_path / "small-disk", SMALL_DISK_BYTES) as mount:
        yield mount


@pytest.fixture
def run_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of RUN_DISK_BYTES: for a test that fills it after a run has begun, and then needs the
    rest of the run to fit once it is freed."""
    with _tmpfs(tmp_path / "run-disk", RUN_DISK_BYTES) as mount:
        yield mount


def fill(directory: Path) -> Path:
    """Write a file into `directory` until its disk is full; delete the file to free the space again."""
    filler = directory / "filler"
    chunk = b"\0" * FILL_CHUNK_BYTES
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)  # unbuffered: a short write takes the last bytes, the next one fails
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler
