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
