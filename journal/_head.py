"""The head record: a journal's row count and last chain value, kept in a file beside it.

A hash chain shows that the rows it covers were not edited, removed or reordered,
but a journal cut short at the end is still a valid, shorter chain. So the writer
records (rows, head) in `<journal>.head` after committed batches (at most every
`JournalSettings.head_record_interval_s`) and when it closes, written to a
temporary file and renamed over the old record, and `verify` checks that the chain
still passes through the recorded head. Deleting rows from the database leaves the
record behind; someone who rewrites the rows and the record together is caught only
by a head kept elsewhere (`verify --anchor`).

The record may lag the journal (batches within the interval, a writer killed
before it closed, or two writers racing): rows appended after it are fine. It is not fsynced,
like the journal in its default `synchronous=NORMAL` mode: after a power loss it
can name batches the journal lost, which `verify` reports as a cut until the
journal service has re-journaled them from the stream.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from faultline._errors import JournalError

HEAD_FORMAT = "faultline-journal-head"


class HeadRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a writer saw committed: `rows` rows, the last with chain value `head`."""

    rows: int
    head: str
    format: str = HEAD_FORMAT


_decoder = msgspec.json.Decoder(HeadRecord)


def head_path(journal: Path) -> Path:
    """Where the head record of the journal at `journal` lives."""
    return journal.with_name(journal.name + ".head")


def write_head(journal: Path, record: HeadRecord, temporary: Path) -> None:
    """Replace the head record atomically: write `temporary`, then rename it over the record."""
    temporary.write_bytes(msgspec.json.encode(record))
    os.replace(temporary, head_path(journal))


def read_head(journal: Path) -> HeadRecord | None:
    """The head record of `journal`, or None when there is none; JournalError if it is not one."""
    path = head_path(journal)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(f"{path}: cannot read the head record ({exc})") from None
    try:
        record = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise JournalError(f"{path}: not a journal head record ({exc}); remove it to verify without one") from None
    if record.format != HEAD_FORMAT:
        raise JournalError(f"{path}: not a journal head record (format is {record.format!r})")
    return record


def cut_problem(record: HeadRecord, rows: int, chain_at_record: str) -> str:
    """Why a journal of `rows` rows, whose chain value at row `record.rows` is `chain_at_record`, fails its record.

    "" when the chain passes through the recorded head (rows appended since are fine).
    """
    if record.rows > rows:
        return (
            f"tail cut: the head record names {record.rows} rows ending in chain {record.head},"
            f" the journal holds {rows}"
        )
    if chain_at_record != record.head:
        return (
            f"row {record.rows}: chain {chain_at_record} is not the recorded head {record.head}"
            " (rows rewritten up to there, or the head record belongs to another journal)"
        )
    return ""
