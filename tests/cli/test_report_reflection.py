"""`faultline report --reflection JOURNAL` on a small sim journal whose verifier answers in the form."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from faultline.cli import main

EXACT_CALL_WITH_EXTRA_REFLECTION = 1 - 0.8 * (0.8 * 0.1) * 0.3
"""S = 1; the reference has no reflection, so the verifier's costs l_extra * alpha_r, reduced by rho = 0.3."""


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reflection") / "j.sqlite"
    assert main(["run", "--tasks", "2", "--helpers", "verifier", "--journal", str(path), "--json"]) == 0
    return path


def test_json_scores_every_verifier_answer_against_the_gold_action(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["report", "--reflection", str(journal), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    turns = [line for line in lines if line["type"] == "turn"]
    components = {line["component"]: line for line in lines if line["type"] == "component"}
    summary = lines[-1]
    assert summary["type"] == "summary"
    assert summary["turns"] == len(turns) > 0
    assert summary["agents"] == {"verifier": len(turns)} and summary["skipped"] == 0
    assert {t["model"] for t in turns} == {"sim"} and "not a model" in summary["note"]
    assert all(0.0 <= t["total"] <= 1.0 for t in turns)
    exact = [t for t in turns if t["call"] == 1.0]
    assert exact and all(t["total"] == pytest.approx(EXACT_CALL_WITH_EXTRA_REFLECTION) for t in exact)
    assert all(t["reflection"] is None for t in turns) and components["reflection"]["n"] == 0
    totals = [t["total"] for t in turns]
    total = components["total"]
    assert total["n"] == len(turns)
    assert total["mean"] == pytest.approx(statistics.fmean(totals))
    assert (total["min"], total["median"], total["max"]) == (min(totals), statistics.median(totals), max(totals))
    assert components["call"]["n"] + components["final"]["n"] == len(turns)


def test_the_table_names_each_component(journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report", "--reflection", str(journal)]) == 0
    out = capsys.readouterr().out
    assert "structured-reflection reward" in out
    assert all(name in out for name in ("reflection", "call", "final", "format", "total"))


def test_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report"]) == 2
    assert main(["report", str(tmp_path), "--reflection", str(tmp_path / "j.sqlite")]) == 2
    assert main(["report", "--reflection", str(tmp_path / "absent.sqlite")]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 3 and all(line.startswith("faultline: ") for line in errors)
    assert "absent.sqlite" in errors[2]
