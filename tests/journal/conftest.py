"""Journals built from realistic episodes, and the attacker's tool: a copy with the triggers dropped."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from faultline.core import (
    AssistantTurn,
    DefenseFired,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    MessageBody,
    Recording,
    Subjects,
    ToolCall,
    ToolResult,
    UserTurn,
    derive_id,
)
from faultline.journal import Incoming, Journal
from faultline.journal._head import head_path

STREAM = "FL_JOURNAL@2026-01-01T00:00:00Z"


Outcome = Literal["success", "failure", "error", "timeout"]


def episode_envelopes(
    episode: str, *, outcome: Outcome = "success", t0: float = 1_767_225_600.0, run: str = ""
) -> list[Envelope]:
    """One small episode with every kind the views care about: 9 messages. Its start records `run`; with none, it
    is as journals had it before starts recorded their run."""
    root = f"{episode}-root"
    llm_response = {
        "content": "",
        "tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "A1"}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30},
        "model": "sim-1",
        "latency_s": 0.25,
    }
    bodies_and_routes: list[tuple[str, str, MessageBody]] = [
        ("env", "", EpisodeStarted(domain="retail", task="t7", trial=2, seed=11, roster=["verifier"], run=run)),
        ("user", "tool_agent", UserTurn(text="Where is my order A1?")),
        (
            "tool_agent",
            "",
            Recording(call="llm", index=0, request_digest="r0", request={"role": "main"}, response=llm_response),
        ),
        ("tool_agent", "env", ToolCall(call_id="c1", name="get_order", arguments={"order_id": "A1"})),
        ("injector", "", FaultApplied(rule_id="r1", fault="message_storm", original={"id": "x1"}, results=[{}, {}])),
        ("env", "tool_agent", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"})),
        ("tool_agent", "", DefenseFired(defense="dedup", agent="tool_agent", message_id="x1", reason="duplicate id")),
        ("tool_agent", "user", AssistantTurn(text="Your order A1 has shipped.", done=True)),
        (
            "env",
            "",
            EpisodeCompleted(outcome=outcome, reward=1.0 if outcome == "success" else 0.0, turns=2, tokens=150),
        ),
    ]
    envelopes = []
    for index, (sender, recipient, body) in enumerate(bodies_and_routes):
        envelopes.append(
            Envelope(
                id=derive_id(root, index),
                episode=episode,
                sender=sender,
                recipient=recipient,
                body=body,
                causation=root if index else "",
                hops=index,
                ts=t0 + index * 0.5,
            )
        )
    return envelopes


def incoming(envelopes: list[Envelope], *, stream: str = STREAM, first_seq: int = 1) -> list[Incoming]:
    subjects = Subjects()
    return [Incoming(stream, first_seq + i, subjects.for_envelope(env), env) for i, env in enumerate(envelopes)]


def two_episodes() -> list[Incoming]:
    """18 rows: episode ep-a succeeds (rows 1-9), ep-b fails (rows 10-18)."""
    return incoming(episode_envelopes("ep-a") + episode_envelopes("ep-b", outcome="failure", t0=1_767_225_700.0))


def two_episode_journal(path: Path) -> Path:
    """`path`, made a closed journal file holding `two_episodes()`."""
    with Journal.open(path) as journal:
        journal.append(two_episodes())
    return path


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    return two_episode_journal(tmp_path / "journal.db")


@pytest.fixture
def tamper(journal_file: Path, tmp_path: Path) -> Callable[[str], Path]:
    """Copy the journal and its head record, drop the triggers as an attacker would, run SQL on the copy."""

    def run(sql: str) -> Path:
        copy = tmp_path / "tampered.db"
        shutil.copy(journal_file, copy)
        shutil.copy(head_path(journal_file), head_path(copy))
        edit_as_attacker(copy, sql)
        return copy

    return run


def edit_as_attacker(path: Path, sql: str) -> None:
    """Drop the append-only triggers, as anyone with write access can, and run `sql` on the file."""
    conn = sqlite3.connect(path)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.executescript(sql)
    conn.commit()
    conn.close()
