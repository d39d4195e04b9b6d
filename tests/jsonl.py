"""Reading a command's `--json`: JSON lines, each with a "type", the last one the summary."""

from __future__ import annotations

import json
from typing import Any


def read(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the rows, the summary) of one command's output; fails unless it has exactly the one shape."""
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines, "no output"
    assert all(isinstance(line, dict) and isinstance(line.get("type"), str) for line in lines), lines
    assert [line["type"] for line in lines].count("summary") == 1 and lines[-1]["type"] == "summary", lines
    return lines[:-1], lines[-1]
