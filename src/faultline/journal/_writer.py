"""The journal writer: appends batches of messages, each batch in one transaction.

There is one writer per journal (the journal service); readers may run alongside
in other processes. The writer is not thread-safe: one caller at a time, from any
thread (the consumer may hand it to a worker thread). After committed batches (at
most every `JournalSettings.head_record_interval_s`) and on close it replaces the
head record beside the file (see `_head`), so `verify` finds rows cut from the end.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from faultline._errors import JournalError, JournalStorageError
from faultline.journal._head import HeadRecord, cut_problem, head_path, read_head, write_head
from faultline.journal._requests import INSERT_BLOB, BlobWriter
from faultline.journal._rows import GENESIS, Incoming, SealedRow, seal
from faultline.journal._schema import (
    CHAIN,
    INSERT,
    POS,
    SCHEMA_VERSION,
    STORED_DIGESTS,
    JournalSettings,
    check,
    configure,
    create,
    table_names,
)

log = logging.getLogger(__name__)


class Journal:
    """An open journal file, for appending. Use `Journal.open(path)`."""

    def __init__(self, path: Path, conn: sqlite3.Connection, settings: JournalSettings, version: int) -> None:
        self.path = path
        self._conn = conn
        self.version = version
        self._blobs = BlobWriter() if version >= 2 else None
        self._last_pos, self._head = self._tail()
        self._head_temporary = path.with_name(f".{path.name}.head.{os.getpid()}-{id(self):x}")
        self._head_interval_s = settings.head_record_interval_s
        self._recorded_pos = self._last_pos  # what this writer has to record: only rows it appends
        self._recorded_at = -math.inf
        self._head_refused = False
        self._disputed: HeadRecord | None = None
        """A head record the journal did not reach when opened: kept in place until the chain passes through it."""

    @classmethod
    def open(
        cls, path: str | Path, settings: JournalSettings | None = None, *, version: int = SCHEMA_VERSION
    ) -> Journal:
        """Open the journal at `path`, creating it (with schema `version`, 2 or later) if the file is missing or empty.

        Raises JournalError if the file is something else, or a journal of a schema version this one does not read.
        """
        if not 2 <= version <= SCHEMA_VERSION:
            raise JournalError(f"{path}: cannot create a journal of schema {version}")
        settings = settings or JournalSettings()
        path = Path(path)
        if path.is_dir():
            raise JournalError(f"{path}: is a directory, not a journal file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=settings.busy_timeout_s)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open journal ({exc})") from None
        try:
            created = False
            if not table_names(conn, path):
                conn.execute(f"PRAGMA page_size = {settings.page_size}")
                conn.execute("PRAGMA journal_mode = WAL")
                with _transaction(conn, path):
                    if not table_names(conn, path):
                        create(conn, version)
                        created = True
            version = check(conn, path)
            configure(conn, settings)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {settings.synchronous}")
            journal = cls(path, conn, settings, version)
        except BaseException:
            conn.close()
            raise
        if created:
            journal._write_head()  # a record left by an earlier file of this name no longer applies
        else:
            journal._check_head()
        return journal

    # -- state ---------------------------------------------------------------------------------

    @property
    def last_pos(self) -> int:
        """Position of the last row (0 when empty)."""
        return self._last_pos

    @property
    def head(self) -> str:
        """Chain value of the last row (GENESIS when empty): pin it to detect a rewrite later."""
        return self._head

    def last_seq(self, stream: str) -> int:
        """Highest stream sequence journaled from `stream` (0 if none).

        A consumer that hands batches over in stream order resumes at last_seq + 1.
        """
        return _last_seq(self._conn, stream)

    def journaled_since(self, stream: str, seq: int) -> list[tuple[str, int]]:
        """(subject, stream sequence) of every row journaled from `stream` at sequence `seq` or later, in order."""
        rows = self._conn.execute(
            "SELECT subject, stream_seq FROM messages WHERE stream = ? AND stream_seq >= ? ORDER BY stream_seq",
            (stream, max(seq, 1)),
        )
        return [(str(subject), int(at)) for subject, at in rows]

    # -- appending -----------------------------------------------------------------------------

    def append(self, rows: Iterable[Incoming], *, new_episode: str = "") -> int:
        """Append incoming messages in one transaction; return how many rows that made.

        A row whose (stream, stream_seq) is already journaled, or repeated in the batch, is
        skipped, so a redelivered batch never duplicates anything. stream_seq 0 means "not
        from a stream" and is never skipped. With `new_episode`, the batch is written only
        if no row of that episode is journaled yet (a fork run twice), else JournalError.
        """
        batch = rows if isinstance(rows, list) else list(rows)
        if not batch:
            return 0
        with _transaction(self._conn, self.path) as conn:
            if new_episode and conn.execute("SELECT 1 FROM messages WHERE episode = ?", (new_episode,)).fetchone():
                raise JournalError(f"{self.path}: episode {new_episode!r} is journaled already; nothing written")
            last_pos, head = self._tail()
            fresh = _drop_journaled(conn, batch)
            sealed, blobs = self._seal(fresh, last_pos, head)
            self._insert(conn, sealed, blobs)
        if sealed:
            self._committed(sealed)
        return len(sealed)

    def _seal(self, rows: Sequence[Incoming], last_pos: int, head: str) -> tuple[list[SealedRow], BlobWriter | None]:
        """`seal` as this journal's version stores rows, with the request blobs of the batch (None: version 1)."""
        if self._blobs is not None:
            self._blobs.start_batch()
        return seal(rows, last_pos, head, self._blobs, digest_stored=self.version >= STORED_DIGESTS), self._blobs

    def _insert(self, conn: sqlite3.Connection, sealed: Sequence[SealedRow], blobs: BlobWriter | None) -> None:
        """INSERT sealed rows and the request blobs they refer to, in the caller's transaction."""
        if blobs is not None:
            conn.executemany(INSERT_BLOB, blobs.batch())
        if sealed:
            conn.executemany(INSERT, sealed)

    def _committed(self, sealed: Sequence[SealedRow]) -> None:
        if self._blobs is not None:
            self._blobs.committed()
        self._last_pos, self._head = sealed[-1][POS], sealed[-1][CHAIN]
        self._record_head(throttled=True)

    def _write_sealed(self, sealed: Sequence[SealedRow], blobs: BlobWriter | None) -> None:
        """Insert rows sealed elsewhere (import) against this journal's current tail."""
        if not sealed:
            return
        with _transaction(self._conn, self.path) as conn:
            if self._tail() != (sealed[0][POS] - 1, self._head):
                raise JournalError(f"{self.path}: journal was appended to while rows were being sealed")
            self._insert(conn, sealed, blobs)
        self._committed(sealed)

    def _tail(self) -> tuple[int, str]:
        row = self._conn.execute("SELECT pos, chain FROM messages ORDER BY pos DESC LIMIT 1").fetchone()
        return (row[0], row[1]) if row else (0, GENESIS)

    def _record_head(self, *, throttled: bool = False) -> None:
        """Replace the head record if this writer appended since the last one; `throttled`: once the interval is up.

        The rows are committed already, and the stream still holds them, so a failure to
        write the record is only logged: it costs only the check for rows cut from the end.
        """
        if self._recorded_pos == self._last_pos:
            return
        if throttled and time.monotonic() - self._recorded_at < self._head_interval_s:
            return
        if self._disputed is not None:
            if self._cut_from(self._disputed):
                return  # replacing it would erase the evidence that rows were cut or rewritten
            log.info("%s: the journal reaches its head record again", self.path)
            self._disputed = None
        self._write_head()

    def _write_head(self) -> None:
        """Replace the head record; a failure is warned of once until a record is written again (a full disk
        refuses every one while SQLite may still commit into its WAL's room: a warning per batch otherwise)."""
        try:
            write_head(self.path, HeadRecord(rows=self._last_pos, head=self._head), self._head_temporary)
        except OSError as exc:
            if not self._head_refused:
                log.warning(
                    "%s: head record not written (%s); verify cannot find rows cut from the end", self.path, exc
                )
            self._head_refused = True
            return
        if self._head_refused:
            log.info("%s: head record written again", self.path)
        self._head_refused = False
        self._recorded_pos, self._recorded_at = self._last_pos, time.monotonic()

    def _check_head(self) -> None:
        """Warn when the journal no longer reaches its head record, and keep that record until it does.

        After a power loss the record may name batches the journal lost, which the journal service journals
        again from the stream, passing through the record once more; rows cut or rewritten by hand do not
        come back, and the record stays to say so to `verify`.
        """
        try:
            record = read_head(self.path)
        except JournalError as exc:
            log.warning("%s", exc)
            return
        if record is None:
            return
        problem = self._cut_from(record)
        if problem:
            self._disputed = record
            log.warning(
                "%s: %s; run `faultline journal verify`: the record is kept until the journal reaches it again",
                head_path(self.path),
                problem,
            )

    def _cut_from(self, record: HeadRecord) -> str:
        """Why the journal does not pass through `record` ("" when it does)."""
        row = self._conn.execute("SELECT chain FROM messages WHERE pos = ?", (record.rows,)).fetchone()
        return cut_problem(record, self._last_pos, row[0] if row else GENESIS)

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Record the head and close the file; the last writer to close folds the WAL back into the one file."""
        self._record_head()
        self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_STORAGE_CODES = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    }
)
"""SQLite result codes that blame the storage or another writer, not the rows: the same write may work later."""


@contextmanager
def _transaction(conn: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error; SQLite errors become JournalError.

    JournalStorageError when the storage refused (the caller may retry the same write).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise _write_error(exc, f"{path}: cannot start a write ({exc})") from None
    try:
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(conn)
        raise _write_error(exc, f"{path}: write failed, batch rolled back ({exc})") from None
    except BaseException:
        _rollback(conn)
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some failures (a full disk among them).
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _write_error(exc: sqlite3.Error, message: str) -> JournalError:
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _STORAGE_CODES:  # errors raised by Python's module have none
        return JournalStorageError(message)
    return JournalError(message)


def _last_seq(conn: sqlite3.Connection, stream: str) -> int:
    # `stream_seq > 0` lets SQLite use the partial unique index.
    (seq,) = conn.execute(
        "SELECT coalesce(max(stream_seq), 0) FROM messages WHERE stream = ? AND stream_seq > 0", (stream,)
    ).fetchone()
    return int(seq)


def _drop_journaled(conn: sqlite3.Connection, batch: list[Incoming]) -> list[Incoming]:
    """The rows of `batch` whose (stream, stream_seq) is neither journaled nor repeated in the batch.

    The common case, a batch in ascending sequence order past each stream's highest
    journaled sequence, costs one indexed lookup per stream and returns the batch as is.
    """
    ranges: dict[str, list[int]] = {}
    ascending = True
    for row in batch:
        seq = row.stream_seq
        if seq > 0:
            stream = row.stream
            bounds = ranges.get(stream)
            if bounds is None:
                ranges[stream] = [seq, seq]
            elif seq > bounds[1]:
                bounds[1] = seq
            else:
                ascending = False
                bounds[0] = min(bounds[0], seq)
    journaled: set[tuple[str, int]] = set()
    for stream, (low, high) in ranges.items():
        if _last_seq(conn, stream) >= low:
            journaled.update(
                (stream, seq)
                for (seq,) in conn.execute(
                    "SELECT stream_seq FROM messages"
                    " WHERE stream = ? AND stream_seq > 0 AND stream_seq BETWEEN ? AND ?",
                    (stream, low, high),
                )
            )
    if not journaled and ascending:
        return batch
    fresh: list[Incoming] = []
    for row in batch:
        key = (row.stream, row.stream_seq)
        if row.stream_seq > 0:
            if key in journaled:
                continue
            journaled.add(key)
        fresh.append(row)
    return fresh
