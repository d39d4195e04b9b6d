"""Export to JSON lines and import back gives the same journal, or refuses at the first bad row."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ChainError, JournalError
from faultline.cli import main
from faultline.core import Envelope, Note
from faultline.journal import Incoming, Journal, JournalReader, export_jsonl, import_jsonl, verify

from .conftest import STREAM


def exported(path: Path, *, raw: bool = True) -> str:
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


def test_exported_rows_carry_decoded_bodies_and_their_stored_bytes(journal_file: Path) -> None:
    first, *_, last = (json.loads(line) for line in exported(journal_file).splitlines())
    with JournalReader(journal_file) as reader:
        assert base64.b64decode(first["body_raw"]) == reader.row(1).body
    assert first["pos"] == 1 and first["kind"] == "episode_started"
    assert first["body"]["kind"] == "episode_started" and first["body"]["domain"] == "retail"
    assert last["body"] == {
        "kind": "episode_completed",
        "outcome": "failure",
        "reward": 0.0,
        "turns": 2,
        "tokens": 150,
    }
    assert "body_raw" not in json.loads(exported(journal_file, raw=False).splitlines()[0])


@pytest.mark.parametrize(
    ("raw", "refusal"),
    [(True, "body differs from body_raw"), (False, "body digest differs from the exported one")],
)
def test_an_edited_body_is_refused_at_its_row(journal_file: Path, tmp_path: Path, raw: bool, refusal: str) -> None:
    lines = exported(journal_file, raw=raw).splitlines()
    row = json.loads(lines[10])
    row["body"]["text"] = "Cancel everything."
    lines[10] = json.dumps(row)
    with pytest.raises(ChainError, match=rf"line 11 \(row 11\): {refusal}") as raised:
        import_jsonl(lines, tmp_path / "copy.db")
    assert raised.value.position == 11
    assert not list(tmp_path.glob("copy.db*"))


def test_edited_body_bytes_are_refused_at_their_row(journal_file: Path, tmp_path: Path) -> None:
    lines = exported(journal_file).splitlines()
    row, other = json.loads(lines[10]), json.loads(lines[3])
    row["body"], row["body_raw"] = other["body"], other["body_raw"]
    lines[10] = json.dumps(row)
    with pytest.raises(ChainError, match=r"line 11 \(row 11\): body digest differs"):
        import_jsonl(lines, tmp_path / "copy.db")


def test_an_export_missing_a_row_is_refused(journal_file: Path, tmp_path: Path) -> None:
    lines = exported(journal_file).splitlines()
    del lines[4]
    with pytest.raises(ChainError, match=r"line 5 \(row 6\): expected position 5"):
        import_jsonl(lines, tmp_path / "copy.db")


@pytest.mark.parametrize(
    "data",
    [{"blob": b"\x00\x01"}, {"zebra": 1, "apple": 2}],
    ids=["bytes in an untyped field", "keys not in sorted order"],
)
def test_bodies_json_cannot_carry_round_trip_through_their_stored_bytes(tmp_path: Path, data: dict) -> None:  # type: ignore[type-arg]
    path = tmp_path / "j.db"
    env = Envelope(id="n1", episode="ep", sender="a", recipient="b", body=Note(data=data))
    with Journal.open(path) as journal:
        # As a worker publishes it: keys in insertion order, not the journal's own sorted encoding.
        journal.append([Incoming(STREAM, 1, "fl.ep.ep.b", env, msgspec.msgpack.encode(env.body))])
    assert import_jsonl(exported(path).splitlines(), tmp_path / "exact.db") == 1
    assert all_rows(tmp_path / "exact.db") == all_rows(path)
    with pytest.raises(ChainError, match="JSON lost a value type"):
        import_jsonl(exported(path, raw=False).splitlines(), tmp_path / "lossy.db")


def test_an_import_brings_its_head_record_and_verifies(journal_file: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    import_jsonl(exported(journal_file).splitlines(), copy)
    assert sorted(p.name for p in tmp_path.glob("copy.db*")) == ["copy.db", "copy.db.head"]
    report = verify(copy)
    assert report.ok and report.recorded_rows == 18 and report.head == verify(journal_file).head


def test_import_never_overwrites(journal_file: Path) -> None:
    with pytest.raises(JournalError, match="already exists"):
        import_jsonl(exported(journal_file).splitlines(), journal_file)


def test_a_line_that_is_not_a_row_is_named(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="line 2: not an exported journal row"):
        import_jsonl(["", '{"pos": "one"}'], tmp_path / "copy.db")


def test_a_run_journal_exported_and_imported_verifies_and_replays_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bodies as workers published them (dicts in insertion order, faults, recordings) survive the round trip."""
    source, text, copy = tmp_path / "run.sqlite", tmp_path / "run.jsonl", tmp_path / "copy.sqlite"
    fault = "parameter_format_error:probability=1,budget=1"
    run = ["run", "--tasks", "3", "--error-rates", "0.2", "--fault", fault, "--journal", str(source), "--json"]
    assert main(run) == 0
    assert main(["journal", "export", str(source), "-o", str(text)]) == 0
    assert main(["journal", "import", str(text), str(copy)]) == 0
    assert main(["journal", "verify", str(copy)]) == 0
    out = capsys.readouterr().out.splitlines()
    head = verify(source).head
    assert out[-2].endswith(f"digests and chain match the export, head {head}")
    assert out[-1].startswith(f"ok: {verify(source).rows} rows, chain holds, head {head}")
    assert all_rows(copy) == all_rows(source)
    assert main(["replay", str(copy)]) == 0
    assert capsys.readouterr().out.startswith("identical")
