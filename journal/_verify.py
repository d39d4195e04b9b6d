"""Verify a journal: recompute every digest and the hash chain, and name the first bad row.

Checks per row, in position order, stopping at the first failure:
contiguous positions, body digest, chain link, row digest, derived facts; then the
head record the writer keeps beside the file (`_head`): the chain must reach it.

What this proves: no row was edited, removed, inserted or reordered without the
chain being recomputed from there, and, while the head record is present, no rows
were cut from the end. What it cannot prove: that nobody rewrote the rows with a
recomputed chain together with the head record, or cut the end and deleted the
record (then verify says the end is unchecked). For that, keep a head value
somewhere else and pass it as `anchor`: it must still be in the chain.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from faultline._errors import ChainError, DecodeError
from faultline.core import decode_body, digest
from faultline.journal._facts import FACT_KINDS, facts_of
from faultline.journal._head import cut_problem, head_path, read_head
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
    JournalSettings,
    connect_readonly,
)


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

    @property
    def ok(self) -> bool:
        return not self.problem

    def summary(self) -> str:
        if not self.ok:
            return self.problem
        anchored = f", anchor found at row {self.anchor_pos}" if self.anchor_pos else ""
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
    path: str | Path, *, anchor: str = "", settings: JournalSettings | None = None, facts: bool = True
) -> VerifyReport:
    """Recompute the journal at `path` row by row; report the first row that does not hold.

    `facts=False` skips the derived `facts` column (not part of any digest; only the
    SQL views read it), for callers such as replay that read bodies themselves.
    """
    conn = connect_readonly(path, settings or JournalSettings())
    # Read the record before the rows: a writer commits rows before it records them.
    try:
        record = read_head(Path(path))
    except BaseException:
        conn.close()
        raise
    # A tampered body may have been rewritten as text (even text that is not UTF-8): read it as bytes.
    select = ", ".join("CAST(body AS BLOB)" if column == "body" else column for column in COLUMNS)
    try:
        cursor = conn.execute(f"SELECT {select} FROM messages ORDER BY pos")
        expected = 1
        previous = GENESIS
        anchor_pos = 0
        chain_at_record = GENESIS

        def broken(position: int, problem: str) -> VerifyReport:
            return VerifyReport(path=str(path), rows=expected - 1, head=previous, problem=problem, position=position)

        for values in cursor:
            pos = values[POS]
            if pos != expected:
                if pos > expected:
                    return broken(expected, f"gap: position {expected} missing")
                return broken(pos, f"row {pos}: position out of range (positions start at 1)")
            body, stored_digest, stored_chain = values[BODY], values[DIGEST], values[CHAIN]
            if not isinstance(body, bytes) or digest(body) != values[BODY_DIGEST]:
                return broken(pos, f"row {pos}: body digest mismatch (body edited)")
            if chain_next(previous, stored_digest) != stored_chain:
                return broken(pos, f"row {pos}: chain mismatch (row removed or reordered before it)")
            if row_digest(values[:DIGESTED]) != stored_digest:
                return broken(pos, f"row {pos}: row digest mismatch (a column edited)")
            problem = _facts_problem(pos, values[KIND], body, values[FACTS]) if facts else ""
            if problem:
                return broken(pos, problem)
            previous = stored_chain
            if stored_chain == anchor:
                anchor_pos = pos
            if record is not None and pos == record.rows:
                chain_at_record = stored_chain
            expected += 1
        if anchor and not anchor_pos:
            return broken(
                expected, f"anchor {anchor} not in the chain (rows removed from the end, or the journal rewritten)"
            )
        if record is not None:
            problem = cut_problem(record, expected - 1, chain_at_record)
            if problem:
                return broken(min(record.rows, expected), problem)
        return VerifyReport(
            path=str(path),
            rows=expected - 1,
            head=previous,
            anchor_pos=anchor_pos,
            recorded_rows=None if record is None else record.rows,
        )
    finally:
        conn.close()


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
