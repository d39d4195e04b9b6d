"""`faultline replay --status ...` replays exactly the episodes the filter selects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import JournalReader


def test_replay_takes_the_episode_filters(sim_journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(sim_journal) as reader:
        failed = [e for e in reader.episodes() if e.outcome == "failure"]
    assert failed, "the sim journal has failed episodes"
    assert main(["replay", str(sim_journal), "--status", "failed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"] == len(failed) and report["identical"]


def test_attribute_takes_the_episode_filters(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        episodes = reader.episodes()
    passed = next(e.episode for e in episodes if e.outcome == "success")
    failed = next(e.episode for e in episodes if e.outcome == "failure")
    assert main(["attribute", str(journal_copy), "--all-failed", "--status", "passed"]) == 2
    assert "no episode matches the filters" in capsys.readouterr().err
    assert main(["attribute", str(journal_copy), "-e", passed, "-e", failed, "--status", "failed", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["episode"] for d in lines if d["type"] == "episode"] == [failed]
