"""Files that readers in other processes watch: replaced whole, never seen half written."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, temporary: Path | None = None) -> None:
    """Write `data` to `temporary` (by default a hidden file beside `path`), then rename it over `path`."""
    temporary = temporary or path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def not_a_file(path: Path, what: str) -> str:
    """Why `path` is not the `what` a user named (it is missing, a folder, or no regular file), in words."""
    if path.is_dir():
        return f"{path}: is a folder, not {what}"
    if path.exists():
        return f"{path}: is not a regular file, so not {what}"
    return f"{path}: no such {what.removeprefix('a ').removeprefix('an ')}"
