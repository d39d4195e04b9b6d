"""Verify names the first bad row and why, whatever an attacker with the triggers dropped did."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from faultline._errors import ChainError, JournalError
from faultline.bus import UserTurn, digest, encode
from faultline.journal import GENESIS, Journal, verify

from .conftest import episode_envelopes, incoming

Tamper = Callable[[str], Path]


def test_an_intact_journal_verifies(journal_file: Path) -> None:
    report = verify(journal_file)
    assert report.ok
    assert report.rows == 18
    assert report.summary().startswith("ok: 18 rows, chain holds, head ")
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


def test_a_journal_cut_short_is_caught_by_an_anchor(journal_file: Path, tamper: Tamper) -> None:
    head = verify(journal_file).head
    cut = tamper("DELETE FROM messages WHERE pos = 18")
    assert verify(cut).ok
    report = verify(cut, anchor=head)
    assert not report.ok
    assert report.problem.startswith(f"anchor {head} not in the chain")


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
