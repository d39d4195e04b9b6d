"""`faultline diff FORKS:EPISODE` compares a fork with the episode it was made from, found in the source journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.cli import main

from .test_fork import repair_wrong_call


def test_a_fork_is_compared_with_its_source_and_differs_from_the_fork_point(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos, result = repair_wrong_call(journal_copy, tmp_path, capsys)
    assert main(["diff", f"{result['journal']}:{result['episode']}", "--json"]) == 1
    out, err = capsys.readouterr()
    assert not err, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary, steps = lines[-1], lines[:-1]
    assert summary["b"] == f"{journal_copy}:{episode}"
    first = steps[summary["first_difference"] - 1]
    assert (first["kind"], first["b_pos"]) == ("tool_call", pos), "the fork differs first where it replaced the call"
    assert all(step["status"] == "same" for step in steps[: summary["first_difference"] - 1])
    assert summary["a_outcome"].startswith("success") and summary["b_outcome"].startswith("failure")


def test_a_fork_finds_its_source_beside_the_html_view_of_the_same_journal(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline view` writes JOURNAL.html beside the journal; it is no journal, and diff passes it by."""
    episode, _, result = repair_wrong_call(journal_copy, tmp_path, capsys)
    journal_copy.with_suffix(".html").write_text("<html>the view</html>")
    assert main(["diff", f"{result['journal']}:{result['episode']}", "--json"]) == 1
    out, err = capsys.readouterr()
    assert not err, err
    assert json.loads(out.splitlines()[-1])["b"] == f"{journal_copy}:{episode}"
