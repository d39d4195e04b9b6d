"""Model requests are stored content-addressed and read back exactly as they were received."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import msgspec
import pytest

from faultline._errors import JournalError
from faultline.core import (
    ChatMessage,
    Envelope,
    LlmRequest,
    LlmResponse,
    Recording,
    UserTurn,
    body_bytes,
    derive_id,
    digest,
    encode,
)
from faultline.journal import Incoming, Journal, JournalReader, export_jsonl, import_jsonl, verify

from .conftest import STREAM, edit_as_attacker
from .test_golden import golden_copy

POLICY = "You are a retail agent. " * 40
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}} for i in range(5)]


def conversation(turns: int, who: str = "") -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content=POLICY)]
    for turn in range(turns):
        messages.append(ChatMessage(role="user", content=f"{who} turn {turn}: " + "details " * 20))
        messages.append(ChatMessage(role="assistant", content=f"assistant turn {turn}: " + "answer " * 20))
    return messages


def recording_envelopes(episode: str, turns: int) -> list[Envelope]:
    """What an agent holding a conversation of `turns` turns journals: one model call per turn."""
    envelopes = []
    for turn in range(turns):
        request = LlmRequest(role="agent", messages=conversation(turn + 1, episode), tools=TOOLS, metadata={"seed": 3})
        body = Recording(
            call="llm",
            index=0,
            request_digest=digest(encode(request)),
            request=request,
            response=LlmResponse(content=f"reply {turn}", model="m"),
        )
        envelopes.append(
            Envelope(id=derive_id(episode, turn), episode=episode, sender="tool_agent", body=body, ts=1.0 + turn)
        )
    return envelopes


def received(env: Envelope) -> bytes:
    """The body bytes as the journal service receives them from the wire."""
    return body_bytes(encode(env))


def append(path: Path, envelopes: list[Envelope], first_seq: int = 1) -> None:
    with Journal.open(path) as journal:
        journal.append(
            Incoming(STREAM, first_seq + i, f"fl.rec.{env.episode}.{env.sender}", env, received(env))
            for i, env in enumerate(envelopes)
        )


def stored(path: Path) -> tuple[int, int, list[bytes]]:
    """(bytes of stored bodies, bytes of blobs, first byte of each body) straight from the file."""
    with sqlite3.connect(path) as conn:
        bodies = [body for (body,) in conn.execute("SELECT body FROM messages ORDER BY pos")]
        (blob_bytes,) = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()
    return sum(map(len, bodies)), blob_bytes, [body[:1] for body in bodies]


def test_requests_read_back_byte_for_byte_and_each_item_is_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    envelopes = recording_envelopes("e1", 6)
    append(path, envelopes)
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [row.body for row in rows] == [received(env) for env in envelopes]
    assert [row.envelope() for row in rows] == [msgspec.convert(msgspec.to_builtins(e), Envelope) for e in envelopes]
    _, _, marks = stored(path)
    assert marks == [b"\xc1"] * 6
    with sqlite3.connect(path) as conn:
        (items,) = conn.execute("SELECT count(*) FROM blobs").fetchone()
    # Once each: the policy, each turn's two messages, each tool; then one list blob per call's
    # messages (each continuing the one before) and one for the tools, the same in every call.
    assert items == (1 + 2 * 6 + len(TOOLS)) + (6 + 1)
    assert verify(path).ok


def test_storage_grows_linearly_with_the_turns(tmp_path: Path) -> None:
    sizes = {}
    for turns in (10, 20, 40):
        path = tmp_path / f"{turns}.db"
        append(path, recording_envelopes("e", turns))
        bodies, blobs, _ = stored(path)
        sizes[turns] = bodies + blobs
    as_received = sum(len(received(env)) for env in recording_envelopes("e", 40))
    assert sizes[40] < 2.2 * sizes[20] < 4.4 * sizes[10]
    assert sizes[40] * 5 < as_received


def test_the_stored_form_decodes_cheaply_with_item_keys(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    append(path, recording_envelopes("e1", 3))
    with JournalReader(path, expand_requests=False) as reader:
        body = next(iter(reader.rows())).decoded_body()
    assert isinstance(body, Recording) and body.response["content"] == "reply 0"
    assert isinstance(body.request["messages"], bytes) and len(body.request["messages"]) == 16  # the list's key
    assert body.request["role"] == "agent" and body.request["metadata"] == {"seed": 3}


def test_rows_in_their_stored_form_are_never_copied_into_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    append(path, recording_envelopes("e1", 2))
    with JournalReader(path, expand_requests=False) as reader:
        row = next(iter(reader.rows()))
    with Journal.open(tmp_path / "copy.db") as copy, pytest.raises(JournalError, match="stored form"):
        copy.append([Incoming(STREAM, 1, "fl.rec.e1.tool_agent", row.envelope(), row.body)])


def test_a_body_another_encoder_wrote_is_stored_as_received(tmp_path: Path) -> None:
    """An encoder that spends two bytes on `index: 0` (msgpack allows it) cannot be rebuilt, so it is kept."""
    env = recording_envelopes("e1", 2)[1]
    foreign = received(env).replace(b"\xa5index\x00", b"\xa5index\xcc\x00", 1)
    assert foreign != received(env) and msgspec.msgpack.decode(foreign) == msgspec.msgpack.decode(received(env))
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append([Incoming(STREAM, 1, "fl.rec.e1.tool_agent", env, foreign)])
    assert stored(path)[2] == [foreign[:1]]
    with JournalReader(path) as reader:
        assert next(iter(reader.rows())).body == foreign
    assert verify(path).ok


def test_export_and_import_round_trip_stored_requests(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    append(path, recording_envelopes("e1", 4))
    out = io.StringIO()
    export_jsonl(path, out)
    rebuilt = tmp_path / "rebuilt.db"
    import_jsonl(out.getvalue().splitlines(), rebuilt)
    with JournalReader(path) as a, JournalReader(rebuilt) as b:
        assert list(a.rows()) == list(b.rows())
    assert stored(rebuilt) == stored(path)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("UPDATE blobs SET data = data || x'00' WHERE length(data) > 900", "row 1: request item"),
        ("DELETE FROM blobs WHERE length(data) > 900", "row 1: request item"),
        ("UPDATE messages SET body = body || x'00' WHERE pos = 2", "row 2: body digest mismatch (body edited)"),
        ("UPDATE blobs SET key = randomblob(16) WHERE length(data) > 900", "row 1: request item"),
        ("INSERT INTO blobs VALUES (randomblob(16), x'00')", "does not match its key (blobs edited)"),
    ],
)
def test_verify_names_the_row_whose_request_items_were_edited(tmp_path: Path, edit: str, problem: str) -> None:
    path = tmp_path / "j.db"
    append(path, recording_envelopes("e1", 3))
    edit_as_attacker(path, edit)
    report = verify(path)
    assert not report.ok and problem in report.problem
    assert "does not match its key" in report.problem or "missing from blobs" in report.problem or "body" in edit


def test_a_resumed_check_checks_the_blobs_of_the_rows_appended_since(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    append(path, recording_envelopes("e1", 2))
    assert verify(path, resume=True).ok
    append(path, recording_envelopes("e2", 2), first_seq=10)
    edit_as_attacker(path, "UPDATE blobs SET data = data || x'00' WHERE instr(data, CAST('e2 turn 1' AS BLOB)) > 0")
    report = verify(path, resume=True)
    assert (
        report.position == 4
        and report.rows == 3
        and "row 4: request item" in report.problem
        and "does not match its key" in report.problem
    )


def test_a_version_1_journal_keeps_its_format_when_appended_to(tmp_path: Path) -> None:
    path = golden_copy(tmp_path)
    append(path, recording_envelopes("later", 2), first_seq=1000)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "blobs" not in tables
    assert verify(path).ok
    with JournalReader(path) as reader:
        assert [row.body for row in reader.episode_rows("later")] == [
            received(env) for env in recording_envelopes("later", 2)
        ]


def test_a_user_turn_is_never_stored_another_way(tmp_path: Path) -> None:
    env = Envelope(id="u1", episode="e1", sender="user", recipient="tool_agent", body=UserTurn(text="hi"), ts=1.0)
    path = tmp_path / "j.db"
    with Journal.open(path) as journal:
        journal.append([Incoming(STREAM, 1, "fl.msg.e1.tool_agent", env, received(env))])
    assert stored(path)[2] == [received(env)[:1]]


def test_one_episode_queries_its_blobs_and_a_whole_journal_reads_them_in_one_scan(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    append(path, [env for i in range(40) for env in recording_envelopes(f"e{i}", 3)])
    statements: list[str] = []
    with JournalReader(path) as reader:
        reader._files[0]._conn.set_trace_callback(statements.append)
        assert len(list(reader.episode_rows("e7"))) == 3
        scans = [sql for sql in statements if sql.startswith("SELECT key") and "WHERE" not in sql]
        assert not scans and any("WHERE key IN" in sql for sql in statements)
        assert len(list(reader.rows())) == 120
        scans = [sql for sql in statements if sql.startswith("SELECT key") and "WHERE" not in sql]
    assert len(scans) == 1
