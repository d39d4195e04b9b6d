"""The journal file: tables, append-only triggers, derived views, and how connections are opened.

A journal is one SQLite file in WAL mode. `messages` holds one row per journaled
message at a contiguous position `pos` (1, 2, 3 ...), laid out as `MESSAGE_COLUMNS`;
`blobs` holds the items of model requests, each once (`_requests`); `meta` says what
the file is.
Triggers reject UPDATE and DELETE, so the database itself refuses to rewrite
history; `verify` catches anyone who drops the triggers first.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

import msgspec

from faultline._errors import JournalError
from faultline._files import not_a_file

FORMAT = "faultline-journal"
SCHEMA_VERSION = 3
"""1: bodies as received. 2: adds `blobs`, for model requests stored content-addressed (`_requests`).
3: a row's `body_digest` is that of its body as stored, so the chain covers what is stored and
`verify` checks each blob against its own key instead of rebuilding requests (`STORED_DIGESTS`).
This version reads and appends to all three; a journal keeps the version it was created with."""

STORED_DIGESTS = 3
"""The first version whose `body_digest` covers the body as stored (before it: the body as received)."""


class JournalSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How journal files are laid out and connections tuned.

    `synchronous=NORMAL` in WAL mode may lose the last batches on power loss, never
    consistency, and the stream still holds them. A large checkpoint interval keeps
    fsyncs rare under sustained appends; the WAL grows to about that many pages.
    `page_size` applies only when a journal is created. The head record (see `_head`)
    is replaced after a batch at most every `head_record_interval_s`, and when the
    writer closes: each replacement is a rename that ext4 follows with a flush
    (about 1.5 ms), and a cut of rows committed since the last record goes unseen.
    """

    busy_timeout_s: float = 5.0
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    cache_size_mib: int = 16
    """SQLite's page cache per connection. The writer appends, and the file's pages stay in the operating
    system's cache anyway: against 64 MiB, 16 cost appends and replay nothing measurable and the journal
    service 50 MiB less at 5,000 episodes in flight (bench/README.md, capacity.py)."""
    page_size: int = 8192
    wal_autocheckpoint_pages: int = 5000
    head_record_interval_s: float = 0.1


SQL_TYPES: dict[type, str] = {int: "INTEGER", str: "TEXT", float: "REAL", bytes: "BLOB"}
"""A column's SQL type, by the Python type of its values."""


class Column(msgspec.Struct, frozen=True):
    """One column of `messages`: its name, the Python type of its values (`SQL_TYPES`), and its part.

    "digested" columns come first and make the row digest, in this order; "stored" ones are
    kept as written (the body is covered by `body_digest`, the digests by the chain); a
    "derived" one is recomputed from the body, may be NULL, is in no digest and not in `JournalRow`.
    """

    name: str
    type: type
    part: Literal["digested", "stored", "derived"]


MESSAGE_COLUMNS = (
    Column("pos", int, "digested"),
    Column("stream", str, "digested"),
    Column("stream_seq", int, "digested"),
    Column("subject", str, "digested"),
    Column("id", str, "digested"),
    Column("episode", str, "digested"),
    Column("sender", str, "digested"),
    Column("recipient", str, "digested"),
    Column("topic", str, "digested"),
    Column("kind", str, "digested"),
    Column("causation", str, "digested"),
    Column("hops", int, "digested"),
    Column("ts", float, "digested"),
    Column("body_digest", str, "digested"),
    Column("body", bytes, "stored"),
    Column("digest", str, "stored"),
    Column("chain", str, "stored"),
    Column("facts", str, "derived"),
)
"""The row layout, the one place it is written: the table, the writer's INSERT, the reader's SELECT,
`JournalRow`, the export and `verify` all follow it. Part of the file format: it changes only with
a new schema version."""

COLUMNS = tuple(column.name for column in MESSAGE_COLUMNS)
"""Every column in table order: the order of a sealed row, of INSERT values and of `verify`'s SELECT."""

ROW_COLUMNS = tuple(column.name for column in MESSAGE_COLUMNS if column.part != "derived")
"""The columns a `JournalRow` holds, in its field order."""

DIGESTED = sum(column.part == "digested" for column in MESSAGE_COLUMNS)
"""The row digest covers `COLUMNS[:DIGESTED]` (pos ... body_digest)."""

POS, KIND, BODY_DIGEST, BODY, DIGEST, CHAIN, FACTS = (
    COLUMNS.index(name) for name in ("pos", "kind", "body_digest", "body", "digest", "chain", "facts")
)
"""Positions in a sealed row or a `verify` row."""

ROW_SELECT = ", ".join(ROW_COLUMNS)
INSERT = f"INSERT INTO messages ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"

_TRIGGERS = [
    f"CREATE TRIGGER {table}_no_{action} BEFORE {action.upper()} ON {table} "
    f"BEGIN SELECT RAISE(ABORT, 'journal is append-only: {table} rows cannot be {action}d'); END"
    for table in ("messages", "meta", "blobs")
    for action in ("update", "delete")
]

# Rows without a stream sequence (stream_seq = 0, e.g. forked runs) are exempt from uniqueness.
_STREAM_SEQ_INDEX = """
CREATE UNIQUE INDEX idx_messages_stream_seq ON messages (stream, stream_seq) WHERE stream_seq > 0
"""

_VIEWS: dict[str, str] = {
    "episodes": """
WITH marks AS (
    SELECT episode,
           min(CASE WHEN kind = 'episode_started' THEN pos END) AS started_pos,
           max(CASE WHEN kind = 'episode_completed' THEN pos END) AS completed_pos
    FROM messages WHERE kind IN ('episode_started', 'episode_completed') GROUP BY episode
), counts AS (
    SELECT episode,
           count(*) AS messages,
           sum(kind = 'tool_call') AS tool_calls,
           sum(kind = 'fault_applied') AS faults,
           sum(kind = 'defense_fired') AS defenses,
           sum(kind = 'error_raised') AS errors,
           min(ts) AS first_ts,
           max(ts) AS last_ts
    FROM messages WHERE episode IN (SELECT episode FROM marks) GROUP BY episode
)
SELECT marks.episode AS episode,
       marks.started_pos AS started_pos,
       marks.completed_pos AS completed_pos,
       coalesce(json_extract(s.facts, '$.domain'), '') AS domain,
       coalesce(json_extract(s.facts, '$.task'), '') AS task,
       coalesce(json_extract(s.facts, '$.trial'), 0) AS trial,
       coalesce(json_extract(s.facts, '$.forked_from'), '') AS forked_from,
       json_extract(c.facts, '$.outcome') AS outcome,
       json_extract(c.facts, '$.reward') AS reward,
       coalesce(json_extract(c.facts, '$.cause'), '') AS cause,
       coalesce(json_extract(c.facts, '$.turns'), 0) AS turns,
       coalesce(json_extract(c.facts, '$.tokens'), 0) AS tokens,
       counts.messages AS messages,
       counts.tool_calls AS tool_calls,
       counts.faults AS faults,
       counts.defenses AS defenses,
       counts.errors AS errors,
       counts.first_ts AS first_ts,
       counts.last_ts AS last_ts
FROM marks
JOIN counts ON counts.episode = marks.episode
LEFT JOIN messages AS s ON s.pos = marks.started_pos
LEFT JOIN messages AS c ON c.pos = marks.completed_pos
""",
    "faults": """
SELECT pos, episode, ts, sender,
       json_extract(facts, '$.rule_id') AS rule_id,
       json_extract(facts, '$.fault') AS fault,
       json_extract(facts, '$.original_id') AS original_id,
       json_extract(facts, '$.results') AS results
FROM messages WHERE kind = 'fault_applied'
""",
    "defenses": """
SELECT pos, episode, ts,
       json_extract(facts, '$.defense') AS defense,
       json_extract(facts, '$.agent') AS agent,
       json_extract(facts, '$.message_id') AS message_id,
       json_extract(facts, '$.reason') AS reason
FROM messages WHERE kind = 'defense_fired'
""",
    "model_calls": """
SELECT pos, episode, ts, sender AS agent,
       json_extract(facts, '$.index') AS call_index,
       json_extract(facts, '$.model') AS model,
       json_extract(facts, '$.prompt_tokens') AS prompt_tokens,
       json_extract(facts, '$.completion_tokens') AS completion_tokens,
       json_extract(facts, '$.latency_s') AS latency_s,
       json_extract(facts, '$.error') AS error
FROM messages WHERE kind = 'recording' AND json_extract(facts, '$.call') = 'llm'
""",
    "costs": """
SELECT episode, agent, model,
       count(*) AS calls,
       sum(prompt_tokens) AS prompt_tokens,
       sum(completion_tokens) AS completion_tokens,
       sum(prompt_tokens + completion_tokens) AS total_tokens,
       sum(latency_s) AS latency_s,
       sum(error != '') AS errors
FROM model_calls GROUP BY episode, agent, model
""",
}


def configure(conn: sqlite3.Connection, settings: JournalSettings) -> None:
    conn.execute(f"PRAGMA cache_size = -{settings.cache_size_mib * 1024}")
    conn.execute(f"PRAGMA wal_autocheckpoint = {settings.wal_autocheckpoint_pages}")


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""


def is_sqlite_file(path: Path) -> bool:
    """Whether `path` is an SQLite database by its first bytes (an HTML page or a JSON file is not)."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def table_names(conn: sqlite3.Connection, path: Path) -> set[str]:
    """Tables in the file; a file that is not SQLite is not a journal, an SQLite file that cannot be read is damaged."""
    try:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        if not is_sqlite_file(path):
            raise JournalError(f"{path}: not a Faultline journal (not an SQLite database file)") from None
        raise JournalError(
            f"{path}: a damaged database file ({exc}), cut short or overwritten: a journal's messages are also in the"
            " stream of the system that wrote it (`faultline journal serve NEW.sqlite` copies them again) and in any"
            " export of it (`faultline journal import`)"
        ) from None


def _messages_table() -> str:
    def column(c: Column) -> str:
        primary = " PRIMARY KEY" if c.name == "pos" else ""
        return f'   "{c.name}" {SQL_TYPES[c.type]}{primary}{" NOT NULL" if c.part != "derived" else ""}'

    return 'CREATE TABLE "messages" (\n' + ",\n".join(column(c) for c in MESSAGE_COLUMNS) + "\n)"


def _tables() -> list[str]:
    """The statements that make the tables and indexes, worded as the first journals had them (made with
    sqlite-utils then), so that every journal's `sqlite_master` reads alike."""
    return [
        'CREATE TABLE "meta" (\n   "key" TEXT PRIMARY KEY,\n   "value" TEXT NOT NULL\n)',
        _messages_table(),
        "CREATE TABLE blobs (key BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID",
        'CREATE INDEX "idx_messages_episode_pos"\n    ON "messages" ("episode", "pos")',
        'CREATE INDEX "idx_messages_kind"\n    ON "messages" ("kind")',
        _STREAM_SEQ_INDEX,
    ]


def create(conn: sqlite3.Connection, version: int = SCHEMA_VERSION) -> None:
    """Create every table, index, trigger and view of `version`; the caller holds the write transaction."""
    for statement in [*_tables(), *_TRIGGERS]:
        conn.execute(statement)
    for name, sql in _VIEWS.items():
        conn.execute(f'CREATE VIEW "{name}" AS {sql.strip()}')
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta = [("format", FORMAT), ("schema_version", str(version)), ("created", created)]
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta)


def check(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; JournalError unless it is a journal this version can read and write."""
    if not {"meta", "messages"} <= table_names(conn, path):
        raise JournalError(f"{path}: not a Faultline journal (no meta and messages tables)")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("format") != FORMAT:
        raise JournalError(f"{path}: not a Faultline journal (format is {meta.get('format')!r})")
    version = meta.get("schema_version", "")
    if not version.isdigit():
        raise JournalError(f"{path}: journal has no valid schema version ({version!r})")
    if int(version) > SCHEMA_VERSION:
        raise JournalError(
            f"{path}: journal schema {version} is newer than this Faultline reads ({SCHEMA_VERSION}); upgrade Faultline"
        )
    if int(version) < 1:
        raise JournalError(f"{path}: journal schema {version} is not one this Faultline reads")
    return int(version)


def connect_readonly(path: str | Path, settings: JournalSettings) -> sqlite3.Connection:
    """A query-only connection to an existing journal, checked to be one.

    The file itself is opened read-write when permissions allow, so that the last
    connection to close folds the WAL back in and a journal stays one file.
    """
    path = Path(path)
    if not path.is_file():
        raise JournalError(not_a_file(path, "a journal file"))
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=settings.busy_timeout_s
    )
    try:
        conn.execute("PRAGMA query_only = ON")
        check(conn, path)
        configure(conn, settings)
    except BaseException:
        conn.close()
        raise
    return conn
