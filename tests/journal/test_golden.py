"""A journal written by an earlier version must still open, verify, decode and export the same.

`golden/two_episodes.db` and its export `golden/two_episodes.jsonl` are committed; if a
change to encoding, digests, the chain or the schema breaks them, old journals are broken too.
The export carries raw bodies: an export must round-trip whatever encoder wrote the journal.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.core import EpisodeStarted, encode
from faultline.journal import JournalReader, export_jsonl, import_jsonl, verify
from faultline.replay import Replayer
from faultline.runtime import Config, agent_lookup

from .conftest import edit_as_attacker

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_HEAD = "5a6787a2e186df6b1725c64dce77eb45"
GOLDEN_V2_HEAD = "23378a6f1a52acdaecf3af3cab883a70"
"""`golden/two_episodes_v2.db`: two sim episodes written with schema 2 (model requests in blobs)."""


def golden_copy(tmp_path: Path) -> Path:
    """Readers may create WAL side files, so the committed file is only ever copied."""
    return Path(shutil.copy(GOLDEN / "two_episodes.db", tmp_path / "golden.db"))


def test_the_golden_journal_verifies_with_its_pinned_head(tmp_path: Path) -> None:
    report = verify(golden_copy(tmp_path), anchor=GOLDEN_HEAD)
    assert report.ok and report.rows == 18 and report.head == GOLDEN_HEAD


def test_the_golden_journal_decodes_and_exports_as_committed(tmp_path: Path) -> None:
    path = golden_copy(tmp_path)
    with JournalReader(path) as reader:
        envelopes = [row.envelope() for row in reader.rows()]
        assert [e.outcome for e in reader.episodes()] == ["success", "failure"]
    assert [env.kind for env in envelopes[:4]] == ["episode_started", "user_turn", "recording", "tool_call"]
    out = io.StringIO()
    export_jsonl(path, out, raw=True)
    assert out.getvalue() == (GOLDEN / "two_episodes.jsonl").read_text()


def test_the_golden_export_rebuilds_the_golden_journal(tmp_path: Path) -> None:
    rebuilt = tmp_path / "rebuilt.db"
    with (GOLDEN / "two_episodes.jsonl").open("rb") as lines:
        assert import_jsonl(lines, rebuilt) == 18
    with JournalReader(rebuilt) as a, JournalReader(golden_copy(tmp_path)) as b:
        assert list(a.rows()) == list(b.rows())


def test_fault_events_that_name_no_message_replay_and_are_refused_an_undo_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The golden journal's fault events, written by hand, name only an id where the runtime records the envelope
    the fault replaced, like one any agent's credential may publish as its own: replay raised on them, and a fork
    that undid one ended in a traceback."""
    path = golden_copy(tmp_path)
    assert Replayer(agent_lookup(Config())).replay(path).identical
    with JournalReader(path) as reader:
        fault = next(row for row in reader.rows() if row.kind == "fault_applied")
    assert main(["fork", str(path), "--episode", fault.episode, "--at", str(fault.pos), "--undo-fault"]) == 1
    assert capsys.readouterr().err == (
        f"faultline: error: position {fault.pos} holds a fault event that names no message it replaced:"
        " nothing to undo\n"
    )


@pytest.mark.parametrize("name", ["two_episodes.db", "two_episodes_v2.db"])
def test_starts_journaled_before_they_recorded_a_run_decode_with_none(name: str, tmp_path: Path) -> None:
    with JournalReader(shutil.copy(GOLDEN / name, tmp_path / name)) as reader:
        starts = [row.decoded_body() for row in reader.rows() if row.kind == "episode_started"]
    assert [(type(s), s.run) for s in starts if isinstance(s, EpisodeStarted)] == [(EpisodeStarted, "")] * 2


def test_a_start_of_no_run_encodes_as_it_was_journaled_before_starts_recorded_one(tmp_path: Path) -> None:
    """`EpisodeStarted.run` is left out of the encoding where it is empty: such a start keeps its bytes, so its
    digest (`golden/two_episodes_v2.db` was written with defaults left out, the first golden journal before)."""
    with JournalReader(golden_v2_copy(tmp_path)) as reader:
        starts = [row for row in reader.rows() if row.kind == "episode_started"]
    assert len(starts) == 2
    assert [encode(row.decoded_body()) for row in starts] == [row.body for row in starts]


def golden_v2_copy(tmp_path: Path) -> Path:
    return Path(shutil.copy(GOLDEN / "two_episodes_v2.db", tmp_path / "golden_v2.db"))


def test_a_schema_2_journal_verifies_replays_and_round_trips_through_an_export(tmp_path: Path) -> None:
    path = golden_v2_copy(tmp_path)
    report = verify(path, anchor=GOLDEN_V2_HEAD)
    assert report.ok and report.rows == 92 and report.head == GOLDEN_V2_HEAD
    replayed = Replayer(agent_lookup(Config())).replay(path)
    assert replayed.identical and replayed.episodes == 2 and replayed.messages > 0
    out = io.StringIO()
    export_jsonl(path, out)
    rebuilt = tmp_path / "rebuilt.db"
    assert import_jsonl(out.getvalue().splitlines(), rebuilt) == 92
    with JournalReader(rebuilt) as a, JournalReader(path) as b:
        assert a.version == b.version == 2
        assert list(a.rows()) == list(b.rows())


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("UPDATE blobs SET data = data || x'00' WHERE length(data) > 900", "body digest mismatch"),
        ("DELETE FROM blobs WHERE length(data) > 900", "missing from blobs"),
    ],
)
def test_a_schema_2_journal_still_rebuilds_requests_to_check_them(tmp_path: Path, edit: str, problem: str) -> None:
    path = golden_v2_copy(tmp_path)
    edit_as_attacker(path, edit)
    report = verify(path)
    assert not report.ok and problem in report.problem
