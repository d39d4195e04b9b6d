"""examples/research end to end from its folder, as its README runs it: run, replay, a faulted run and its
attribution, a campaign and its report; on the scripted model, in separate worker processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from faultline.cli import main

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[2] / "examples" / "research"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example, as the working folder."""
    copy = tmp_path / "research"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    monkeypatch.chdir(copy)
    return copy


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_run_then_replay_is_identical(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--json"]) == 0
    (summary,) = lines(capsys)
    assert summary["outcomes"] == {"success": 3, "failure": 1}
    assert main(["replay", "runs/journal.sqlite"]) == 0
    assert "identical: 4 episodes" in capsys.readouterr().out


def test_a_fault_on_a_researcher_is_found_by_attribution(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fault = "critical_information_loss:from=researcher_a"
    assert main(["run", "--json", "--task-ids", "france-japan", "--fault", fault, "--journal", "runs/f.sqlite"]) == 0
    (summary,) = lines(capsys)
    assert summary["outcomes"] == {"failure": 1}
    assert main(["attribute", "runs/f.sqlite", "--all-failed", "--json"]) == 0
    episode, _ = lines(capsys)
    assert (episode["method"], episode["agent"], episode["fault"], episode["decided"]) == (
        "fault-event repair",
        "researcher_a",
        "critical_information_loss",
        True,
    )


def test_a_campaign_reports_each_fault_against_the_baseline(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", "runs/campaign", "--tasks", "2", "--faults", "storm,critical_information_loss"]
    assert main(["campaign", *out, "--episode-timeout", "10"]) == 0
    capsys.readouterr()
    assert main(["report", "runs/campaign", "--json"]) == 0
    rows = {row["fault"]: row for row in lines(capsys) if row.get("type") == "fault"}
    assert set(rows) == {"storm", "critical_information_loss"}
    assert rows["storm"]["rs"] == 1.0
    assert rows["critical_information_loss"]["rs"] < 1.0
