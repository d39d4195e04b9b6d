"""The row layout is written once, in `_schema.MESSAGE_COLUMNS`; the file, the rows and the export follow it."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import msgspec

from faultline.core import Envelope, EpisodeCompleted
from faultline.journal import GENESIS, ExportedRow, Incoming, Journal, JournalRow, export_jsonl
from faultline.journal._rows import seal
from faultline.journal._schema import COLUMNS, DIGESTED, MESSAGE_COLUMNS, ROW_COLUMNS, SQL_TYPES

from .conftest import STREAM
from .test_golden import golden_copy


def schema(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()


def test_a_new_journal_has_exactly_the_columns_of_the_one_definition(tmp_path: Path) -> None:
    Journal.open(tmp_path / "j.db").close()
    with sqlite3.connect(tmp_path / "j.db") as conn:
        table = [row[1:] for row in conn.execute("PRAGMA table_info(messages)")]
    assert table == [
        (column.name, SQL_TYPES[column.type], int(column.part != "derived"), None, int(column.name == "pos"))
        for column in MESSAGE_COLUMNS
    ]


def test_a_new_journal_is_laid_out_like_the_golden_one_plus_the_request_blobs(tmp_path: Path) -> None:
    """The golden journal is version 1; version 2 adds only the blobs table and its append-only triggers."""
    Journal.open(tmp_path / "j.db").close()
    added = [entry for entry in schema(tmp_path / "j.db") if entry not in schema(golden_copy(tmp_path))]
    assert [(kind, name) for kind, name, _ in added] == [
        ("table", "blobs"),
        ("trigger", "blobs_no_delete"),
        ("trigger", "blobs_no_update"),
    ]
    assert set(schema(golden_copy(tmp_path))) <= set(schema(tmp_path / "j.db"))


def test_digested_columns_come_first_and_derived_ones_last() -> None:
    parts = [column.part for column in MESSAGE_COLUMNS]
    assert parts == sorted(parts, key=["digested", "stored", "derived"].index)
    assert COLUMNS[:DIGESTED] == ROW_COLUMNS[: ROW_COLUMNS.index("body")]


def test_journal_rows_hold_the_stored_columns_in_order() -> None:
    fields = [(field.name, field.type) for field in msgspec.structs.fields(JournalRow)]
    assert fields == [(column.name, column.type) for column in MESSAGE_COLUMNS if column.part != "derived"]


def test_an_export_line_has_exactly_the_stored_columns_and_the_raw_body(journal_file: Path) -> None:
    out = io.StringIO()
    export_jsonl(journal_file, out)
    first, *rest = (list(json.loads(line)) for line in out.getvalue().splitlines())
    assert first == list(ExportedRow.__struct_fields__)  # only the first row says the schema version
    assert all(fields == list(ExportedRow.__struct_fields__[:-1]) for fields in rest)
    assert set(ExportedRow.__struct_fields__) == {*ROW_COLUMNS, "body_raw", "schema"}
    types = {field.name: field.type for field in msgspec.structs.fields(ExportedRow)}
    assert all(
        types[column.name] is column.type
        for column in MESSAGE_COLUMNS
        if column.part != "derived" and column.name != "body"
    )


def test_seal_puts_every_value_in_its_named_column() -> None:
    env = Envelope(
        id="the-id",
        episode="the-episode",
        sender="the-sender",
        recipient="the-recipient",
        topic="the-topic",
        body=EpisodeCompleted(outcome="success", reward=1.0),
        causation="the-cause",
        hops=7,
        ts=1_767_225_600.5,
    )
    (sealed,) = seal([Incoming(STREAM, 42, "the-subject", env)], 9, GENESIS)
    row = dict(zip(COLUMNS, sealed, strict=True))
    assert {name: row[name] for name in ("pos", "stream", "stream_seq", "subject", "kind")} == {
        "pos": 10,
        "stream": STREAM,
        "stream_seq": 42,
        "subject": "the-subject",
        "kind": "episode_completed",
    }
    envelope_columns = [name for name in ROW_COLUMNS if name in Envelope.__struct_fields__ and name != "body"]
    assert {name: row[name] for name in envelope_columns} == {name: getattr(env, name) for name in envelope_columns}
    assert json.loads(row["facts"])["outcome"] == "success"
    assert JournalRow(*(row[name] for name in ROW_COLUMNS)).envelope() == env
