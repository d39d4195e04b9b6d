"""A run is the episodes whose starts record it, a resumed run's retries included; an episode whose start records no
run (journaled before starts did) belongs to the run its id begins with, as every run did then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faultline._errors import JournalError
from faultline.core import Envelope, episode_shard
from faultline.journal import EpisodeFilter, JournalReader, create_set, shard_path

from .conftest import episode_envelopes
from .test_diff import journal_of
from .test_golden import GOLDEN

RECORDED = {
    "c1-1-t7-t0": "c1-1",
    "c1-1-r1-t7-t1": "c1-1",  # a retry of run c1-1 after it was cut short
    "c1-1-x-t7-t0": "c1-1-x",
    "c1-1-x-t8-t0": "c1-1-x",
}


def episodes(recorded: dict[str, str]) -> list[list[Envelope]]:
    """Each episode, its start recording its run ("" for none)."""
    return [episode_envelopes(e, run=run, t0=1_767_225_600.0 + i) for i, (e, run) in enumerate(recorded.items())]


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """Runs c1-1 (an episode and a retry) and c1-1-x (two episodes), whose ids all begin with 'c1-1-'."""
    return journal_of(tmp_path / "j.db", *episodes(RECORDED))


@pytest.mark.parametrize(
    ("run", "members"),
    [
        ("c1-1", ["c1-1-r1-t7-t1", "c1-1-t7-t0"]),
        ("c1-1-x", ["c1-1-x-t7-t0", "c1-1-x-t8-t0"]),
        ("c1-1-r1", []),
        ("c1", []),
    ],
)
def test_a_run_is_the_episodes_whose_starts_record_it(two_runs: Path, run: str, members: list[str]) -> None:
    with JournalReader(two_runs) as reader:
        assert reader.of_run(run) == members
        assert sorted(e.episode for e in reader.select(EpisodeFilter(run=run))) == members
        assert reader.runs() == dict(sorted(RECORDED.items()))


def test_the_run_filter_narrows_what_the_other_filters_select(two_runs: Path) -> None:
    with JournalReader(two_runs) as reader:
        selected = reader.select(EpisodeFilter(run="c1-1", since=1_767_225_601.0))
    assert [e.episode for e in selected] == ["c1-1-r1-t7-t1"]


def test_a_run_is_known_by_its_recorded_episodes_and_a_run_of_none_is_the_journals_error(two_runs: Path) -> None:
    with JournalReader(two_runs) as reader:
        reader.check_runs(["c1-1", "c1-1-x"])
        with pytest.raises(JournalError, match=r"no episode of run 'c1', 'c1-1-r1' \(the run an episode's start"):
            reader.check_runs(["c1-1", "c1", "c1-1-r1"])


def test_episodes_whose_starts_record_no_run_belong_to_the_run_their_ids_begin_with(tmp_path: Path) -> None:
    """As in a journal written before starts recorded their run: run c1-1 then takes run c1-1-x's too."""
    journal = journal_of(tmp_path / "old.db", *episodes(dict.fromkeys(RECORDED, "")))
    with JournalReader(journal) as reader:
        assert reader.runs() == {}
        assert reader.of_run("c1-1") == sorted(RECORDED)
        assert reader.of_run("c1-1-x") == ["c1-1-x-t7-t0", "c1-1-x-t8-t0"]
        assert reader.of_run("c1-1-r1") == ["c1-1-r1-t7-t1"]
        reader.check_runs(["c1-1-r1"])


def test_in_a_journal_of_both_each_episode_goes_by_its_start(tmp_path: Path) -> None:
    """Episodes journaled before starts recorded their run, and then more of those runs and of others."""
    old = {"c1-1-t7-t0": "", "c1-1-x-t7-t0": ""}
    new = {"c1-1-r1-t7-t1": "c1-1", "c1-1-x-t8-t0": "c1-1-x"}
    journal = journal_of(tmp_path / "both.db", *episodes(old | new))
    with JournalReader(journal) as reader:
        assert reader.of_run("c1-1") == ["c1-1-r1-t7-t1", "c1-1-t7-t0", "c1-1-x-t7-t0"]
        assert reader.of_run("c1-1-x") == ["c1-1-x-t7-t0", "c1-1-x-t8-t0"]


def test_a_journal_written_before_starts_recorded_their_run_selects_a_run_by_its_ids(tmp_path: Path) -> None:
    """`golden/two_episodes_v2.db` holds the two episodes of run r40c192 of an earlier version."""
    journal = Path(shutil.copy(GOLDEN / "two_episodes_v2.db", tmp_path / "v2.db"))
    with JournalReader(journal) as reader:
        assert [e.episode for e in reader.select(EpisodeFilter(run="r40c192"))] == [
            "r40c192-cancel-00-t0",
            "r40c192-cancel-01-t0",
        ]
        assert reader.of_run("r40c19") == []


def test_a_journal_set_reads_the_runs_of_every_shard(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    create_set(folder, 2)
    by_shard: dict[int, list[Envelope]] = {0: [], 1: []}
    for envelopes in episodes(RECORDED):
        by_shard[episode_shard(envelopes[0].episode, 2)].extend(envelopes)
    assert all(by_shard.values()), "the episodes are on both shards"
    for shard, envelopes in by_shard.items():
        journal_of(shard_path(folder, shard), envelopes)
    with JournalReader(folder) as reader:
        assert reader.shards == 2
        assert reader.runs() == dict(sorted(RECORDED.items()))
        assert reader.of_run("c1-1") == ["c1-1-r1-t7-t1", "c1-1-t7-t0"]
