"""The one shape of every command's `--json`: JSON lines, each object with a "type".

A command prints one object per result row (its "type" names what the row is: "episode",
"step", "rule" ...) and then one object of type "summary". Fields are the row's own,
at the top level, so `jq 'select(.type == "episode")'` reads them; docs/json.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode


def _fields(data: Any) -> Mapping[str, Any]:
    built = msgspec.to_builtins(data)
    if not isinstance(built, dict):
        raise TypeError(f"a JSON line is an object, not {type(built).__name__}")
    return built


def row(kind: str, data: Any) -> None:
    """Print one result row of type `kind` (a Struct or a mapping of its fields, none of them named "type")."""
    fields = _fields(data)
    if "type" in fields:
        raise ValueError(f"a {kind} row has a field named 'type' of its own")
    print(_encode({"type": kind, **fields}).decode())


def rows(kind: str, items: Iterable[Any]) -> None:
    for item in items:
        row(kind, item)


def summary(data: Any) -> None:
    """Print the last line, of type "summary"."""
    row("summary", data)
