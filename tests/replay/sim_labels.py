"""The simulator's own mistake labels, read only by tests, to check what attribution finds against them.

No component of the runtime reads these: a result drawn from them would be true by construction.
"""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import AssistantTurn, Recording, ToolCall
from faultline.journal import JournalRow


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """One model call of an agent, the action it led to, and the mistake the simulator drew for it."""

    index: int
    input_pos: int
    recording_pos: int
    action: dict[str, Any]
    mistake: dict[str, Any] | None = None


def decisions(rows: list[JournalRow], agent: str) -> list[Decision]:
    """The agent's model calls in order, each with the action it led to."""
    by_id = {r.id: r for r in rows}
    outputs: dict[str, list[JournalRow]] = {}
    for row in rows:
        if row.sender == agent and row.kind in ("tool_call", "assistant_turn"):
            outputs.setdefault(row.causation, []).append(row)
    found: list[Decision] = []
    for row in rows:
        if row.sender != agent or row.kind != "recording":
            continue
        rec = row.envelope().body
        assert isinstance(rec, Recording)
        if rec.call != "llm":
            continue
        source = by_id.get(row.causation)
        acted = outputs.get(row.causation, [])
        found.append(
            Decision(
                index=len(found) + 1,
                input_pos=source.pos if source else row.pos,
                recording_pos=row.pos,
                action=_action(acted[0]) if acted else {"name": "(nothing)"},
                mistake=(rec.response or {}).get("metadata", {}).get("mistake"),
            )
        )
    return found


def _action(row: JournalRow) -> dict[str, Any]:
    body = row.envelope().body
    if isinstance(body, ToolCall):
        return {"name": body.name, "arguments": body.arguments}
    assert isinstance(body, AssistantTurn)
    return {"name": "reply", "text": body.text}
