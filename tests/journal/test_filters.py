"""Episode filters select by status, task, domain, applied fault and start time, the same on every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import EpisodeFilter, JournalReader
from tests import jsonl

from .conftest import episode_envelopes
from .test_diff import journal_of

T0 = 1_767_225_600.0


@pytest.fixture
def three(tmp_path: Path) -> Path:
    """ep-a passed, ep-b failed an hour later, ep-c errored (each with a message_storm fault)."""
    return journal_of(
        tmp_path / "j.db",
        episode_envelopes("ep-a", t0=T0),
        episode_envelopes("ep-b", outcome="failure", t0=T0 + 3600),
        episode_envelopes("ep-c", outcome="error", t0=T0 + 7200),
    )


@pytest.mark.parametrize(
    ("wanted", "episodes"),
    [
        (EpisodeFilter(status="passed"), ["ep-a"]),
        (EpisodeFilter(status="failed"), ["ep-b"]),
        (EpisodeFilter(status="errored"), ["ep-c"]),
        (EpisodeFilter(status="incomplete"), []),
        (EpisodeFilter(task="t7", domain="retail"), ["ep-a", "ep-b", "ep-c"]),
        (EpisodeFilter(task="t8"), []),
        (EpisodeFilter(fault="message_storm"), ["ep-a", "ep-b", "ep-c"]),
        (EpisodeFilter(fault="cycle"), []),
        (EpisodeFilter(since=T0 + 3600), ["ep-b", "ep-c"]),
        (EpisodeFilter(status="failed", since=T0 + 7200), []),
        (EpisodeFilter(run="ep"), ["ep-a", "ep-b", "ep-c"]),
        (EpisodeFilter(run="ep-a"), []),
    ],
)
def test_a_filter_selects_exactly_its_episodes(three: Path, wanted: EpisodeFilter, episodes: list[str]) -> None:
    with JournalReader(three) as reader:
        assert [e.episode for e in reader.select(wanted)] == episodes


def test_the_flags_reach_the_journal_episodes_command(three: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "episodes", str(three), "--json", "--status", "failed", "--fault", "message_storm"]) == 0
    episodes, _ = jsonl.read(capsys.readouterr().out)
    assert [e["episode"] for e in episodes] == ["ep-b"]


def test_no_match_and_a_bad_time_are_one_line(three: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "otel", str(three), "--endpoint", "http://127.0.0.1:9/v1/traces", "--task", "t9"]) == 2
    assert capsys.readouterr().err.strip() == f"faultline: usage error: {three}: no episode matches the filters"
    assert main(["fama", "analyze", str(three), "--model", "sim", "--task", "t9"]) == 2
    assert capsys.readouterr().err.strip() == f"faultline: usage error: {three}: no episode matches the filters"
    assert main(["replay", str(three), "--since", "noon"]) == 2
    assert "--since 'noon'" in capsys.readouterr().err


def test_journal_episodes_lists_none_where_nothing_matches(three: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The listing answers "which episodes": none is an answer, as docs/observability.md says, not a mistake."""
    assert main(["journal", "episodes", str(three), "--json", "--task", "t9"]) == 0
    episodes, summary = jsonl.read(capsys.readouterr().out)
    assert episodes == [] and summary["episodes"] == 0


def test_export_and_memory_rebuild_take_only_the_episodes_that_match(
    three: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["journal", "export", str(three), "--status", "failed"]) == 0
    assert {json.loads(line)["episode"] for line in capsys.readouterr().out.splitlines()} == {"ep-b"}
    assert main(["memory", "rebuild", str(three), "--out", str(tmp_path / "m.sqlite"), "--fault", "x", "--json"]) == 2
    assert "no episode matches the filters" in capsys.readouterr().err
    out = str(tmp_path / "m.sqlite")
    assert main(["memory", "rebuild", str(three), "--out", out, "--status", "errored", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["completed"] == 1
