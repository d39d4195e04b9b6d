"""A small disk to fill up: a tmpfs of its own, so "disk full" is the kernel's ENOSPC, not a simulation."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SMALL_DISK_BYTES = 16 * 1024 * 1024
FILL_CHUNK_BYTES = 64 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of SMALL_DISK_BYTES; the test is skipped where mounting is not allowed (not root)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


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
