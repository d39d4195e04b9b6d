"""A run with memory on, after a run that filled it, retrieves past episodes (recorded, replayable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import JournalReader
from tests import jsonl

pytestmark = pytest.mark.slow


def test_a_second_run_retrieves_what_the_first_one_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "first.sqlite", tmp_path / "second.sqlite"
    base = ["run", "--tasks", "6", "--memory", "topk:3", "--json"]
    assert main([*base, "--error-rates", "0.2", "--journal", str(first), "--run-id", "fill"]) == 0
    assert main([*base, "--journal", str(second), "--run-id", "use"]) == 0
    capsys.readouterr()
    assert main(["memory", "stats", "--store", str(tmp_path / "memory.sqlite"), "--json"]) == 0
    _, stats = jsonl.read(capsys.readouterr().out)
    assert stats["entries"] == 12
    with JournalReader(second) as reader:
        episode = reader.episodes()[0].episode
        recordings = [
            r.envelope().body for r in reader.episode_rows(episode) if r.kind == "recording" and r.sender == "tool"
        ]
    memory = [r for r in recordings if r.call == "request"]  # type: ignore[union-attr]
    assert len(memory) == 1 and not memory[0].error  # type: ignore[union-attr]
    retrieved = memory[0].response["entries"]  # type: ignore[union-attr]
    assert len(retrieved) == 3
    assert {e["entry"]["episode"].split("-")[0] for e in retrieved} <= {"fill", "use"}
    assert main(["journal", "show", str(second), "--episode", episode]) == 0
    shown = capsys.readouterr().out
    assert (
        "request#0" in shown
        and retrieved[0]["entry"]["query"][:30] in shown.replace("\n", " ").replace("  ", " ")
        or '"entries"' in shown
    )
    assert main(["replay", str(second)]) == 0
