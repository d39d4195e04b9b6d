"""Verify a journal: recompute every digest and the hash chain, and name the first bad row.

Checks per row, in position order, stopping at the first failure:
contiguous positions, body digest, chain link, row digest, derived facts; then the
head record the writer keeps beside the file (`_head`): the chain must reach it.
A model request stored content-addressed (`_requests`) is checked, from schema 3, by
checking each blob it refers to against its own key, once per check; before, by
rebuilding the request as received and hashing it.

What this proves: no row was edited, removed, inserted or reordered without the
chain being recomputed from there, and, while the head record is present, no rows
were cut from the end. What it cannot prove: that nobody rewrote the rows with a
recomputed chain together with the head record, or cut the end and deleted the
record (then verify says the end is unchecked). For that, keep a head value
somewhere else and pass it as `anchor`: it must still be in the chain.

Every row is checked on its own against the stored chain value of the row before
it, so ranges of rows are checked in parallel (`jobs`). A check that holds leaves a
checkpoint beside the file (`_head`); a resumed check (`resume=True`, what replay,
forks and attribution use) starts after it when the chain still passes through it.
It proves the rows appended since; an edit to a row before the checkpoint that left
the stored chain values alone is found by the next full check (`faultline journal verify`).
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec

from faultline._errors import ChainError, DecodeError, JournalError
from faultline.core import decode_body, digest
from faultline.journal._facts import FACT_KINDS, facts_of
from faultline.journal._head import (
    cut_problem,
    head_path,
    read_checkpoint,
    read_head,
    write_checkpoint,
)
from faultline.journal._requests import BlobCheck, BlobStore, is_compact
from faultline.journal._rows import GENESIS, chain_next, row_digest
from faultline.journal._schema import (
    BODY,
    BODY_DIGEST,
    CHAIN,
    COLUMNS,
    DIGEST,
    DIGESTED,
    FACTS,
    KIND,
    POS,
    STORED_DIGESTS,
    JournalSettings,
    check,
    connect_readonly,
)
from faultline.journal._set import CELL_EPISODES, SetManifest, is_journal_set, journal_files, read_manifest

log = logging.getLogger(__name__)

PARALLEL_ROWS = 20_000
"""Below this many rows to check, extra processes cost more than they save; no range is smaller either (each costs
about 10 ms to open)."""
RANGES_PER_JOB = 8
"""A parallel check of a large journal splits its rows into this many ranges per process, so that progress moves as
each comes back."""
TOLD_EVERY = 10_000
"""A check in one process tells its progress every this many rows."""

VerifyProgress = Callable[[int, int], None]
"""Told (rows checked, rows in the journal) as a check goes; rows a resumed check takes from its checkpoint count
as checked."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What `verify` found. `problem` is the first bad row, one line, or "" when the chain holds.

    `rows` counts the rows that verified before the first problem (all of them when ok).
    `recorded_rows` is the row count of the head record the chain reached, or None when
    there was no record, so rows cut from the end could not be looked for.
    """

    path: str
    rows: int
    head: str
    problem: str = ""
    position: int = 0
    anchor_pos: int = 0
    recorded_rows: int | None = None
    resumed_at: int = 0
    """Rows a resumed check took from the checkpoint instead of checking them again."""
    shards: int = 1
    """Files checked: more than one for a journal set, each with a chain of its own."""

    @property
    def ok(self) -> bool:
        return not self.problem

    def summary(self) -> str:
        if not self.ok:
            return self.problem
        anchored = f", anchor found at row {self.anchor_pos}" if self.anchor_pos else ""
        if self.resumed_at:
            anchored += f" (rows up to {self.resumed_at} checked earlier)"
        if self.shards > 1:
            return f"ok: {self.rows} rows in {self.shards} shards, every shard's chain holds{anchored}" + (
                "; a shard has no head record: its end is unchecked"
                if self.recorded_rows is None
                else "; every head record reached, so nothing was cut from an end"
            )
        if self.recorded_rows is None:
            tail = f"; no head record ({head_path(Path(self.path)).name}): the end is unchecked, pass --anchor"
        else:
            tail = f"; head record ({self.recorded_rows} rows) reached, so nothing was cut from the end"
        return f"ok: {self.rows} rows, chain holds, head {self.head}{anchored}{tail}"

    def raise_if_broken(self) -> None:
        """Raise ChainError naming the first bad row, if there is one."""
        if self.problem:
            raise ChainError(f"{self.path}: {self.problem}", self.position)


def verify(
    path: str | Path,
    *,
    anchor: str = "",
    settings: JournalSettings | None = None,
    facts: bool = True,
    jobs: int = 1,
    resume: bool = False,
    progress: VerifyProgress | None = None,
) -> VerifyReport:
    """Recompute the journal at `path` row by row; report the first row that does not hold.

    `facts=False` skips the derived `facts` column (not part of any digest; only the
    SQL views read it), for callers such as replay that read bodies themselves.
    `jobs` > 1 checks ranges of a large journal in that many processes. `resume` starts
    after the checkpoint a earlier check left, if the chain still passes through it
    (never with an `anchor`, which may lie before it). `progress` is told how far the
    check got (from this thread).
    """
    path = Path(path)
    if path.is_dir() and is_journal_set(path):
        return _verify_set(
            path, anchor=anchor, settings=settings, facts=facts, jobs=jobs, resume=resume, progress=progress
        )
    settings = settings or JournalSettings()
    conn = connect_readonly(path, settings)
    try:
        # Read the record before the rows: a writer commits rows before it records them.
        record = read_head(path)
        start, previous = _resume_point(conn, path) if resume and not anchor else (1, GENESIS)
        last = _last_pos(conn)
        if record is not None and record.rows < start:
            chain_at_record = _stored_chain(conn, record.rows)
        else:
            chain_at_record = GENESIS
    finally:
        conn.close()
    processes = jobs if jobs == 1 or _forks() else 1
    ranges = _split(start, last, processes)

    def tell(checked: int) -> None:
        if progress is not None:
            progress(start - 1 + checked, max(last, start - 1 + checked))

    task = _RangeTask(str(path), settings, anchor, record.rows if record else -1, facts, start == 1)
    if len(ranges) == 1:
        checked = [task.check(ranges[0][0], ranges[0][1], previous, tell)]
        tell(checked[0].rows)
    else:
        import multiprocessing  # here: a check in one range loads no process pool
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            checked, held = [], 0
            for part in pool.map(task.check_range, ranges):  # in order, each as soon as it and those before are done
                checked.append(part)
                held += part.rows
                tell(held)
    rows, head, anchor_pos = start - 1, previous, 0
    for part in checked:
        if part.problem:
            return VerifyReport(
                path=str(path),
                rows=rows + part.rows,
                head=part.head or head,
                problem=part.problem,
                position=part.position,
            )
        rows += part.rows
        head = part.head or head
        anchor_pos = anchor_pos or part.anchor_pos
        chain_at_record = part.chain_at_record or chain_at_record
    if anchor and not anchor_pos:
        return VerifyReport(
            path=str(path),
            rows=rows,
            head=head,
            position=rows + 1,
            problem=f"anchor {anchor} not in the chain (rows removed from the end, or the journal rewritten)",
        )
    if record is not None:
        problem = cut_problem(record, rows, chain_at_record)
        if problem:
            return VerifyReport(
                path=str(path), rows=rows, head=head, problem=problem, position=min(record.rows, rows + 1)
            )
    try:
        write_checkpoint(path, rows, head)
    except OSError as exc:
        log.debug("%s: no checkpoint written (%s); the next resumed check starts at row 1", path, exc)
    return VerifyReport(
        path=str(path),
        rows=rows,
        head=head,
        anchor_pos=anchor_pos,
        recorded_rows=None if record is None else record.rows,
        resumed_at=start - 1,
    )


def _verify_set(
    folder: Path,
    *,
    anchor: str,
    settings: JournalSettings | None,
    facts: bool,
    jobs: int,
    resume: bool,
    progress: VerifyProgress | None,
) -> VerifyReport:
    """Verify every shard of a journal set, and that each holds only the episodes the partition gives it."""
    if anchor:
        raise JournalError(f"{folder}: a journal set has a chain per shard; check an anchor against a shard's file")
    files = journal_files(folder)
    manifest = read_manifest(folder)
    sizes = [_rows_in(file, settings or JournalSettings()) for file in files] if progress is not None else []
    rows = resumed = 0
    recorded: int | None = 0
    heads: list[str] = []
    for shard, file in enumerate(files):

        def tell(done: int, total: int, before: int = sum(sizes[:shard]), after: int = sum(sizes[shard + 1 :])) -> None:
            if progress is not None:
                progress(before + done, before + total + after)

        report = verify(file, settings=settings, facts=facts, jobs=jobs, resume=resume, progress=tell)
        stray = "" if not report.ok else _stray_episode(file, shard, manifest, settings or JournalSettings())
        if not report.ok or stray:
            return VerifyReport(
                path=str(folder),
                rows=rows + report.rows,
                head=report.head,
                problem=f"{file.name}: {report.problem or stray}",
                position=report.position,
                shards=len(files),
            )
        rows += report.rows
        resumed += report.resumed_at
        heads.append(report.head)
        recorded = None if recorded is None or report.recorded_rows is None else recorded + report.recorded_rows
    return VerifyReport(
        path=str(folder),
        rows=rows,
        head=digest(" ".join(heads).encode()),
        recorded_rows=recorded,
        resumed_at=resumed,
        shards=len(files),
    )


def _stray_episode(file: Path, shard: int, manifest: SetManifest, settings: JournalSettings) -> str:
    """A problem if shard `shard`'s file holds an episode the partition puts in another shard, else "" (a set
    written by cells holds a cell's controls and dead letters in each shard)."""
    conn = connect_readonly(file, settings)
    try:
        for (episode,) in conn.execute("SELECT DISTINCT episode FROM messages"):
            belongs = manifest.shard_of(episode)
            if belongs != shard and not (manifest.cells and episode in CELL_EPISODES):
                return f"holds episode {episode!r}, which belongs in shard {belongs}"
    finally:
        conn.close()
    return ""


def _rows_in(file: Path, settings: JournalSettings) -> int:
    conn = connect_readonly(file, settings)
    try:
        return _last_pos(conn)
    finally:
        conn.close()


def _last_pos(conn: sqlite3.Connection) -> int:
    (last,) = conn.execute("SELECT coalesce(max(pos), 0) FROM messages").fetchone()
    return int(last)


def _resume_point(conn: sqlite3.Connection, path: Path) -> tuple[int, str]:
    """(first row to check, chain value before it): after the checkpoint if the chain still passes through it."""
    checkpoint = read_checkpoint(path)
    if checkpoint is None or checkpoint.rows < 1 or _stored_chain(conn, checkpoint.rows) != checkpoint.head:
        return 1, GENESIS
    return checkpoint.rows + 1, checkpoint.head


def _stored_chain(conn: sqlite3.Connection, pos: int) -> str:
    row = conn.execute("SELECT chain FROM messages WHERE pos = ?", (pos,)).fetchone()
    return str(row[0]) if row else GENESIS


def _split(start: int, last: int, jobs: int) -> list[tuple[int, int | None]]:
    """Ranges [first, stop) covering `start`..end; the last is open, so rows appended meanwhile are checked too."""
    count = last - start + 1
    if jobs <= 1 or count < PARALLEL_ROWS:
        return [(start, None)]
    size = max(math.ceil(count / (jobs * RANGES_PER_JOB)), PARALLEL_ROWS)
    bounds = list(range(start, last + 1, size))
    return [(first, bounds[i + 1] if i + 1 < len(bounds) else None) for i, first in enumerate(bounds)]


class _Range(msgspec.Struct):
    """What checking one range found: rows that held, the chain value after them, and any problem."""

    rows: int = 0
    head: str = ""
    problem: str = ""
    position: int = 0
    anchor_pos: int = 0
    chain_at_record: str = ""


class _RangeTask(msgspec.Struct, frozen=True):
    """Checks ranges of one journal; picklable, so each process opens its own connection."""

    path: str
    settings: JournalSettings
    anchor: str
    record_rows: int
    facts: bool
    full: bool
    """Whether the ranges cover the whole journal: then the first one also checks every blob."""

    def check_range(self, bounds: tuple[int, int | None]) -> _Range:
        first, stop = bounds
        if first == 1:
            return self.check(first, stop, GENESIS)
        conn = connect_readonly(self.path, self.settings)
        try:
            previous = _stored_chain(conn, first - 1)
        finally:
            conn.close()
        return self.check(first, stop, previous)

    def check(self, first: int, stop: int | None, previous: str, tell: Callable[[int], None] | None = None) -> _Range:
        """Check rows first..stop-1 (to the end when `stop` is None), the row before having chain `previous`;
        `tell` hears how many rows held, every TOLD_EVERY."""
        conn = connect_readonly(self.path, self.settings)
        try:
            return self._check(conn, first, stop, previous, tell)
        finally:
            conn.close()

    def _check(
        self,
        conn: sqlite3.Connection,
        first: int,
        stop: int | None,
        previous: str,
        tell: Callable[[int], None] | None,
    ) -> _Range:
        # A tampered body may have been rewritten as text (even text that is not UTF-8): read it as bytes.
        select = ", ".join("CAST(body AS BLOB)" if column == "body" else column for column in COLUMNS)
        # The first range has no lower bound, so it also finds rows below position 1, which no writer makes.
        bounds = [("pos >= ?", first)] if first > 1 else []
        if stop is not None:
            bounds.append(("pos < ?", stop))
        where = " AND ".join(condition for condition, _ in bounds) or "1"
        params = tuple(value for _, value in bounds)
        # From schema 3 blobs are checked against their keys; before, requests are rebuilt to be hashed.
        stored_digests = check(conn, Path(self.path)) >= STORED_DIGESTS
        blob_check = BlobCheck(conn, every=self.full and first == 1) if stored_digests else None
        blobs = BlobStore(conn)
        cursor = conn.execute(f"SELECT {select} FROM messages WHERE {where} ORDER BY pos", params)
        found = _Range()
        expected = first

        def broken(position: int, problem: str) -> _Range:
            found.rows, found.head, found.problem, found.position = expected - first, previous, problem, position
            return found

        for values in cursor:
            pos = values[POS]
            if pos != expected:
                if pos > expected:
                    return broken(expected, f"gap: position {expected} missing")
                return broken(pos, f"row {pos}: position out of range (positions start at 1)")
            body, stored_digest, stored_chain = values[BODY], values[DIGEST], values[CHAIN]
            compact = isinstance(body, bytes) and is_compact(body)
            if compact and blob_check is None:
                try:
                    body = blobs.expand(body, f"row {pos}")
                except JournalError as exc:
                    return broken(pos, str(exc))
            if not isinstance(body, bytes) or digest(body) != values[BODY_DIGEST]:
                return broken(pos, f"row {pos}: body digest mismatch (body edited)")
            if compact and blob_check is not None:
                problem = blob_check.row_problem(body)
                if problem:
                    return broken(pos, f"row {pos}: {problem}")
                body = body[1:]
            if chain_next(previous, stored_digest) != stored_chain:
                return broken(pos, f"row {pos}: chain mismatch (row removed or reordered before it)")
            if row_digest(values[:DIGESTED]) != stored_digest:
                return broken(pos, f"row {pos}: row digest mismatch (a column edited)")
            problem = _facts_problem(pos, values[KIND], body, values[FACTS]) if self.facts else ""
            if problem:
                return broken(pos, problem)
            previous = stored_chain
            if stored_chain == self.anchor:
                found.anchor_pos = pos
            if pos == self.record_rows:
                found.chain_at_record = stored_chain
            expected += 1
            if tell is not None and (expected - first) % TOLD_EVERY == 0:
                tell(expected - first)
        if stop is not None and expected != stop:
            return broken(expected, f"gap: position {expected} missing")
        if blob_check is not None:
            problem = blob_check.unreached_problem()
            if problem:
                return broken(expected, problem)
        found.rows, found.head = expected - first, previous if expected > first else ""
        return found


def _facts_problem(pos: int, kind: str, body: bytes, stored: str | None) -> str:
    """Why the derived `facts` column of a row does not match its body, or ""."""
    if kind not in FACT_KINDS:
        return f"row {pos}: facts present on a {kind} row (derived column edited)" if stored is not None else ""
    try:
        expected = facts_of(decode_body(body), body)
    except DecodeError as exc:
        return f"row {pos}: body does not decode ({exc})"
    if expected != stored:
        return f"row {pos}: facts do not match the body (derived column edited)"
    return ""


def _forks() -> bool:
    """Whether pool processes are forked, which the ranges' checks need."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) in (None, "fork")
