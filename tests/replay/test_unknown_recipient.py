"""A send to an agent the system does not have, on NATS: the episode ends in error at once, the journal keeps the
error, replay and a fork reach it again, and a fault that reroutes a message afterwards is never taken for one.
Replay and a fork hold an agent to whom its worker held it, however its episode was started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from faultline.agents import Scorer
from faultline.api import replay, wait_for_journal
from faultline.bus import Bus, EmbeddedServer
from faultline.core import SCORER, EpisodeStarted, ErrorRaised, Start
from faultline.journal import JournalReader
from faultline.replay import Inject, Keep, Replayer, fork_episode
from faultline.runtime import (
    Completions,
    Config,
    JournalService,
    Worker,
    WorkerSettings,
    agent_lookup,
    parse_config,
    start_episode,
)
from faultline.testing import run_system, scripted
from tests.core.test_recipients import Desk, path

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


DESK = path(Desk)
TYPO = {"desk": "mth", "question": "2 plus 3?"}


@asynccontextmanager
async def desk_worker(url: str, journal: Path, system: str) -> AsyncIterator[Bus]:
    """The help desk's agents and the scorer on a worker of a configuration whose system is `system` ("": none),
    beside a journal service; on the way out the journal holds all the stream does."""
    bus = await Bus.connect(url)
    try:
        await bus.ensure_stream()
        journal_service = JournalService(bus, journal, completers=(SCORER,))
        settings = WorkerSettings(system=system)
        worker = Worker(bus, [*Desk.agents, Scorer], backends=lambda _role: scripted(lambda _r: ""), settings=settings)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(journal_service.run)
            tasks.start_soon(worker.run)
            await journal_service.wait_ready()
            await worker.wait_ready()
            try:
                yield bus
                await wait_for_journal(bus)
            finally:
                worker.stop()
                journal_service.stop()
    finally:
        await bus.close()


def start_position(journal: Path, episode: str) -> int:
    with JournalReader(journal) as reader:
        return next(r.pos for r in reader.episode_rows(episode) if r.recipient == "triage")


async def test_an_episode_started_by_hand_is_held_to_its_workers_system_in_replay_and_in_a_fork(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A start published by hand names no system (as one sent to the workers of a `faultline up`): its workers
    hold triage to the system of their configuration, and a replay and a fork with that configuration do too."""
    journal = tmp_path / "journal.sqlite"
    async with desk_worker(nats_server.url, journal, DESK) as bus, Completions(bus, (SCORER,)) as completions:
        await start_episode(bus, "by-hand", "triage", EpisodeStarted(), Start(data=TYPO))
        with anyio.fail_after(30):
            done = await completions.wait(["by-hand"])
    assert (done["by-hand"].outcome, done["by-hand"].cause) == ("error", CAUSE)
    config = parse_config({"system": {"class": DESK}})  # the workers'
    report = replay(journal, config=config)
    assert report.identical, report.divergences
    result = await fork_episode(
        journal,
        "by-hand",
        start_position(journal, "by-hand"),
        Keep(),
        lookup=agent_lookup(config),
        backends=lambda _role: scripted(lambda _r: ""),
        system=config.system.class_,
    )
    assert (result.outcome.outcome, result.outcome.cause) == ("error", CAUSE)
    assert replay(result.journal, config=config).identical


async def test_an_agent_its_worker_held_to_no_system_sends_anywhere_in_replay_and_in_a_fork(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A worker built without a system lets triage's typo by, though the episode's start names the system: the
    journal shows it, and replay and a fork let it by as well, where they would have raised."""
    journal = tmp_path / "journal.sqlite"
    async with desk_worker(nats_server.url, journal, "") as bus:
        sent = await bus.subscribe(bus.subjects.direct("loose", "mth"))
        await start_episode(bus, "loose", "triage", EpisodeStarted(system=DESK), Start(data=TYPO))
        with anyio.fail_after(30):
            async for _ in sent:
                break
    with JournalReader(journal) as reader:
        assert [r.kind for r in reader.episode_rows("loose") if r.sender == "triage"] == ["note"]
    lookup = agent_lookup(Config())
    report = Replayer(lookup).replay(journal)
    assert report.identical, report.divergences
    result = await fork_episode(
        journal,
        "loose",
        start_position(journal, "loose"),
        Keep(),
        lookup=lookup,
        backends=lambda _r: scripted(lambda _q: ""),
    )
    assert (result.outcome.outcome, result.outcome.cause) == ("failure", "stalled: no message in flight after the fork")
    with JournalReader(result.journal) as reader:
        assert [r.sender for r in reader.episode_rows(result.episode) if r.recipient == "mth"] == ["triage"]
    assert Replayer(lookup).replay(result.journal).identical
