"""Two episodes side by side: their messages aligned, the first difference found, what differs shown.

An episode and its fork, two trials of one task, or one task under two configurations:
the question is where they part ways and what each agent did differently afterwards.
Messages are compared by what they say (who to whom, the kind, the body), never by
id, time or journal position, which always differ. Model recordings are compared by
their answer only (timing and token counts differ from run to run), completions
without their latency, and calls of `now` and `random` not at all.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import msgspec

from faultline.core import EpisodeCompleted, EpisodeStarted, ErrorRaised, MessageBody, Recording
from faultline.journal._describe import DESCRIBE_WIDTH, describe_body
from faultline.journal._rows import JournalRow

SKIPPED = frozenset({"no_output", "tally", "control", "episode_started"})
"""Kinds that say nothing about what the agents did (evidence, bookkeeping, the fork's own marker)."""

Side = Literal["same", "changed", "only_a", "only_b"]


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One aligned place: a message of A, of B, or of both."""

    status: Side
    a_pos: int = 0
    b_pos: int = 0
    sender: str = ""
    to: str = ""
    kind: str = ""
    a: str = ""
    b: str = ""


class EpisodeDiff(msgspec.Struct, kw_only=True):
    """The alignment of two episodes and where they first differ (0 when they do not)."""

    a: str
    b: str
    steps: list[Step]
    first_difference: int = 0
    """Index in `steps` (from 1) of the first step that is not the same; 0 when none is."""
    a_outcome: str = ""
    b_outcome: str = ""

    @property
    def identical(self) -> bool:
        return self.first_difference == 0


def _essence(body: MessageBody) -> Any:
    """What a message says, for comparison: its body without what differs from run to run anyway."""
    if isinstance(body, Recording):
        if body.call in ("now", "random"):
            return body.call
        response = body.response
        if body.call == "llm" and isinstance(response, dict):
            response = {key: response.get(key) for key in ("content", "tool_calls")}
        return {"call": body.call, "response": msgspec.to_builtins(response), "error": body.error}
    data = msgspec.to_builtins(body)
    if isinstance(body, ErrorRaised):
        data.pop("traceback", None)
    if isinstance(body, EpisodeCompleted):
        data.pop("latency_s", None)
    return data


_Message = tuple[JournalRow, MessageBody, str]
"""A row, its body, and its slot: who sent it to whom, and its kind."""


def _messages(rows: list[JournalRow]) -> list[_Message]:
    out = []
    for row in rows:
        if row.kind in SKIPPED:
            continue
        body = row.decoded_body()
        out.append((row, body, msgspec.json.encode([row.sender, row.recipient or row.topic, row.kind]).decode()))
    return out


def diff_episodes(
    a_name: str, a_rows: list[JournalRow], b_name: str, b_rows: list[JournalRow], *, width: int = DESCRIBE_WIDTH
) -> EpisodeDiff:
    """Align two episodes' messages (rows in position order) and find where they first differ.

    Each step describes its messages in one line of at most `width` characters.
    """
    a, b = _messages(a_rows), _messages(b_rows)
    a_keys = [key + msgspec.json.encode(_essence(body)).decode() for row, body, key in a]
    b_keys = [key + msgspec.json.encode(_essence(body)).decode() for row, body, key in b]
    steps: list[Step] = []

    def step(status: Side, left: _Message | None, right: _Message | None) -> None:
        row = left[0] if left else right[0]  # type: ignore[index]
        steps.append(
            Step(
                status=status,
                a_pos=left[0].pos if left else 0,
                b_pos=right[0].pos if right else 0,
                sender=row.sender,
                to=row.recipient or row.topic,
                kind=row.kind,
                a=describe_body(left[1], width) if left else "",
                b=describe_body(right[1], width) if right else "",
            )
        )

    matcher = difflib.SequenceMatcher(a=a_keys, b=b_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            left = a[i1 + k] if i1 + k < i2 else None
            right = b[j1 + k] if j1 + k < j2 else None
            if tag == "equal":
                step("same", left, right)
            elif left and right and left[2] == right[2]:  # the same message slot, saying something else
                step("changed", left, right)
            else:
                if left:
                    step("only_a", left, None)
                if right:
                    step("only_b", None, right)
    first = next((i for i, s in enumerate(steps, start=1) if s.status != "same"), 0)
    return EpisodeDiff(
        a=a_name,
        b=b_name,
        steps=steps,
        first_difference=first,
        a_outcome=_outcome(a_rows),
        b_outcome=_outcome(b_rows),
    )


def _outcome(rows: list[JournalRow]) -> str:
    for row in reversed(rows):
        if row.kind == "episode_completed":
            body = row.decoded_body()
            return describe_body(body)
    return "not completed"


def forked_from(rows: list[JournalRow]) -> str:
    """The episode a fork was made from, or "" for an episode that is not a fork."""
    for row in rows:
        if row.kind == "episode_started":
            body = row.decoded_body()
            return body.forked_from if isinstance(body, EpisodeStarted) else ""
    return ""
