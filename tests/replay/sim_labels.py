"""The simulator's own mistake labels, read only by tests: to check what attribution finds against how the
simulator built a failure, and to scramble them, so that a test shows a component's result does not move.

No component of the runtime or the benchmarks reads these: a result drawn from them would be true by construction.
"""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import (
    AssistantTurn,
    Body,
    EpisodeCompleted,
    FaultApplied,
    Note,
    Recording,
    Tally,
    ToolCall,
    body_digest,
    encode,
)
from faultline.journal import JournalRow

SCRAMBLED: dict[str, Any] = {
    "category": "policy_violation",
    "step": 0,
    "intended": {"name": "respond", "arguments": {"outputs": []}},
    "made": {"name": "cancel_pending_order", "arguments": {"order_id": "#W0000000", "reason": "no longer needed"}},
}
"""A label no simulator made: `relabelled` puts it on every decision of the tool agent."""


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


def relabelled(rows: list[JournalRow], mistake: dict[str, Any] | None) -> list[JournalRow]:
    """The rows with every label the simulator keeps of its mistakes (its answers' `mistake`, the tallies, the
    completed event's `mistakes`) replaced: by `mistake` on every answer of the tool agent's model and in every
    tally, or, with None, removed. Nothing else changes, so a result that moves with it read the labels."""
    return [_relabelled(row, mistake) for row in rows]


def _relabelled(row: JournalRow, mistake: dict[str, Any] | None) -> JournalRow:
    body = row.envelope().body
    labels = [] if mistake is None else [mistake]
    new: Body | None = None
    if isinstance(body, Recording) and isinstance(body.response, dict) and row.sender == "tool":
        metadata = {k: v for k, v in (body.response.get("metadata") or {}).items() if k != "mistake"}
        metadata |= {} if mistake is None else {"mistake": mistake}
        new = msgspec.structs.replace(body, response={**body.response, "metadata": metadata})
    elif isinstance(body, Tally):
        new = msgspec.structs.replace(body, mistakes=labels)
    elif isinstance(body, Note) and body.text == "tally":
        new = msgspec.structs.replace(body, data={**body.data, "mistakes": labels})
    elif isinstance(body, EpisodeCompleted) and "mistakes" in body.details:
        new = msgspec.structs.replace(body, details={**body.details, "mistakes": labels})
    elif isinstance(body, FaultApplied):  # a fault on a tally holds it, as sent and as delivered
        original, results = (
            _tally_relabelled(body.original, labels),
            [_tally_relabelled(r, labels) for r in body.results],
        )
        new = msgspec.structs.replace(body, original=original, results=results)
    if new is None:
        return row
    return msgspec.structs.replace(row, body=encode(new), body_digest=body_digest(new))


def _tally_relabelled(message: dict[str, Any], labels: list[dict[str, Any]]) -> dict[str, Any]:
    body = message.get("body")
    if not (isinstance(body, dict) and body.get("kind") == "tally"):
        return message
    return {**message, "body": {**body, "mistakes": labels}}
