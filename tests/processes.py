"""Processes as /proc shows them, for the tests that start a system and look at what it left running."""

from __future__ import annotations

from pathlib import Path


def state(pid: int) -> str:
    """The process's state letter (`R`, `S`, `T` stopped, `Z` a zombie, ...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def alive(pid: int) -> bool:
    return state(pid) not in ("", "Z")


def children(pid: int) -> dict[int, str]:
    """The live child processes of `pid` with their command lines (arguments joined by spaces)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            status, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if int(ppid) == pid and status != "Z":
            found[int(stat.parent.name)] = command
    return found
