"""Two episodes aligned by what their messages say, the first difference found, the CLI's two outputs."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from faultline.cli import main
from faultline.core import Envelope, EpisodeCompleted, ToolResult
from faultline.journal import Journal, JournalReader, diff_episodes

from .conftest import episode_envelopes, incoming


def journal_of(path: Path, *episodes: list[Envelope]) -> Path:
    with Journal.open(path) as journal:
        seq = 1
        for envelopes in episodes:
            journal.append(incoming(envelopes, first_seq=seq))
            seq += len(envelopes)
    return path


def rows(path: Path, episode: str) -> list:  # type: ignore[type-arg]
    with JournalReader(path) as reader:
        return list(reader.episode_rows(episode))


def with_tool_output(envelopes: list[Envelope], output: dict) -> list[Envelope]:  # type: ignore[type-arg]
    return [
        msgspec.structs.replace(env, body=ToolResult(call_id="c1", name="get_order", output=output))
        if isinstance(env.body, ToolResult)
        else env
        for env in envelopes
    ]


def test_the_same_messages_under_other_ids_and_times_are_identical(tmp_path: Path) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), episode_envelopes("ep-b", t0=1_800_000_000.0))
    result = diff_episodes("a", rows(path, "ep-a"), "b", rows(path, "ep-b"))
    assert result.identical and {step.status for step in result.steps} == {"same"}
    assert len(result.steps) == 8  # every message but the episode start


def test_two_trials_that_did_the_same_in_other_times_are_identical(tmp_path: Path) -> None:
    """Two trials of a deterministic system said the same, but their completions' latency differed: diff marked the
    completion changed, with the same text on both sides, and exited 1."""
    slower = [
        msgspec.structs.replace(env, body=msgspec.structs.replace(env.body, latency_s=2.5))
        if isinstance(env.body, EpisodeCompleted)
        else env
        for env in episode_envelopes("ep-b")
    ]
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), slower)
    assert diff_episodes("a", rows(path, "ep-a"), "b", rows(path, "ep-b")).identical


def test_a_different_tool_output_is_the_first_difference_and_the_rest_aligns(tmp_path: Path) -> None:
    changed = with_tool_output(episode_envelopes("ep-b"), {"status": "lost"})
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), changed)
    result = diff_episodes("a", rows(path, "ep-a"), "b", rows(path, "ep-b"))
    first = result.steps[result.first_difference - 1]
    assert (first.status, first.kind, first.sender, first.to) == ("changed", "tool_result", "env", "tool_agent")
    assert "shipped" in first.a and "lost" in first.b
    assert [s.status for s in result.steps].count("same") == len(result.steps) - 1


def test_messages_only_one_side_sent_are_marked_for_that_side(tmp_path: Path) -> None:
    shorter = [env for env in episode_envelopes("ep-b") if env.kind != "assistant_turn"]
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), shorter)
    result = diff_episodes("a", rows(path, "ep-a"), "b", rows(path, "ep-b"))
    assert [(s.status, s.kind) for s in result.steps if s.status != "same"] == [("only_a", "assistant_turn")]


def test_the_cli_prints_a_table_or_json_lines_and_exits_1_when_they_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = with_tool_output(episode_envelopes("ep-b", outcome="failure"), {"status": "lost"})
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"), changed)
    assert main(["diff", f"{path}:ep-a", "ep-b"]) == 1
    out = capsys.readouterr().out
    assert "first difference at step" in out and "tool_result" in out
    assert main(["diff", f"{path}:ep-a", f"{path}:ep-b", "--json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines] == ["step"] * (len(lines) - 1) + ["summary"]
    assert lines[-1]["identical"] is False and lines[-1]["b_outcome"].startswith("failure")
    assert main(["diff", f"{path}:ep-a", "ep-a"]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "write JOURNAL:EPISODE"),
        (["{path}:ep-a"], "is not a fork"),
        (["{path}:ep-z", "ep-a"], "no episode 'ep-z'"),
    ],
)
def test_a_wrong_reference_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = journal_of(tmp_path / "j.db", episode_envelopes("ep-a"))
    assert main(["diff", *(arg.format(path=path) for arg in args)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
