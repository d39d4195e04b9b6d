"""What the memory stores: one entry per finished episode, as MemToolAgent's (q, a, f, r)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call the agent made: the tool's name and the arguments it passed."""

    name: str
    arguments: dict[str, Any] = {}


class MemoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One past experience, retrievable by the similarity of its `query`.

    `feedback` is the user's binary verdict on the outcome (1 success, 0
    failure); `reflection` is the memory extractor's critique and is written
    only for failures. `tool_ratings` holds explicit per-tool ratings (0 or 1)
    from the user, used by hard preference guiding; when it is empty, an entry
    whose calls all used one tool rates that tool with `feedback`.

    `id` must be unique in a store; the memory service uses the episode id, so
    rebuilding from the journal never adds an episode twice. Schema evolution:
    new fields only, always with defaults.
    """

    id: str
    episode: str
    domain: str
    query: str
    feedback: Literal[0, 1]
    calls: list[ToolCallRecord] = []
    reflection: str = ""
    user: str = ""
    tool_ratings: dict[str, Literal[0, 1]] = {}


class ScoredEntry(msgspec.Struct, frozen=True, kw_only=True):
    """An entry and the cosine similarity of its query to the query searched for."""

    entry: MemoryEntry
    score: float
