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
    # The fault leaves its rule's controls in the journal: rows of no episode, which count as none.
    run = ["run", "--tasks", "2", "--helpers", "verifier", "--fault", "storm", "--journal", str(path), "--json"]
    assert main(run) == 0
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
    assert summary["turns"] == len(turns) > 0 and summary["episodes"] == 2
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


def test_an_answer_to_a_reflection_request_in_another_form_is_scored_for_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tool agent reflects after a failed call; a `scripted` model calls a tool that does not exist and, asked
    to reflect, answers in prose, as a small real model did. Each such turn is scored (0: no part of the form),
    not left out as if nobody had asked for the form."""
    (tmp_path / "rules.jsonl").write_text(
        '{"role": "tool", "contains": "unknown tool", "reply": "I am sorry, something went wrong."}\n'
        '{"role": "tool", "tool_calls": [{"name": "nope", "arguments": {}}]}\n'
    )
    (tmp_path / "faultline.toml").write_text(
        '[models.tool]\nbackend = "scripted"\nscript = "rules.jsonl"\nreflection = "after_error"\n'
    )
    journal = tmp_path / "j.sqlite"
    argv = ["run", "--config", str(tmp_path / "faultline.toml"), "--tasks", "1", "--max-turns", "2"]
    assert main([*argv, "--journal", str(journal), "--json"]) == 0
    capsys.readouterr()
    assert main(["report", "--reflection", str(journal), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    turns = [line for line in lines if line["type"] == "turn"]
    assert turns and lines[-1]["agents"] == {"tool": len(turns)}
    assert all(t["total"] == 0.0 for t in turns)
