"""Logging for every Faultline process: quiet by default, structured when a program reads it.

Each package logs under its own name (`faultline.bus`, `faultline.journal`, ...)
through the standard `logging` module. Pass the episode, agent and stream
sequence a line is about as `extra={"episode": ..., "agent": ..., "seq": ...}`.
On a terminal a line reads as text; otherwise (a supervisor's child, a file, a
log collector) it is one JSON object. `FAULTLINE_LOG` sets the level for a
process and the processes it starts; the CLI's `-v`/`--log-level` override it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

ENV_LEVEL = "FAULTLINE_LOG"
DEFAULT_LEVEL = "WARNING"
FIELDS = ("episode", "agent", "seq")
"""The structured extras a record may carry; each appears in the output when set."""

_HANDLER_NAME = "faultline"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: value for name in FIELDS if (value := getattr(record, name, None)) is not None}


class TextFormatter(logging.Formatter):
    """`12:00:01 WARNING faultline.bus: message (episode=e1 agent=tool)` for a person."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname} {record.name}: {record.getMessage()}"
        fields = _fields(record)
        if fields:
            line += " (" + " ".join(f"{k}={v}" for k, v in fields.items()) + ")"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for programs."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
            **_fields(record),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record comes (a test or a CLI may swap it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def resolve_level(level: str | int | None = None) -> int:
    """A level from the argument, else `FAULTLINE_LOG`, else WARNING; a bad name is a ValueError."""
    chosen = level if level is not None else os.environ.get(ENV_LEVEL) or DEFAULT_LEVEL
    if isinstance(chosen, int):
        return chosen
    value = logging.getLevelName(chosen.strip().upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {chosen!r} (use DEBUG, INFO, WARNING or ERROR)")
    return value


def configure(level: str | int | None = None, *, stream: TextIO | None = None, as_json: bool | None = None) -> None:
    """Send the `faultline` loggers to `stream` (default: the current stderr) at `level`; calling it again
    replaces the set-up."""
    if as_json is None:
        as_json = not (stream or sys.stderr).isatty()
    root = logging.getLogger("faultline")
    root.setLevel(resolve_level(level))
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if as_json else TextFormatter())
    root.addHandler(handler)
    root.propagate = False
