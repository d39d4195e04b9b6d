"""An episode the journal does not hold is the journal's error (exit 1), in one wording, in every command that names
one; a journal with no failed episode leaves `attribute --all-failed` nothing to do, which is no mistake (exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import Journal
from tests.journal.conftest import episode_envelopes, incoming, two_episode_journal


@pytest.mark.parametrize(
    "argv",
    [
        ["view", "{j}", "--episode", "nope", "-o", "{tmp}/v.html"],
        ["diff", "{j}:nope", "ep-a"],
        ["journal", "show", "{j}", "--episode", "nope"],
        ["journal", "otel", "{j}", "--episode", "nope", "--endpoint", "http://127.0.0.1:9"],
        ["journal", "export", "{j}", "--episode", "nope"],
        ["replay", "{j}", "--episode", "nope"],
        ["view", "{j}", "--episode", "nope", "--status", "passed", "-o", "{tmp}/v.html"],
    ],
    ids=["view", "diff", "journal show", "journal otel", "journal export", "replay", "view, filtered"],
)
def test_an_unknown_episode_is_the_journals_error(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = two_episode_journal(tmp_path / "journal.db")
    assert main([a.format(j=journal, tmp=tmp_path) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err == f"faultline: error: {journal}: no episode 'nope'; `faultline journal episodes {journal}` lists them\n"


def test_attribute_all_failed_with_no_failure_says_so_and_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "passed.db"
    with Journal.open(journal) as writer:
        writer.append(incoming(episode_envelopes("ep-a")))
    assert main(["attribute", str(journal), "--all-failed"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"{journal}: no failed episode, nothing to attribute\n", "")
    assert main(["attribute", str(journal), "--all-failed", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["type"], summary["episodes"], summary["forks"]) == ("summary", 0, 0)


def test_run_narrows_every_filtering_command_to_one_runs_episodes_and_an_unknown_run_is_the_journals_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "shared.db"
    with Journal.open(journal) as writer:
        episodes = ("c1-storm-1", "c1-storm-2", "c1-scope-1", "c1-baseline-1")
        writer.append(incoming([env for episode in episodes for env in episode_envelopes(episode)]))
    assert main(["journal", "episodes", str(journal), "--run", "c1-storm", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(row["episode"] for row in rows if row["type"] == "episode") == ["c1-storm-1", "c1-storm-2"]
    assert main(["journal", "export", str(journal), "--run", "c1-baseline", "-o", str(tmp_path / "one.jsonl")]) == 0
    exported = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    assert {row["episode"] for row in exported if "episode" in row} == {"c1-baseline-1"}
    assert main(["journal", "episodes", str(journal), "--run", "c2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"faultline: error: {journal}: no episode of run 'c2' (the run an episode's start records;")


def test_run_takes_the_episodes_whose_starts_record_it_not_every_one_whose_id_begins_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "shared.db"
    recorded = {"c1-1-t1": "c1-1", "c1-1-r1-t2": "c1-1", "c1-1-x-t1": "c1-1-x"}
    with Journal.open(journal) as writer:
        writer.append(incoming([env for e, run in recorded.items() for env in episode_envelopes(e, run=run)]))
    assert main(["journal", "episodes", str(journal), "--run", "c1-1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(row["episode"] for row in rows if row["type"] == "episode") == ["c1-1-r1-t2", "c1-1-t1"]
    assert main(["journal", "export", str(journal), "--run", "c1-1-x", "-o", str(tmp_path / "x.jsonl")]) == 0
    exported = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert {row["episode"] for row in exported if "episode" in row} == {"c1-1-x-t1"}
    assert main(["journal", "episodes", str(journal), "--run", "c1-1-r1"]) == 1
    assert "no episode of run 'c1-1-r1'" in capsys.readouterr().err
