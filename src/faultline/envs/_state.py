"""A content digest of a domain database that costs little to take after a few writes.

The digest of a table is the count and the sum (mod 2**128) of its rows'
digests, so it does not depend on row order and can be updated row by row.
Databases copied from a template carry triggers that log every changed row
(old row with sign -1, new row with +1) into a shadow table; the digest of
such a copy is the template's digest adjusted by those few logged rows. Any
other database is digested in full; both ways give the same value.

A domain may hash each row in a canonical form of its own (`RowForm`: some
columns only, values normalised): the form applies to a row wherever its
digest is taken, full or from the shadow log, so the digest stays incremental.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable

import msgspec

_SHADOW = "_fl_delta_"
_META = "_fl_meta"
_MODULUS = 1 << 128

TableSums = dict[str, tuple[list[str], int, int]]
"""Per table: its columns, its row count and the sum of its row digests."""

RowForm = Callable[[str, list[str], tuple[object, ...]], object]
"""A domain's canonical form of a row of `table` with `columns` and `values`: what its digest covers."""

_sorted_keys = msgspec.msgpack.Encoder(order="sorted")
"""Encodes a row's canonical form with every mapping's keys in sorted order, so key order never counts."""

_bases: dict[str, TableSums] = {}
_lock = threading.Lock()


def track_changes(db: sqlite3.Connection, template_id: str, form: RowForm | None = None) -> None:
    """Remember the digest of `db` as it is now (rows in `form`), and log every later row change into shadow tables."""
    sums = full_sums(db, form=form)
    for table, (columns, _, _) in sums.items():
        quoted = ", ".join(f'"{c}"' for c in columns)
        old = ", ".join(f'OLD."{c}"' for c in columns)
        new = ", ".join(f'NEW."{c}"' for c in columns)
        shadow = f'"{_SHADOW}{table}"'
        db.execute(f"CREATE TABLE {shadow} (_fl_sign INTEGER, {quoted})")
        db.execute(f'CREATE TRIGGER "_fl_i_{table}" AFTER INSERT ON "{table}" BEGIN '
                   f"INSERT INTO {shadow} VALUES (1, {new}); END")  # fmt: skip
        db.execute(f'CREATE TRIGGER "_fl_d_{table}" AFTER DELETE ON "{table}" BEGIN '
                   f"INSERT INTO {shadow} VALUES (-1, {old}); END")  # fmt: skip
        db.execute(f'CREATE TRIGGER "_fl_u_{table}" AFTER UPDATE ON "{table}" BEGIN '
                   f"INSERT INTO {shadow} VALUES (-1, {old}); INSERT INTO {shadow} VALUES (1, {new}); END")  # fmt: skip
    db.execute(f"CREATE TABLE {_META} (template TEXT)")
    db.execute(f"INSERT INTO {_META} VALUES (?)", (template_id,))
    with _lock:
        _bases[template_id] = sums


def state_digest(db: sqlite3.Connection, tables: frozenset[str] | None = None, form: RowForm | None = None) -> str:
    """The content digest of the domain tables named in `tables` (default every one; bookkeeping excluded),
    each row taken in `form` (default: as stored). A database tracked by `track_changes` must be given its form."""
    sums = _tracked_sums(db, form)
    if sums is None:
        sums = full_sums(db, tables, form)
    digest = hashlib.blake2b(digest_size=16)
    for table in sorted(sums if tables is None else tables & sums.keys()):
        columns, count, total = sums[table]
        digest.update(msgspec.msgpack.encode([table, columns, count, total.to_bytes(16, "big")]))
    return digest.hexdigest()


def full_sums(db: sqlite3.Connection, tables: frozenset[str] | None = None, form: RowForm | None = None) -> TableSums:
    sums: TableSums = {}
    for table in _tables(db):
        if tables is not None and table not in tables:
            continue
        cursor = db.execute(f'SELECT * FROM "{table}"')
        columns = [column[0] for column in cursor.description]
        rows = cursor.fetchall()
        digest = _row_digest if form is None else _formed_digest(form, table, columns)
        sums[table] = (columns, len(rows), sum(map(digest, rows)) % _MODULUS)
    return sums


def _tracked_sums(db: sqlite3.Connection, form: RowForm | None) -> TableSums | None:
    try:
        row = db.execute(f"SELECT template FROM {_META}").fetchone()
    except sqlite3.OperationalError:
        return None
    base = _bases.get(row[0]) if row else None
    if base is None or sorted(base) != _tables(db):
        return None
    sums: TableSums = {}
    for table, (columns, count, total) in base.items():
        digest = _row_digest if form is None else _formed_digest(form, table, columns)
        for sign, *values in db.execute(f'SELECT * FROM "{_SHADOW}{table}"'):
            count += sign
            total += sign * digest(tuple(values))
        sums[table] = (columns, count, total % _MODULUS)
    return sums


def _tables(db: sqlite3.Connection) -> list[str]:
    rows = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        " AND name NOT LIKE '\\_fl\\_%' ESCAPE '\\' ORDER BY name"
    )
    return [name for (name,) in rows]


def _row_digest(row: tuple[object, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(msgspec.msgpack.encode(row), digest_size=16).digest(), "big")


def _formed_digest(form: RowForm, table: str, columns: list[str]) -> Callable[[tuple[object, ...]], int]:
    def digest(row: tuple[object, ...]) -> int:
        encoded = _sorted_keys.encode(form(table, columns, row))
        return int.from_bytes(hashlib.blake2b(encoded, digest_size=16).digest(), "big")

    return digest
