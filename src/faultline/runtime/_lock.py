"""One running system per state directory: an exclusive `flock` held for the life of `up` or `run`.

The lock file names its holder (pid and command), so a second process that
finds the directory taken says which process to stop instead of corrupting
the stream store or the journal next to it. The kernel drops the lock when
its holder exits, even by SIGKILL, so a stale file never blocks anybody.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from faultline._errors import DirectoryBusyError

LOCK_FILE = "faultline.lock"


def state_dir(journal: Path) -> Path:
    """The folder next to a journal where the system writing it keeps its state and its lock."""
    return journal.parent / ".faultline"


@contextlib.contextmanager
def hold_directories(folders: Iterable[Path], command: str) -> Iterator[None]:
    """Lock every folder (created if missing) for the block, or raise DirectoryBusyError naming the holder."""
    unique = list(dict.fromkeys(folder.resolve() for folder in folders))
    with contextlib.ExitStack() as stack:
        for folder in unique:
            stack.enter_context(_hold(folder, command))
        yield


@contextlib.contextmanager
def _hold(folder: Path, command: str) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    # Opened without truncating: the holder's pid stays readable until the lock is ours.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, holder = _holder(path)
            who = f"`faultline {holder}` (pid {pid})" if pid else "another process"
            stop = f"stop it first (kill -TERM {pid})" if pid else "stop it first"
            message = f"{folder} is in use by {who}: {stop} or use another directory"
            raise DirectoryBusyError(message, pid, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": command}).encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(path: Path) -> tuple[int, str]:
    """The pid and command written by the process holding `path`; (0, "") when unreadable."""
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
        return int(written["pid"]), str(written["command"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0, ""
