"""The head record: a journal's row count and last chain value, kept in a file beside it; and the checkpoint.

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

The checkpoint (`<journal>.verified`) has the same form and is written by `verify`
after a check that held: the rows up to it need not be checked again by a resumed
check, as long as the chain still passes through it.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from faultline._errors import JournalError
from faultline._files import write_atomically

HEAD_FORMAT = "faultline-journal-head"
CHECKPOINT_FORMAT = "faultline-journal-verified"


class HeadRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a writer saw committed (or `verify` found to hold): `rows` rows, the last with chain value `head`."""

    rows: int
    head: str
    format: str = HEAD_FORMAT


_decoder = msgspec.json.Decoder(HeadRecord)


def head_path(journal: Path) -> Path:
    """Where the head record of the journal at `journal` lives."""
    return journal.with_name(journal.name + ".head")


def checkpoint_path(journal: Path) -> Path:
    """Where `verify` keeps the last checked (rows, head) of the journal at `journal`."""
    return journal.with_name(journal.name + ".verified")


def write_head(journal: Path, record: HeadRecord, temporary: Path) -> None:
    """Replace the head record atomically: write `temporary`, then rename it over the record."""
    _replace(head_path(journal), record, temporary)


def write_checkpoint(journal: Path, rows: int, head: str) -> None:
    path = checkpoint_path(journal)
    _replace(
        path, HeadRecord(rows=rows, head=head, format=CHECKPOINT_FORMAT), path.with_name(f".{path.name}.{os.getpid()}")
    )


def _replace(path: Path, record: HeadRecord, temporary: Path) -> None:
    write_atomically(path, msgspec.json.encode(record), temporary)


def read_head(journal: Path) -> HeadRecord | None:
    """The head record of `journal`, or None when there is none; JournalError if it is not one."""
    return _read(head_path(journal), HEAD_FORMAT)


def read_checkpoint(journal: Path) -> HeadRecord | None:
    """The checkpoint of `journal`, or None when there is none or it is unreadable (a full check follows)."""
    try:
        return _read(checkpoint_path(journal), CHECKPOINT_FORMAT)
    except JournalError:
        return None


def _read(path: Path, format: str) -> HeadRecord | None:
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
    if record.format != format:
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
