"""Export to JSON lines and import back gives the same journal, or refuses at the first bad row."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from faultline._errors import ChainError, JournalError
from faultline.bus import Envelope, Note
from faultline.journal import Journal, JournalReader, export_jsonl, import_jsonl, verify

from .conftest import STREAM


def exported(path: Path, *, raw: bool = False) -> str:
    out = io.StringIO()
    export_jsonl(path, out, raw=raw)
    return out.getvalue()


def all_rows(path: Path) -> list[object]:
    with JournalReader(path) as reader:
        return list(reader.rows())


def test_export_then_import_gives_an_identical_journal(journal_file: Path, tmp_path: Path) -> None:
    text = exported(journal_file)
    assert len(text.splitlines()) == 18
    copy = tmp_path / "copy.db"
    assert import_jsonl(text.splitlines(), copy) == 18
    assert all_rows(copy) == all_rows(journal_file)
    assert exported(copy) == text
    assert verify(copy).head == verify(journal_file).head


def test_exported_rows_carry_decoded_bodies(journal_file: Path) -> None:
    first, *_, last = (json.loads(line) for line in exported(journal_file).splitlines())
    assert first["pos"] == 1 and first["kind"] == "episode_started"
    assert first["body"]["kind"] == "episode_started" and first["body"]["domain"] == "retail"
    assert last["body"] == {
        "kind": "episode_completed",
        "outcome": "failure",
        "reward": 0.0,
        "turns": 2,
        "tokens": 150,
    }
    assert "body_raw" not in first


def test_an_edited_export_is_refused_at_the_right_row(journal_file: Path, tmp_path: Path) -> None:
    lines = exported(journal_file).splitlines()
    row = json.loads(lines[10])
    row["body"]["text"] = "Cancel everything."
    lines[10] = json.dumps(row)
    with pytest.raises(ChainError, match=r"line 11 \(row 11\): body digest differs") as raised:
        import_jsonl(lines, tmp_path / "copy.db")
    assert raised.value.position == 11
    assert not list(tmp_path.glob("copy.db*"))


def test_an_export_missing_a_row_is_refused(journal_file: Path, tmp_path: Path) -> None:
    lines = exported(journal_file).splitlines()
    del lines[4]
    with pytest.raises(ChainError, match=r"line 5 \(row 6\): expected position 5"):
        import_jsonl(lines, tmp_path / "copy.db")


def test_bytes_inside_untyped_fields_need_raw_bodies_to_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    env = Envelope(id="n1", episode="ep", sender="a", recipient="b", body=Note(data={"blob": b"\x00\x01"}))
    with Journal.open(path) as journal:
        journal.append([(STREAM, 1, "fl.ep.ep.b", env)])
    with pytest.raises(ChainError, match="JSON lost a value type"):
        import_jsonl(exported(path).splitlines(), tmp_path / "lossy.db")
    assert import_jsonl(exported(path, raw=True).splitlines(), tmp_path / "exact.db") == 1
    assert all_rows(tmp_path / "exact.db") == all_rows(path)


def test_import_never_overwrites(journal_file: Path) -> None:
    with pytest.raises(JournalError, match="already exists"):
        import_jsonl(exported(journal_file).splitlines(), journal_file)


def test_a_line_that_is_not_a_row_is_named(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="line 2: not an exported journal row"):
        import_jsonl(["", '{"pos": "one"}'], tmp_path / "copy.db")
