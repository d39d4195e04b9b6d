"""State-directory locks: one holder at a time, named to the next; gone with the holder, even after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultline._errors import DirectoryBusyError
from faultline.runtime import hold_directories
from faultline.runtime._lock import LOCK_FILE

HOLDER = """
import sys
from pathlib import Path
from faultline.runtime._lock import hold_directories

with hold_directories([Path(sys.argv[1])], "up"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_held_directory_names_its_holder_and_is_free_once_the_holder_is_killed(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(DirectoryBusyError) as caught, hold_directories([tmp_path, folder], "run"):
            pass
        assert caught.value.pid == holder.pid
        assert str(caught.value) == (
            f"{folder} is in use by `faultline up` (pid {holder.pid}): stop it first (kill -TERM {holder.pid})"
            " or use another directory"
        )
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    with hold_directories([folder, folder / "."], "run"):
        assert json.loads((folder / LOCK_FILE).read_text()) == {"pid": os.getpid(), "command": "run"}


def test_folders_are_created_and_released_in_turn(tmp_path: Path) -> None:
    folders = [tmp_path / "a", tmp_path / "b" / "c"]
    with hold_directories(folders, "up"):
        assert all((folder / LOCK_FILE).is_file() for folder in folders)
    with hold_directories(folders[::-1], "up"):
        pass
