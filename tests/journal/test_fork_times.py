"""A fork is timed by what it ran: its copied history keeps its source's times, and what it wrote itself is stamped
when it ran."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import msgspec
import pytest

from faultline.cli import main
from faultline.core import EpisodeStarted
from faultline.journal import JournalReader, JournalRow
from faultline.replay import forks_path

GAP_S = 2.0
"""How long after its source each fork is made; every duration of a fork here takes a small part of it."""


class Forked(msgspec.Struct, frozen=True, kw_only=True):
    journal: Path
    source: str
    fork: str
    fork_of_fork: str
    made_at: float
    """A moment after the source ran and before the fork did."""


def _quietly(*args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*args, "--json"]) == 0, args


def _late_user_turn(journal: Path, episode: str) -> int:
    with JournalReader(journal) as reader:
        turns = [r.pos for r in reader.episode_rows(episode) if r.kind == "user_turn"]
    assert len(turns) >= 2
    return turns[-1]


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Forked:
    """An episode run by `faultline run`, then, each after a pause, a fork of it and a fork of that fork."""
    journal = tmp_path_factory.mktemp("fork_times") / "journal.sqlite"
    _quietly("run", "--tasks", "1", "--seed", "3", "--journal", str(journal))
    with JournalReader(journal) as reader:
        [source] = [e.episode for e in reader.episodes()]
    time.sleep(GAP_S)
    made_at = time.time()
    _quietly("fork", str(journal), "-e", source, "--at", str(_late_user_turn(journal, source)), "--keep")
    forks = forks_path(journal)
    with JournalReader(forks) as reader:
        [fork] = [e.episode for e in reader.episodes()]
    time.sleep(GAP_S)
    _quietly("fork", str(forks), "-e", fork, "--at", str(_late_user_turn(forks, fork)), "--keep", "--into-source")
    with JournalReader(forks) as reader:
        [fork_of_fork] = [e.episode for e in reader.episodes() if e.forked_from == fork]
    return Forked(journal=journal, source=source, fork=fork, fork_of_fork=fork_of_fork, made_at=made_at)


def _rows(journal: Path, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.episode_rows(episode))


def _started(rows: list[JournalRow]) -> EpisodeStarted:
    body = next(r for r in rows if r.kind == "episode_started").decoded_body()
    assert isinstance(body, EpisodeStarted)
    return body


def test_a_fork_copies_its_history_with_its_times_and_its_start_says_how_many_rows_that_is(forked: Forked) -> None:
    source = _rows(forked.journal, forked.source)
    fork = _rows(forks_path(forked.journal), forked.fork)
    started = _started(fork)
    history = [r for r in source if r.pos < started.forked_at]
    assert started.copied == len(history)
    assert [(r.id if r.kind != "episode_started" else "", r.ts) for r in fork[: started.copied]] == [
        (r.id if r.kind != "episode_started" else "", r.ts) for r in history
    ]
    assert all(r.ts >= forked.made_at for r in fork[started.copied :])  # the message at the fork point too


def test_a_fork_of_a_fork_records_its_own_copy_not_its_sources(forked: Forked) -> None:
    forks = forks_path(forked.journal)
    first, second = _started(_rows(forks, forked.fork)), _started(_rows(forks, forked.fork_of_fork))
    assert second.copied == len([r for r in _rows(forks, forked.fork) if r.pos < second.forked_at])
    assert second.copied > first.copied
