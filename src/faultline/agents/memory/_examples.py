"""How retrieved entries read in the tool agent's system prompt (and in the memory extractor's request)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from faultline.agents.memory._entry import MemoryEntry, ScoredEntry, ToolCallRecord

RATING_RANKER = "rating"
"""`[memory] ranker` value for the paper's simple ranker: examples grouped by the user's rating.
The default, "similarity", lists them most similar first."""

_EXAMPLES_INTRO = """\
Past requests similar to the current one follow, with the tool calls that were \
made and whether the user was satisfied. A successful example shows calls that \
worked. For an example marked unsuccessful, read its critique, work out what went \
wrong, and do not repeat that mistake in the current task."""


def format_examples(entries: Sequence[MemoryEntry | ScoredEntry], *, split_by_feedback: bool = False) -> str:
    """The block the tool agent's system prompt gets: retrieved entries as in-context examples.

    `split_by_feedback` lists satisfied and unsatisfied requests under separate
    headings (the paper's simple ranker for preference tasks). Empty input
    gives an empty string, so callers can append it unconditionally.
    """
    plain = [e.entry if isinstance(e, ScoredEntry) else e for e in entries]
    if not plain:
        return ""
    if not split_by_feedback:
        return f"{_EXAMPLES_INTRO}\n\n{format_entries(plain)}"
    good = [e for e in plain if e.feedback == 1]
    bad = [e for e in plain if e.feedback == 0]
    sections = [_EXAMPLES_INTRO]
    if good:
        sections.append("### Requests the user was satisfied with\n" + format_entries(good))
    if bad:
        sections.append("### Requests the user was not satisfied with\n" + format_entries(bad))
    return "\n\n".join(sections)


def format_entries(entries: Sequence[MemoryEntry]) -> str:
    """Entries numbered from 1, each with its request, calls, outcome and critique."""
    return "\n\n".join(_format_entry(i, e) for i, e in enumerate(entries, start=1))


def _format_entry(number: int, entry: MemoryEntry) -> str:
    lines = [
        f"Example {number}",
        f"Request: {entry.query}",
        "Tool calls: " + (json_text([call_data(c) for c in entry.calls]) if entry.calls else "none"),
        f"Outcome: {verdict(entry.feedback)}",
    ]
    if entry.reflection:
        lines.append(f"Critique: {entry.reflection}")
    return "\n".join(lines)


def call_data(call: ToolCallRecord) -> dict[str, Any]:
    """A call as models read it in examples and critiques: its name and arguments."""
    return {"name": call.name, "arguments": call.arguments}


def verdict(feedback: int) -> str:
    """How an example's binary feedback reads in a prompt."""
    return "successful" if feedback == 1 else "unsuccessful"


def json_text(value: Any) -> str:
    """Compact JSON with sorted keys, so the same value always reads the same."""
    return msgspec.json.encode(value, order="deterministic").decode()
