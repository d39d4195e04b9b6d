"""Benchmarks whose data is nested dicts and whose tools mutate them, run unchanged over SQLite.

`seed_documents` stores each collection (name -> {key: document}) as a table
of `(key, doc)` rows, the document as canonical JSON (sorted keys), so key
order never reaches the state hash and the incremental digest still applies.
A benchmark whose tools return stored documents whole, for a model that reads them
in their original key order, seeds with `key_order="kept"`: documents are then
stored and read back in the order they were written, and the state hash sees that
order unless the domain's `canonical_row` parses `doc`
(`{**row, "doc": json.loads(row["doc"])} if "doc" in row else row`: mappings hash key-sorted).
`document_tool` turns a benchmark's `function(data, **arguments)` into a
Faultline tool: `data` is a dict-like view that reads documents as the
function touches them and writes back, inside the call's transaction, every
document that changed, appeared or went away.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Literal

from faultline.envs._domain import ToolFunction

KeyOrder = Literal["sorted", "kept"]


def seed_documents(
    db: sqlite3.Connection, data: Mapping[str, Mapping[Any, Any]], *, key_order: KeyOrder = "sorted"
) -> None:
    """One table per collection of `data`; keys are stored as text, documents as JSON with their keys sorted
    (canonical), or as written with `key_order="kept"` (see the module docstring)."""
    sort_keys = key_order == "sorted"
    if not sort_keys:
        db.execute(f"CREATE TABLE {_KEY_ORDER_TABLE} (key_order TEXT NOT NULL)")
        db.execute(f"INSERT INTO {_KEY_ORDER_TABLE} VALUES (?)", (key_order,))
    for name, documents in data.items():
        db.execute(f'CREATE TABLE "{name}" (key TEXT PRIMARY KEY, doc TEXT NOT NULL)')
        db.executemany(
            f'INSERT INTO "{name}" VALUES (?, ?)',
            [(str(key), _encode(doc, sort_keys)) for key, doc in documents.items()],
        )


def document_tool(function: Callable[..., Any]) -> ToolFunction:
    """`function(data, **arguments)` as a tool over a database seeded by `seed_documents`.

    Changes are written back even when the function raises; whether they stay
    is the domain's `rollback_on_error`.
    """

    def run(db: sqlite3.Connection, **arguments: Any) -> Any:
        data = Documents(db)
        try:
            return function(data, **arguments)
        finally:
            data.write_back()

    run.__name__ = getattr(function, "__name__", "document_tool")
    return run


class Documents(Mapping[str, "Collection"]):
    """The collections of one database, read lazily: `data["users"]["u1"]["name"]`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        sort_keys = _KEY_ORDER_TABLE not in tables
        self._collections = {name: Collection(db, name, sort_keys) for name in tables if not name.startswith("_")}

    def __getitem__(self, name: str) -> Collection:
        return self._collections[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._collections)

    def __len__(self) -> int:
        return len(self._collections)

    def write_back(self) -> None:
        for collection in self._collections.values():
            collection.write_back()


class Collection(MutableMapping[str, Any]):
    """One collection: documents by key, decoded on first access and compared with their stored text at the end."""

    def __init__(self, db: sqlite3.Connection, name: str, sort_keys: bool = True) -> None:
        self._db = db
        self._table = f'"{name}"'
        self._sort_keys = sort_keys
        self._stored: dict[str, str | None] = {}
        """The text each touched key had when first read (None: it did not exist)."""
        self._docs: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._stored:
            row = self._db.execute(f"SELECT doc FROM {self._table} WHERE key = ?", (key,)).fetchone()
            self._stored[key] = row[0] if row else None
            if row:
                self._docs[key] = json.loads(row[0])
        if key not in self._docs:
            raise KeyError(key)
        return self._docs[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._stored:
            self.get(key)
        self._docs[key] = value

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - loads it, or raises KeyError as a dict would
        del self._docs[key]

    def __iter__(self) -> Iterator[str]:
        stored = [key for (key,) in self._db.execute(f"SELECT key FROM {self._table} ORDER BY rowid")]
        alive = [key for key in stored if key not in self._stored or key in self._docs]
        known = set(stored)
        return iter([*alive, *(key for key in self._docs if key not in known)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def write_back(self) -> None:
        for key, before in self._stored.items():
            after = _encode(self._docs[key], self._sort_keys) if key in self._docs else None
            if after == before:
                continue
            if after is None:
                self._db.execute(f"DELETE FROM {self._table} WHERE key = ?", (key,))
            elif before is None:
                self._db.execute(f"INSERT INTO {self._table} VALUES (?, ?)", (key, after))
            else:
                self._db.execute(f"UPDATE {self._table} SET doc = ? WHERE key = ?", (after, key))


_KEY_ORDER_TABLE = "_key_order"
"""Present, with one row, in a database seeded with `key_order="kept"`."""


def _encode(document: Any, sort_keys: bool = True) -> str:
    return json.dumps(document, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
