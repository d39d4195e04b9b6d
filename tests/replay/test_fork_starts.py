"""A fork delivers every message the runner sent after its position, and makes every agent its live part reaches."""

from __future__ import annotations

from pathlib import Path

from faultline.bus import EmbeddedServer
from faultline.journal import JournalReader, JournalRow
from faultline.replay import Inject, Keep, UndoFault, fork_episode
from faultline.runtime import Config, agent_lookup
from faultline.testing import run_system, scripted
from tests.core.test_recipients import Desk

LOOKUP = agent_lookup(Config())
MODELS = scripted(lambda _r: "")
SUM = [{"id": "sum", "desk": "math", "question": "2 plus 3?"}]


def rows_of(journal: Path | str, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.episode_rows(episode))


async def test_a_fork_at_the_entrys_start_still_starts_the_scorer(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """The runner starts the entry, then the scorer. A fork at the entry's Start copied nothing after it, so the
    scorer never had its record and the fork of a success stalled when the finisher finished."""
    journal = tmp_path / "journal.sqlite"
    run = await run_system(Desk, SUM, nats_url=nats_server.url, journal=journal, models=MODELS)
    episode = run.episode("sum")
    assert run.outcome("sum").outcome == "success"
    rows = rows_of(journal, episode)
    entry = next(r for r in rows if r.kind == "start" and r.recipient == "triage")
    assert any(r.kind == "start" and r.recipient == "scorer" and r.pos > entry.pos for r in rows)
    result = await fork_episode(journal, episode, entry.pos, Keep(), lookup=LOOKUP, backends=lambda _role: MODELS)
    assert (result.outcome.outcome, result.outcome.cause) == ("success", "")


async def test_undoing_a_fault_delivers_to_an_agent_the_episode_never_reached(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A cycle sent triage's note back to triage, so `math` took no part in that episode. Undoing the cycle delivers
    the note to math: the fork had no instance of it and stalled with the note undelivered."""
    journal = tmp_path / "journal.sqlite"
    run = await run_system(Desk, SUM, nats_url=nats_server.url, journal=journal, models=MODELS)
    episode = run.episode("sum")
    note = next(r for r in rows_of(journal, episode) if r.sender == "triage" and r.recipient == "math")
    cycled = await fork_episode(
        journal, episode, note.pos, Inject("cycle"), lookup=LOOKUP, backends=lambda _role: MODELS
    )
    rows = rows_of(cycled.journal, cycled.episode)
    assert cycled.outcome.outcome != "success"
    assert "math" not in {r.sender for r in rows} | {r.recipient for r in rows}
    fault = next(r for r in rows if r.kind == "fault_applied")
    undone = await fork_episode(
        cycled.journal, cycled.episode, fault.pos, UndoFault(), lookup=LOOKUP, backends=lambda _role: MODELS
    )
    assert (undone.outcome.outcome, undone.outcome.cause) == ("success", "")
