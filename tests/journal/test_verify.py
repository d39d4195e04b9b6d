"""Verify names the first bad row and why, whatever an attacker with the triggers dropped did."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ChainError, JournalError
from faultline.core import UserTurn, digest, encode
from faultline.journal import GENESIS, Journal, JournalReader, verify
from faultline.journal._head import HeadRecord, head_path

from .conftest import episode_envelopes, incoming

Tamper = Callable[[str], Path]


def test_an_intact_journal_verifies(journal_file: Path) -> None:
    report = verify(journal_file)
    assert report.ok
    assert report.rows == 18
    assert report.summary().startswith("ok: 18 rows, chain holds, head ")
    assert report.recorded_rows == 18
    report.raise_if_broken()


def test_an_empty_journal_verifies(tmp_path: Path) -> None:
    Journal.open(tmp_path / "j.db").close()
    report = verify(tmp_path / "j.db")
    assert (report.ok, report.rows, report.head) == (True, 0, GENESIS)


def test_an_edited_body_is_found_at_its_row(tamper: Tamper) -> None:
    forged = encode(UserTurn(text="Cancel my order A1.")).hex()
    report = verify(tamper(f"UPDATE messages SET body = x'{forged}' WHERE pos = 11"))
    assert report.problem == "row 11: body digest mismatch (body edited)"
    assert (report.position, report.rows) == (11, 10)
    with pytest.raises(ChainError, match="row 11: body digest mismatch") as raised:
        report.raise_if_broken()
    assert raised.value.position == 11


def test_a_body_edited_with_its_digest_recomputed_is_found_by_the_row_digest(tamper: Tamper) -> None:
    forged = encode(UserTurn(text="Cancel my order A1."))
    sql = f"UPDATE messages SET body = x'{forged.hex()}', body_digest = '{digest(forged)}' WHERE pos = 11"
    assert verify(tamper(sql)).problem == "row 11: row digest mismatch (a column edited)"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE messages SET sender = 'mallory' WHERE pos = 4",
        "UPDATE messages SET ts = ts + 1 WHERE pos = 4",
        "UPDATE messages SET stream_seq = 400 WHERE pos = 4",
        "UPDATE messages SET hops = 0 WHERE pos = 4",
    ],
)
def test_an_edited_column_is_found_at_its_row(tamper: Tamper, sql: str) -> None:
    assert verify(tamper(sql)).problem == "row 4: row digest mismatch (a column edited)"


def test_a_deleted_row_is_a_gap(tamper: Tamper) -> None:
    report = verify(tamper("DELETE FROM messages WHERE pos = 16"))
    assert report.problem == "gap: position 16 missing"
    assert report.position == 16


def test_a_deleted_row_with_positions_renumbered_breaks_the_chain_there(tamper: Tamper) -> None:
    renumber = "".join(f"UPDATE messages SET pos = {pos - 1} WHERE pos = {pos};" for pos in range(17, 19))
    report = verify(tamper("DELETE FROM messages WHERE pos = 16;" + renumber))
    assert report.problem == "row 16: chain mismatch (row removed or reordered before it)"


def test_two_swapped_rows_are_found_at_the_first(tamper: Tamper) -> None:
    swap = (
        "UPDATE messages SET pos = -5 WHERE pos = 5;"
        "UPDATE messages SET pos = 5 WHERE pos = 6;"
        "UPDATE messages SET pos = 6 WHERE pos = -5;"
    )
    report = verify(tamper(swap))
    assert report.problem == "row 5: chain mismatch (row removed or reordered before it)"
    assert report.rows == 4


def test_an_edited_chain_value_is_found_at_its_row(tamper: Tamper) -> None:
    report = verify(tamper(f"UPDATE messages SET chain = '{'f' * 32}' WHERE pos = 7"))
    assert report.problem == "row 7: chain mismatch (row removed or reordered before it)"


def test_edited_facts_are_found_even_though_they_are_not_digested(tamper: Tamper) -> None:
    report = verify(tamper("UPDATE messages SET facts = json_set(facts, '$.reward', 1.0) WHERE pos = 18"))
    assert report.problem == "row 18: facts do not match the body (derived column edited)"


def test_a_journal_cut_at_the_end_is_found_by_its_head_record(journal_file: Path, tamper: Tamper) -> None:
    head = verify(journal_file).head
    report = verify(tamper("DELETE FROM messages WHERE pos > 16"))
    assert report.problem == (f"tail cut: the head record names 18 rows ending in chain {head}, the journal holds 16")
    assert (report.position, report.rows) == (17, 16)


def test_a_cut_whose_head_record_is_deleted_too_is_found_only_by_an_anchor(journal_file: Path, tamper: Tamper) -> None:
    head = verify(journal_file).head
    cut = tamper("DELETE FROM messages WHERE pos = 18")
    head_path(cut).unlink()
    report = verify(cut)
    assert report.ok and report.recorded_rows is None
    assert report.summary().endswith("; no head record (tampered.db.head): the end is unchecked, pass --anchor")
    report = verify(cut, anchor=head)
    assert not report.ok
    assert report.problem.startswith(f"anchor {head} not in the chain")


def test_a_head_record_the_chain_does_not_pass_through_is_named_at_its_row(journal_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with Journal.open(other) as journal:
        journal.append(incoming(episode_envelopes("ep-c")))
        foreign = journal.head
    shutil.copy(head_path(other), head_path(journal_file))
    report = verify(journal_file)
    assert report.position == 9
    assert report.problem == (
        f"row 9: chain {_chain_at(journal_file, 9)} is not the recorded head {foreign}"
        " (rows rewritten up to there, or the head record belongs to another journal)"
    )


def test_a_head_record_behind_the_journal_still_verifies(journal_file: Path) -> None:
    """A writer stopped between its commit and its record leaves the record one batch behind."""
    head_path(journal_file).write_bytes(msgspec.json.encode(HeadRecord(rows=9, head=_chain_at(journal_file, 9))))
    report = verify(journal_file)
    assert report.ok and report.recorded_rows == 9
    assert report.summary().endswith("; head record (9 rows) reached, so nothing was cut from the end")


def test_a_head_record_that_is_not_one_is_a_journal_error(journal_file: Path) -> None:
    head_path(journal_file).write_text("18 rows")
    with pytest.raises(JournalError, match=r"journal\.db\.head: not a journal head record .*remove it"):
        verify(journal_file)


def _chain_at(path: Path, pos: int) -> str:
    with JournalReader(path) as reader:
        return reader.row(pos).chain


def test_an_anchor_from_earlier_is_still_found_after_appends(journal_file: Path) -> None:
    with Journal.open(journal_file) as journal:
        head = journal.head
        journal.append(incoming(episode_envelopes("ep-c"), first_seq=19))
    report = verify(journal_file, anchor=head)
    assert report.ok and report.anchor_pos == 18 and report.rows == 27
    assert "anchor found at row 18" in report.summary()


def test_verifying_a_missing_file_is_a_journal_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="no such journal file"):
        verify(tmp_path / "absent.db")
