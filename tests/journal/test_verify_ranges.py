"""Ranges of a journal are checked in parallel with the same verdict, and a check resumes after the last that held."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from faultline.core import UserTurn, encode
from faultline.journal import Journal, verify
from faultline.journal import _verify as verify_module
from faultline.journal._head import checkpoint_path, write_checkpoint

from .conftest import edit_as_attacker, episode_envelopes, incoming

Tamper = Callable[[str], Path]


@pytest.fixture
def ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split even the 18-row test journal: with three jobs, into ranges of one row each (eight a job, at most)."""
    monkeypatch.setattr(verify_module, "PARALLEL_ROWS", 1)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE messages SET sender = 'mallory' WHERE pos = 1",
        "UPDATE messages SET sender = 'mallory' WHERE pos = 6",
        "UPDATE messages SET sender = 'mallory' WHERE pos = 7",
        "UPDATE messages SET sender = 'mallory' WHERE pos = 18",
        "DELETE FROM messages WHERE pos = 6",
        "DELETE FROM messages WHERE pos = 7",
        "DELETE FROM messages WHERE pos = 18",
        "UPDATE messages SET pos = -1 WHERE pos = 13",
        "UPDATE messages SET sender = 'mallory' WHERE pos IN (8, 14)",
    ],
)
def test_ranges_checked_in_parallel_name_the_same_first_bad_row(ranges: None, tamper: Tamper, sql: str) -> None:
    path = tamper(sql)
    parallel, sequential = verify(path, jobs=3), verify(path)
    assert not sequential.ok
    assert parallel == sequential


def test_an_intact_journal_checked_in_parallel_reports_what_one_process_does(ranges: None, journal_file: Path) -> None:
    parallel = verify(journal_file, jobs=3)
    assert parallel.ok and parallel == verify(journal_file)


def append_episode(path: Path, episode: str, first_seq: int) -> None:
    with Journal.open(path) as journal:
        journal.append(incoming(episode_envelopes(episode), first_seq=first_seq))


def test_a_resumed_check_checks_only_the_rows_after_the_last_check_that_held(journal_file: Path) -> None:
    assert verify(journal_file).ok and checkpoint_path(journal_file).exists()
    append_episode(journal_file, "ep-c", 100)
    resumed = verify(journal_file, resume=True)
    assert (resumed.ok, resumed.rows, resumed.resumed_at) == (True, 27, 18)
    assert "rows up to 18 checked earlier" in resumed.summary()
    assert verify(journal_file, resume=True).resumed_at == 27


def test_a_resumed_check_finds_an_edit_after_the_checkpoint(journal_file: Path) -> None:
    verify(journal_file)
    append_episode(journal_file, "ep-c", 100)
    edit_as_attacker(journal_file, "UPDATE messages SET sender = 'mallory' WHERE pos = 20")
    assert verify(journal_file, resume=True).problem == "row 20: row digest mismatch (a column edited)"


def test_an_edit_before_the_checkpoint_is_left_to_the_full_check(journal_file: Path) -> None:
    """What the checkpoint trades: a body edited in place under it is found only by a full check."""
    verify(journal_file)
    edit_as_attacker(
        journal_file, f"UPDATE messages SET body = x'{encode(UserTurn(text='forged')).hex()}' WHERE pos = 2"
    )
    assert verify(journal_file, resume=True).ok
    assert verify(journal_file).problem == "row 2: body digest mismatch (body edited)"


def test_a_checkpoint_the_chain_no_longer_passes_through_is_ignored(journal_file: Path) -> None:
    write_checkpoint(journal_file, 9, "0" * 32)
    edit_as_attacker(journal_file, "UPDATE messages SET sender = 'mallory' WHERE pos = 3")
    report = verify(journal_file, resume=True)
    assert report.resumed_at == 0 and report.problem == "row 3: row digest mismatch (a column edited)"


def test_an_anchor_is_looked_for_in_every_row(journal_file: Path) -> None:
    with sqlite3.connect(journal_file) as conn:
        (anchor,) = conn.execute("SELECT chain FROM messages WHERE pos = 4").fetchone()
    verify(journal_file)
    report = verify(journal_file, anchor=anchor, resume=True)
    assert report.ok and report.anchor_pos == 4 and report.resumed_at == 0


def told_by(check: Callable[..., object], *args: object, **kwargs: object) -> list[tuple[int, int]]:
    told: list[tuple[int, int]] = []
    check(*args, progress=lambda done, total: told.append((done, total)), **kwargs)
    return told


def test_a_check_tells_how_far_it_got_in_one_process_and_in_several(
    ranges: None, journal_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify_module, "TOLD_EVERY", 5)
    assert told_by(verify, journal_file) == [(5, 18), (10, 18), (15, 18), (18, 18)]
    assert told_by(verify, journal_file, jobs=3) == [(n, 18) for n in range(1, 19)], "each range as it comes back"


def test_a_resumed_check_counts_the_checkpoint_s_rows_as_checked(journal_file: Path) -> None:
    verify(journal_file)
    append_episode(journal_file, "ep-c", 100)
    assert told_by(verify, journal_file, resume=True) == [(27, 27)]
