"""A send to an agent the system does not have, on NATS: the episode ends in error at once, the journal keeps the
error, replay and a fork reach it again, and a fault that reroutes a message afterwards is never taken for one."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.bus import EmbeddedServer
from faultline.core import ErrorRaised
from faultline.journal import JournalReader
from faultline.replay import Inject, Keep, Replayer, fork_episode
from faultline.runtime import Config, agent_lookup
from faultline.testing import run_system, scripted
from tests.core.test_recipients import Desk

CAUSE = (
    "UnknownRecipientError in triage: system help-desk has no agent 'mth' to send to: did you mean 'math'?"
    " (its agents: math, scorer, triage)"
)
INPUTS = [
    {"id": "typo", "desk": "mth", "question": "2 plus 3?"},
    {"id": "sum", "desk": "math", "question": "2 plus 3?"},
]


async def test_a_typo_of_a_recipient_ends_its_episode_in_error_at_once_and_replays_identically(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.sqlite"
    run = await run_system(
        Desk, INPUTS, nats_url=nats_server.url, journal=journal, models=scripted(lambda _r: ""), episode_timeout_s=60
    )
    assert (run.outcome("typo").outcome, run.outcome("typo").cause) == ("error", CAUSE)  # not a timeout, 60 s later
    assert run.outcome("sum").outcome == "success"
    messages = run.messages("typo")
    assert not [m for m in messages if m.recipient == "mth"]
    (error,) = [m.body for m in messages if isinstance(m.body, ErrorRaised)]
    assert (error.agent, error.error_type) == ("triage", "UnknownRecipientError")
    assert "ctx.send" in error.traceback  # at the line that sent it
    report = run.replay()
    assert report.identical and report.episodes == 2
    assert Replayer(agent_lookup(Config())).replay(journal).identical  # as `faultline replay` does, no system named


async def test_a_fork_of_the_episode_reaches_the_same_error(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    run = await run_system(Desk, INPUTS[:1], nats_url=nats_server.url, journal=journal, models=scripted(lambda _r: ""))
    episode = run.episode("typo")
    with JournalReader(journal) as reader:
        start = next(r for r in reader.episode_rows(episode) if r.recipient == "triage")
    result = await fork_episode(
        journal,
        episode,
        start.pos,
        Keep(),
        lookup=agent_lookup(Config()),
        backends=lambda _role: scripted(lambda _r: ""),
    )
    assert (result.outcome.outcome, result.outcome.cause) == ("error", CAUSE)
    assert Replayer(agent_lookup(Config())).replay(result.journal).identical


@pytest.mark.parametrize("fault", ["cycle", "broadcast"])
async def test_a_fault_that_reroutes_a_message_after_it_was_sent_is_no_unknown_recipient(
    nats_server: EmbeddedServer, tmp_path: Path, fault: str
) -> None:
    """A cycle sends the note back to triage, a broadcast to the scorer too: the runtime's doing, not triage's."""
    journal = tmp_path / "journal.sqlite"
    run = await run_system(Desk, INPUTS[1:], nats_url=nats_server.url, journal=journal, models=scripted(lambda _r: ""))
    episode = run.episode("sum")
    with JournalReader(journal) as reader:
        note = next(r for r in reader.episode_rows(episode) if r.sender == "triage" and r.recipient == "math")
    result = await fork_episode(
        journal,
        episode,
        note.pos,
        Inject(fault),
        lookup=agent_lookup(Config()),
        backends=lambda _role: scripted(lambda _r: ""),
    )
    assert result.outcome.outcome != "error", result.outcome.cause
    with JournalReader(result.journal) as reader:
        assert [r.kind for r in reader.episode_rows(result.episode) if r.kind == "fault_applied"] == ["fault_applied"]
    assert Replayer(agent_lookup(Config())).replay(result.journal).identical
