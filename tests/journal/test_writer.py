"""The writer appends in order, chains every row, never duplicates, and the database refuses rewrites."""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultline._errors import JournalError
from faultline.core import Envelope, Note, digest, encode
from faultline.journal import GENESIS, Incoming, Journal, JournalReader, JournalSettings, verify
from faultline.journal._head import head_path
from faultline.journal._rows import chain_next, row_digest
from faultline.journal._schema import COLUMNS, DIGESTED

from .conftest import STREAM, episode_envelopes, incoming, two_episodes


def notes(count: int, *, first_seq: int = 1, stream: str = STREAM) -> list[Incoming]:
    envs = [
        Envelope(id=f"n{first_seq + i}", episode="ep", sender="a", recipient="b", body=Note(text=str(first_seq + i)))
        for i in range(count)
    ]
    return incoming(envs, stream=stream, first_seq=first_seq)


def positions_and_seqs(path: Path) -> list[tuple[int, int]]:
    with JournalReader(path) as reader:
        return [(row.pos, row.stream_seq) for row in reader.rows()]


def test_rows_are_appended_in_order_with_contiguous_positions_and_a_valid_chain(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    batch = two_episodes()
    with Journal.open(path) as journal:
        assert journal.last_pos == 0 and journal.head == GENESIS
        assert journal.append(batch[:5]) == 5
        assert journal.append(batch[5:]) == 13
        head = journal.head
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [row.pos for row in rows] == list(range(1, 19))
    assert [row.envelope() for row in rows] == [item.envelope for item in batch]
    assert [row.subject for row in rows] == [item.subject for item in batch]
    chain = GENESIS
    for row in rows:
        assert row.body_digest == digest(row.body) == digest(encode(row.envelope().body))
        chain = chain_next(chain, row_digest([getattr(row, name) for name in COLUMNS[:DIGESTED]]))
        assert row.chain == chain
    assert chain == head
    report = verify(path)
    assert report.ok and report.rows == 18 and report.head == head


def test_the_chain_continues_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append(notes(3))
        head = journal.head
    with Journal.open(path) as journal:
        assert (journal.last_pos, journal.head) == (3, head)
        journal.append(notes(2, first_seq=4))
    assert verify(path).rows == 5


def test_a_redelivered_batch_adds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        assert journal.append(notes(10)) == 10
        head = journal.head
        assert journal.append(notes(10)) == 0
        assert journal.append(notes(4, first_seq=3)) == 0
        assert (journal.last_pos, journal.head) == (10, head)
    assert verify(path).rows == 10


def test_a_partly_redelivered_batch_adds_only_the_new_seqs(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append(notes(5))
        assert journal.append(notes(5, first_seq=3)) == 2
    assert positions_and_seqs(path) == [(i, i) for i in range(1, 8)]
    assert verify(path).ok


def test_a_missing_seq_redelivered_late_is_journaled_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    batch = notes(6)
    with Journal.open(path) as journal:
        journal.append(batch[:2] + batch[3:])  # seq 3 not yet delivered
        assert journal.append([batch[2], batch[0], batch[2]]) == 1
        assert journal.last_seq(STREAM) == 6
    assert [seq for _, seq in positions_and_seqs(path)] == [1, 2, 4, 5, 6, 3]


def test_repeats_inside_one_batch_are_journaled_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    batch = notes(3)
    with Journal.open(path) as journal:
        assert journal.append(batch + batch[1:]) == 3


def test_seq_zero_rows_are_never_skipped(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    row = notes(1)[0]
    unstreamed = Incoming("", 0, row.subject, row.envelope)
    with Journal.open(path) as journal:
        assert journal.append([unstreamed, unstreamed]) == 2
        assert journal.last_seq("") == 0


def test_last_seq_is_per_stream(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.db") as journal:
        assert journal.last_seq(STREAM) == 0
        journal.append(notes(4))
        journal.append(notes(2, first_seq=7, stream="FL_JOURNAL@later"))
        assert journal.last_seq(STREAM) == 4
        assert journal.last_seq("FL_JOURNAL@later") == 8


def test_a_batch_that_fails_is_rolled_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    bad = Envelope(id="bad", episode="ep", sender="a", recipient="b", body=Note(data={"x": object()}))
    with Journal.open(path) as journal:
        journal.append(notes(2))
        with pytest.raises(TypeError):
            journal.append([*notes(2, first_seq=3), Incoming(STREAM, 5, "fl.ep.ep.b", bad)])
        assert journal.last_pos == 2
        assert journal.append(notes(2, first_seq=3)) == 2
    assert [seq for _, seq in positions_and_seqs(path)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE messages SET sender = 'mallory' WHERE pos = 2",
        "DELETE FROM messages WHERE pos = 2",
        "UPDATE meta SET value = '0' WHERE key = 'schema_version'",
        "DELETE FROM meta",
    ],
)
def test_the_database_refuses_updates_and_deletes(journal_file: Path, sql: str) -> None:
    conn = sqlite3.connect(journal_file)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(sql)
    conn.close()
    assert verify(journal_file).rows == 18


def test_opening_a_file_that_is_not_sqlite_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all\n" * 100)
    with pytest.raises(JournalError, match="not a Faultline journal"):
        Journal.open(path)
    with pytest.raises(JournalError, match="not a Faultline journal"):
        JournalReader(path)


def test_opening_another_sqlite_database_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="not a Faultline journal"):
        Journal.open(path)


def test_a_journal_from_a_newer_schema_is_refused(journal_file: Path) -> None:
    conn = sqlite3.connect(journal_file)
    conn.execute("INSERT INTO meta VALUES ('ignored', 'x')")
    conn.execute("DROP TRIGGER meta_no_update")
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="schema 99 is newer"):
        Journal.open(journal_file)


def test_a_missing_file_is_created_but_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="directory"):
        Journal.open(tmp_path)
    with pytest.raises(JournalError, match="no such journal file"):
        JournalReader(tmp_path / "absent.db")


def test_the_inlined_digests_are_the_bus_digests(tmp_path: Path) -> None:
    env = episode_envelopes("ep")[2]
    with Journal.open(tmp_path / "j.db") as journal:
        journal.append(incoming([env]))
    with JournalReader(tmp_path / "j.db") as reader:
        (row,) = reader.rows()
    key = (
        1,
        STREAM,
        1,
        row.subject,
        env.id,
        env.episode,
        env.sender,
        env.recipient,
        env.topic,
        "recording",
        env.causation,
        env.hops,
        env.ts,
        digest(encode(env.body)),
    )
    assert row.digest == digest(encode(key))
    assert row.chain == digest((GENESIS + row.digest).encode())


@settings(max_examples=40, deadline=None)
@given(deliveries=st.lists(st.lists(st.integers(1, 30), max_size=12), max_size=8))
def test_any_redelivery_pattern_journals_each_seq_exactly_once(deliveries: list[list[int]]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "j.db"
        every = {seq: row for seq, row in enumerate(notes(30), start=1)}
        with Journal.open(path) as journal:
            for batch in deliveries:
                journal.append([every[seq] for seq in batch])
        with JournalReader(path) as reader:
            seqs = [row.stream_seq for row in reader.rows()]
        first_seen = list(dict.fromkeys(seq for batch in deliveries for seq in batch))
        assert seqs == first_seen
        assert verify(path).rows == len(first_seen)


def recorded(path: Path) -> tuple[int, str]:
    record = json.loads(head_path(path).read_bytes())
    return record["rows"], record["head"]


def test_each_committed_batch_records_the_row_count_and_head_beside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path, JournalSettings(head_record_interval_s=0)) as journal:
        assert recorded(path) == (0, GENESIS)
        journal.append(notes(3))
        assert recorded(path) == (3, journal.head)
        journal.append(notes(2, first_seq=4))
        assert recorded(path) == (5, journal.head)
    assert [p.name for p in tmp_path.iterdir() if "head" in p.name] == ["j.db.head"]


def test_batches_within_the_interval_of_the_last_record_are_recorded_on_close(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path, JournalSettings(head_record_interval_s=3600)) as journal:
        journal.append(notes(3))
        journal.append(notes(2, first_seq=4))
        assert recorded(path) == (0, GENESIS)
    with JournalReader(path) as reader:
        assert recorded(path) == (5, reader.head)


def test_a_head_record_that_cannot_be_written_is_warned_of_once_until_it_is_written_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk refuses every record while the WAL still takes rows: one warning, not one per batch."""
    path = tmp_path / "j.db"

    def refused() -> int:
        return sum("head record not written" in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.WARNING), Journal.open(path, JournalSettings(head_record_interval_s=0)) as journal:
        head_path(path).unlink()
        head_path(path).mkdir()  # no file can be renamed over a directory
        for seq in range(1, 6):
            journal.append(notes(1, first_seq=seq))
        assert refused() == 1
        head_path(path).rmdir()
        journal.append(notes(1, first_seq=6))
        assert recorded(path) == (6, journal.head)
        head_path(path).unlink()
        head_path(path).mkdir()
        journal.append(notes(1, first_seq=7))
        assert refused() == 2
        head_path(path).rmdir()


def test_a_writer_that_appends_nothing_leaves_the_head_record_alone(journal_file: Path) -> None:
    before = head_path(journal_file).read_bytes()
    with Journal.open(journal_file) as journal:
        journal.append(two_episodes()[:4])  # redelivered: nothing committed
    assert head_path(journal_file).read_bytes() == before


def test_a_new_journal_replaces_a_head_record_left_by_an_earlier_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append(notes(4))
    path.unlink()
    Journal.open(path).close()
    assert recorded(path) == (0, GENESIS)
    assert verify(path).ok


def test_a_journal_cut_short_keeps_its_head_record_while_other_rows_are_appended(
    tamper: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Rows cut by hand do not come back: a run appended to such a journal must not replace the record that
    says so, or `verify` would find the journal whole."""
    cut = tamper("DELETE FROM messages WHERE pos > 16")
    record = recorded(cut)
    with caplog.at_level(logging.WARNING, logger="faultline.journal"), Journal.open(cut) as journal:
        journal.append(notes(5, first_seq=100))
    assert [r.getMessage() for r in caplog.records] == [
        f"{head_path(cut)}: tail cut: the head record names 18 rows ending in chain {record[1]},"
        " the journal holds 16; run `faultline journal verify`: the record is kept until the journal reaches it again"
    ]
    assert recorded(cut) == record
    report = verify(cut)
    assert not report.ok and report.problem.startswith("row 18: chain ") and record[1] in report.problem


def test_a_journal_that_lost_its_last_batches_takes_them_again_and_then_its_head_record_moves_on(
    tamper: Callable[[str], Path],
) -> None:
    """After a power loss the record may name batches the journal lost; the stream delivers them again, the
    chain passes through the record once more, and later batches are recorded as ever."""
    cut = tamper("DELETE FROM messages WHERE pos > 16")
    with Journal.open(cut) as journal:
        assert journal.append(two_episodes()) == 2  # the two lost rows, as the stream holds them
        journal.append(notes(3, first_seq=100))
    assert recorded(cut)[0] == 21
    assert verify(cut).ok


def test_a_new_episode_is_written_whole_once_and_refused_whole_after(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    fork = [msgspec.structs.replace(item, stream_seq=0) for item in incoming(episode_envelopes("fork-1"))]
    with Journal.open(path) as journal:
        assert journal.append(fork, new_episode="fork-1") == 9
        with pytest.raises(JournalError, match="episode 'fork-1' is journaled already; nothing written"):
            journal.append(fork, new_episode="fork-1")
        assert journal.last_pos == 9
    assert positions_and_seqs(path) == [(pos, 0) for pos in range(1, 10)]
    assert verify(path).ok
