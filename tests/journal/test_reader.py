"""Reading back: rows rebuild their envelopes, scans by position and episode, derived views."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from faultline._errors import JournalError
from faultline.journal import Journal, JournalReader, JournalRow

from .conftest import episode_envelopes, incoming, two_episodes


def test_rows_rebuild_the_envelopes_that_were_appended(journal_file: Path) -> None:
    with JournalReader(journal_file) as reader:
        rows = list(reader.rows())
        assert reader.last_pos == 18
        assert reader.head == rows[-1].chain
    assert [row.envelope() for row in rows] == [item.envelope for item in two_episodes()]
    assert all(isinstance(row, JournalRow) for row in rows)
    assert rows[2].kind == "recording" and rows[2].subject == "fl.rec.ep-a.tool_agent"


def test_scans_from_a_position_and_up_to_one(journal_file: Path) -> None:
    with JournalReader(journal_file) as reader:
        assert [row.pos for row in reader.rows(16)] == [16, 17, 18]
        assert [row.pos for row in reader.rows(3, 6)] == [3, 4, 5]
        assert [row.pos for row in reader.tail(4)] == [15, 16, 17, 18]
        assert reader.row(7).pos == 7
        with pytest.raises(JournalError, match="no row at position 99"):
            reader.row(99)


def test_episode_scans_return_only_that_episode_in_order(tmp_path: Path) -> None:
    a, b = episode_envelopes("ep-a"), episode_envelopes("ep-b")
    interleaved = [env for pair in zip(a, b, strict=True) for env in pair]
    with Journal.open(tmp_path / "j.db") as journal:
        journal.append(incoming(interleaved))
    with JournalReader(tmp_path / "j.db") as reader:
        assert [row.envelope() for row in reader.episode_rows("ep-b")] == b
        assert [row.pos for row in reader.episode_rows("ep-a", start=10)] == [11, 13, 15, 17]
        groups = list(reader.by_episode())
        assert [(name, [row.envelope() for row in rows]) for name, rows in groups] == [("ep-a", a), ("ep-b", b)]
        assert [name for name, _ in reader.by_episode(["ep-b"])] == ["ep-b"]
        assert reader.has_episode("ep-a") and reader.has_episode("ep-b")
        assert not reader.has_episode("ep-c")


def test_episodes_list_outcome_reward_and_counts(journal_file: Path) -> None:
    with JournalReader(journal_file) as reader:
        episodes = reader.episodes()
        assert reader.episode("nope") is None
    assert [(e.episode, e.outcome, e.reward) for e in episodes] == [("ep-a", "success", 1.0), ("ep-b", "failure", 0.0)]
    a = episodes[0]
    assert (a.started_pos, a.completed_pos, a.domain, a.task, a.trial) == (1, 9, "retail", "t7", 2)
    assert (a.turns, a.tokens, a.messages, a.tool_calls, a.faults, a.defenses, a.errors) == (2, 150, 9, 1, 1, 1, 0)
    assert a.duration_s == 4.0


def test_an_episode_without_a_completed_event_has_no_outcome(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as journal:
        journal.append(incoming(episode_envelopes("ep-a")[:4]))
    with JournalReader(tmp_path / "j.db") as reader:
        (summary,) = reader.episodes()
    assert (summary.outcome, summary.reward, summary.messages) == (None, None, 4)


def test_fault_defense_and_cost_views_read_from_the_bodies(journal_file: Path) -> None:
    conn = sqlite3.connect(journal_file)
    faults = conn.execute("SELECT pos, episode, rule_id, fault, original_id, results FROM faults").fetchall()
    defenses = conn.execute("SELECT episode, defense, agent, message_id FROM defenses").fetchall()
    costs = conn.execute(
        "SELECT episode, agent, model, calls, prompt_tokens, completion_tokens, total_tokens, latency_s FROM costs"
    ).fetchall()
    conn.close()
    assert faults == [(5, "ep-a", "r1", "message_storm", "x1", 2), (14, "ep-b", "r1", "message_storm", "x1", 2)]
    assert defenses == [("ep-a", "dedup", "tool_agent", "x1"), ("ep-b", "dedup", "tool_agent", "x1")]
    assert costs == [
        ("ep-a", "tool_agent", "sim-1", 1, 120, 30, 150, 0.25),
        ("ep-b", "tool_agent", "sim-1", 1, 120, 30, 150, 0.25),
    ]


def test_a_reader_sees_rows_the_writer_appends_while_it_is_open(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append(incoming(episode_envelopes("ep-a")))
        with JournalReader(path) as reader:
            assert reader.last_pos == 9
            journal.append(incoming(episode_envelopes("ep-b"), first_seq=10))
            assert [row.pos for row in reader.rows(9)] == list(range(9, 19))


def test_the_reader_cannot_write(journal_file: Path) -> None:
    with JournalReader(journal_file) as reader, pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._files[0]._conn.execute("INSERT INTO meta VALUES ('k', 'v')")
