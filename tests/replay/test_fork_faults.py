"""A fork's live part runs under the fault rules its source had in force."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from contextlib import redirect_stdout
from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from faultline.cli import main
from faultline.core import EpisodeStarted, FaultApplied
from faultline.journal import JournalReader, JournalRow
from faultline.replay import ForkResult, Inject, Keep, Replayer, UndoFault, fork_episode
from faultline.runtime import Config, agent_lookup, make_backend

LOOKUP = agent_lookup(Config())


def sim(role: str):  # type: ignore[no-untyped-def]
    return make_backend(Config(), role)


def episode_rows(journal: Path | str, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.episode_rows(episode))


def all_rows(journal: Path) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.rows())


def texts(rows: list[JournalRow], kind: str) -> list[str]:
    return [str(getattr(r.envelope().body, "text", "")) for r in rows if r.kind == kind]


def faults(rows: list[JournalRow]) -> list[FaultApplied]:
    return [b for r in rows if isinstance(b := r.envelope().body, FaultApplied)]


def made(applied: FaultApplied) -> list[object]:
    """What a fault made, without the episode and the time it was made at."""
    return [r.get("body", r.get("messages")) for r in applied.results]


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Path], Path]:
    """`faulted_run(spec, folder)`: a copy in `folder` of the journal of a one-task `faultline run` under the fault
    rule `spec`, run once per spec for the tests of this module."""
    runs: dict[str, Path] = {}

    def copy(spec: str, folder: Path) -> Path:
        if spec not in runs:
            journal = tmp_path_factory.mktemp("faulted") / "faulted.sqlite"
            with redirect_stdout(io.StringIO()):
                assert main(["run", "--tasks", "1", "--fault", spec, "--journal", str(journal), "--json"]) == 0
            runs[spec] = journal
        return Path(shutil.copy(runs[spec], folder / "faulted.sqlite"))

    return copy


async def fork(journal: Path | str, episode: str, at: int, change: Keep | Inject | UndoFault, **kw: Path) -> ForkResult:
    return await fork_episode(journal, episode, at, change, lookup=LOOKUP, backends=sim, **kw)  # type: ignore[arg-type]


async def test_a_fork_from_before_an_injected_semantic_fault_meets_it_again_and_undoing_it_does_not(
    journal_copy: Path, tmp_path: Path
) -> None:
    with JournalReader(journal_copy) as reader:
        passed = next(s.episode for s in reader.episodes() if s.outcome == "success")
    rows = episode_rows(journal_copy, passed)
    reveal = next(r for r in rows if r.kind == "user_turn" and r.sender == "user" and "is #" in texts([r], r.kind)[0])
    labelled = tmp_path / "labelled.sqlite"
    faulted = await fork(journal_copy, passed, reveal.pos, Inject(fault="hallucination"), out=labelled)
    source = episode_rows(labelled, faulted.episode)
    [applied] = faults(source)
    rewritten = applied.results[0]["body"]["text"]
    assert rewritten != applied.original["body"]["text"] and rewritten in texts(source, "user_turn")
    started = next(r.envelope().body for r in source if r.kind == "episode_started")
    assert isinstance(started, EpisodeStarted)
    assert [(r["fault"], r["message"]) for r in started.fault_rules] == [("hallucination", reveal.id)]

    before = all_rows(labelled)
    earlier = next(r for r in source if r.kind == "assistant_turn" and r.pos < reveal.pos)
    again = await fork(labelled, faulted.episode, earlier.pos, Keep())
    continued = [r for r in episode_rows(again.journal, again.episode) if r.pos > 0]
    live = continued[sum(1 for r in source if r.pos < earlier.pos) + 1 :]  # the rows the fork ran itself
    assert rewritten in texts(live, "user_turn"), "the fault of the source hit the same message again"
    assert [(f.rule_id, f.fault) for f in faults(live)] == [("injected", "hallucination")]
    assert (again.outcome.outcome, again.outcome.details) == (faulted.outcome.outcome, faulted.outcome.details)

    event = next(r for r in source if r.kind == "fault_applied")
    undone = await fork(labelled, faulted.episode, event.pos, UndoFault())
    repaired = episode_rows(undone.journal, undone.episode)
    assert rewritten not in texts(repaired, "user_turn") and applied.original["body"]["text"] in texts(
        repaired, "user_turn"
    )
    assert faults(repaired) == []
    assert all_rows(labelled) == before, "forks never write to their source"
    assert Replayer(LOOKUP).replay(again.journal).identical


@pytest.mark.parametrize(
    "spec", ["hallucination:from=user", "memory_loss:from=tool,turns=1", "memory_loss:from=tool,turns=1,budget=2"]
)
def test_a_fork_without_a_change_reproduces_the_faults_of_a_live_run(
    spec: str, tmp_path: Path, faulted_run: Callable[[str, Path], Path]
) -> None:
    journal = faulted_run(spec, tmp_path)
    with JournalReader(journal) as reader:
        [summary] = reader.episodes()
    rows = episode_rows(journal, summary.episode)
    at = next(r for r in rows if r.kind == "assistant_turn").pos
    after = [r for r in rows if r.pos > at]
    assert faults(after), "the run faulted messages after the fork position"
    result = anyio.run(partial(fork, journal, summary.episode, at, Keep()))
    forked = episode_rows(result.journal, result.episode)
    live = forked[sum(1 for r in rows if r.pos < at) + 1 :]
    assert texts(live, "user_turn") == texts(after, "user_turn")
    assert [(f.rule_id, f.model_call, made(f)) for f in faults(live)] == [
        (f.rule_id, f.model_call, made(f)) for f in faults(after)
    ]
    assert result.outcome.outcome == summary.outcome
    assert Replayer(LOOKUP).replay(result.journal).identical
    rules = next(r.envelope().body for r in forked if r.kind == "episode_started")
    assert isinstance(rules, EpisodeStarted)
    assert [msgspec.convert(r, dict)["episode"] for r in rules.fault_rules] == [result.episode]


def test_undoing_one_fault_of_a_standing_rule_leaves_the_rule_on_the_other_messages_and_forks_of_the_repair(
    tmp_path: Path, faulted_run: Callable[[str, Path], Path]
) -> None:
    journal = faulted_run("hallucination:from=user", tmp_path)
    with JournalReader(journal) as reader:
        [summary] = reader.episodes()
    rows = episode_rows(journal, summary.episode)
    first, *rest = [r for r in rows if r.kind == "fault_applied"]
    assert rest, "the rule faulted more than one of the user's turns"
    result = anyio.run(partial(fork, journal, summary.episode, first.pos, UndoFault()))
    forked = episode_rows(result.journal, result.episode)
    undone = faults([first])[0]
    assert undone.original["body"]["text"] in texts(forked, "user_turn")
    assert undone.results[0]["body"]["text"] not in texts(forked, "user_turn")
    later = [f for f in faults(forked) if f.original["id"] != undone.original["id"]]
    assert later and {f.rule_id for f in later} == {undone.rule_id}, "the rule still faults the user's other turns"
    assert all(f.results[0]["body"]["text"] in texts(forked, "user_turn") for f in later)
    earlier = next(r for r in forked if r.kind == "assistant_turn")
    again = anyio.run(partial(fork, result.journal, result.episode, earlier.pos, Keep()))
    regrown = episode_rows(again.journal, again.episode)
    assert undone.original["body"]["text"] in texts(regrown, "user_turn"), "a fork of the repair keeps the repair"
    assert [made(f) for f in faults(regrown)] == [made(f) for f in later]
