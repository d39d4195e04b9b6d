"""Hard preference guiding: tools the user rated 0 are taken out of the agent's tool list."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from faultline.agents.memory import MemoryEntry, tool_name

MIN_ZERO_RATINGS = 1
"""The paper's rule: any 0 rating removes the tool (MemToolAgent, Section 4.3.3). `[memory]
zero_ratings = 2` is Faultline's stricter option, which waits for the pattern to recur, as the
paper's preference extractor does, since a single 0 can be a wrong parameter, not a wrong tool."""


def tool_ratings(entry: MemoryEntry) -> dict[str, int]:
    """The ratings an entry gives to tools.

    Explicit `entry.tool_ratings` win. Without them, an entry whose calls all
    used one tool rates that tool with the entry's feedback (one instruction,
    one call, one rating, as in PEToolBench's histories); an entry with several
    different tools rates none, since a failed outcome does not say which
    tool the user disliked.
    """
    if entry.tool_ratings:
        return dict(entry.tool_ratings)
    names = {call.name for call in entry.calls}
    if len(names) == 1:
        return {names.pop(): entry.feedback}
    return {}


def hidden_tools(entries: Iterable[MemoryEntry], *, min_zero_ratings: int = MIN_ZERO_RATINGS) -> set[str]:
    """Names of tools rated 0 in at least `min_zero_ratings` entries (default: one, as in the paper).

    Positive ratings do not cancel negative ones: the paper removes tools with
    a 0 rating outright. `min_zero_ratings=2` hides only a tool whose 0 recurs.
    """
    zeros: Counter[str] = Counter()
    for entry in entries:
        for name, rating in tool_ratings(entry).items():
            if rating == 0:
                zeros[name] += 1
    return {name for name, count in zeros.items() if count >= min_zero_ratings}


def filter_tools(
    tools: Iterable[Mapping[str, Any]],
    entries: Iterable[MemoryEntry],
    *,
    min_zero_ratings: int = MIN_ZERO_RATINGS,
) -> list[Mapping[str, Any]]:
    """`tools` without those the user's `entries` rule out (see `hidden_tools`), order kept."""
    hidden = hidden_tools(entries, min_zero_ratings=min_zero_ratings)
    return [schema for schema in tools if tool_name(schema) not in hidden]
