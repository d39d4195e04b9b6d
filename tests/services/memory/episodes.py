"""Small synthetic episodes, shaped as the episode agents write them, for the memory service tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from faultline.core import (
    AssistantTurn,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    MessageBody,
    Note,
    Start,
    Subjects,
    ToolCall,
    ToolResult,
    UserTurn,
    derive_id,
)
from faultline.journal import Incoming, Journal

STREAM = "FL_JOURNAL@test"

Call = tuple[str, dict[str, Any], Any]
"""(tool name, arguments, output)"""


def mistake(
    step: int, category: str = "wrong_entity", made: str = "order #W1", intended: str = "order #W2"
) -> dict[str, Any]:
    return {"category": category, "step": step, "intended": intended, "made": made}


def episode(
    name: str,
    *,
    query: str,
    calls: Sequence[Call] = (),
    reward: float = 1.0,
    mistakes: Sequence[dict[str, Any]] = (),
    domain: str = "retail",
    outcome: str | None = None,
    user: str = "",
    ratings: dict[str, int] | None = None,
    late: bool = False,
    memory: dict[str, Any] | None = None,
) -> list[Envelope]:
    """Start, the user's turns, tool calls and results, the reply and the completed event.

    `ratings` makes it a preference task's episode, with the user's rating of each tool called.
    `late` adds a user turn after the completed event, which is not part of the episode.
    `memory` is the `[memory]` table its started event records.
    """
    envelopes: list[Envelope] = []

    def add(sender: str, body: MessageBody, recipient: str = "") -> None:
        envelopes.append(
            Envelope(
                id=derive_id(name, len(envelopes), "x"),
                episode=name,
                sender=sender,
                recipient=recipient,
                body=body,
                ts=1000.0 + len(envelopes),
            )
        )

    task = f"task-{name}"
    add("runner", EpisodeStarted(domain=domain, task=task, settings={} if memory is None else {"memory": memory}))
    for agent in ("env", "tool", "user"):
        add("runner", Start(data={"domain": domain, "task": task, "seed": 7}), agent)
    add("user", UserTurn(text=query), "tool")
    for i, (tool, arguments, output) in enumerate(calls):
        add("tool", ToolCall(call_id=f"call-{i}", name=tool, arguments=arguments), "env")
        add("env", ToolResult(call_id=f"call-{i}", name=tool, output=output), "tool")
    add("tool", Note(text="tally", data={"tokens": 10}), "env")
    add("tool", AssistantTurn(text="All done."), "user")
    add("user", UserTurn(text="Thanks, one more thing."), "tool")
    add("user", UserTurn(text="", done=True), "tool")
    details: dict[str, Any] = {"domain": domain, "task": task, "mistakes": list(mistakes)}
    if user:
        details["user"] = user
    if ratings is not None:
        details |= {"preference": True, "tool_ratings": ratings}
    final = outcome or ("success" if reward >= 1.0 else "failure")
    add("env", EpisodeCompleted(outcome=final, reward=reward, turns=2, details=details))  # type: ignore[arg-type]
    if late:
        add("user", UserTurn(text="a message after the end"), "tool")
    return envelopes


def sample_episodes() -> list[list[Envelope]]:
    """A mix: successes and failures in two domains, similar requests, and episodes that give no entry."""
    order = {"order_id": "#W1"}
    return [
        episode(
            "ep-1",
            query="Cancel my order #W1, it has not shipped yet",
            calls=[("get_order_details", order, {"status": "pending"}), ("cancel_pending_order", order, "ok")],
        ),
        episode(
            "ep-2",
            query="Please cancel order #W7 because I ordered it by mistake",
            reward=0.0,
            calls=[("cancel_pending_order", {"order_id": "#W1"}, "ok")],
            mistakes=[mistake(0)],
            late=True,
        ),
        episode(
            "ep-3",
            query="Change the shipping address of order #W3 to 12 Elm Street",
            calls=[("modify_pending_order_address", {"order_id": "#W3", "address": "12 Elm Street"}, "ok")],
        ),
        episode(
            "ep-4",
            query="Cancel my pending order #W9",
            reward=0.0,
            calls=[("get_order_details", {"order_id": "#W9"}, {"status": "pending"})],
            mistakes=[mistake(1, "early_stop", made="nothing", intended="cancel_pending_order(#W9)")],
        ),
        episode(
            "ep-5",
            query="Suspend my phone line 555-0101 while I travel",
            domain="phone",
            calls=[("suspend_line", {"line": "555-0101"}, "ok")],
        ),
        episode("ep-6", query="Cancel the order I placed yesterday", outcome="error", reward=0.0),
        episode(
            "ep-7",
            query="Exchange the blue shirt in order #W2 for a red one",
            reward=0.5,
            calls=[("exchange_delivered_order_items", {"order_id": "#W2"}, "ok")],
            mistakes=[mistake(0, "wrong_value")],
        ),
        episode(
            "ep-8",
            query="Resume my phone line 555-0101, I am back",
            domain="phone",
            reward=0.0,
            calls=[("resume_line", {"line": "555-0199"}, "ok")],
            mistakes=[mistake(0, "wrong_entity", "555-0199", "555-0101")],
        ),
    ]


def write_journal(path: Path, episodes: Iterable[list[Envelope]]) -> int:
    """A journal file holding `episodes` one after another, as the journal service would write them."""
    subjects = Subjects()
    rows = [env for envs in episodes for env in envs]
    with Journal.open(path) as journal:
        journal.append(Incoming(STREAM, seq, subjects.for_envelope(env), env) for seq, env in enumerate(rows, start=1))
    return len(rows)
