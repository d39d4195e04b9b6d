"""pass^k and the counts of a run, also of a run cut short: episodes that never completed count nowhere."""

from __future__ import annotations

import math
import re

import pytest

from faultline.api import PlannedEpisode, RunResult, costed, pass_hat_k, summarize
from faultline.core import EpisodeCompleted
from faultline.journal import AgentCost
from faultline.runtime import Stall
from tests.api.tables import shown


def planned(task: str, trial: int) -> PlannedEpisode:
    return PlannedEpisode(episode=f"{task}-t{trial}", task=task, trial=trial, seed=0)


@pytest.mark.parametrize(
    ("tasks", "k", "expected"),
    [
        ([(2, 2), (0, 2)], 1, 0.5),
        ([(2, 2), (1, 2)], 2, 0.5),
        ([(1, 2), (1, 1)], 1, 0.75),  # a task with one completed trial counts with n = 1
        ([(1, 2), (1, 1)], 2, 0.0),  # and says nothing of pass^2
        ([(1, 1)], 2, math.nan),
        ([], 1, math.nan),
    ],
)
def test_pass_hat_k_is_the_mean_of_c_choose_k_over_n_choose_k(
    tasks: list[tuple[int, int]], k: int, expected: float
) -> None:
    got = pass_hat_k(tasks, k)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_a_run_cut_short_counts_only_what_completed() -> None:
    """Two tasks x two trials; b's second trial never ran. Before, it counted as a failure (pass^1 0.5)."""
    result = RunResult([planned("a", 0), planned("b", 0), planned("a", 1), planned("b", 1)])
    result.completed = {
        "a-t0": EpisodeCompleted(outcome="success", reward=1.0),
        "b-t0": EpisodeCompleted(outcome="success", reward=1.0),
        "a-t1": EpisodeCompleted(outcome="failure"),
    }
    summary = summarize(result, trials=2)
    assert (summary.episodes, summary.not_run, summary.tasks) == (3, 1, 2)
    assert summary.pass_k[1] == pytest.approx((1 / 2 + 1 / 1) / 2)
    assert summary.pass_k[2] == 0.0  # only task a has two completed trials, one of them failed
    assert summary.outcomes == {"success": 2, "failure": 1}


def test_the_averages_leave_out_the_episodes_the_runner_ended_which_report_nothing() -> None:
    """Three timeouts of a 30-turn conversation on a slow model showed "avg turns 0.0": the runner's completion
    has no tally, and counting it as 0 said the episodes did nothing."""
    result = RunResult([planned(task, 0) for task in "abcd"])
    result.completed = {
        "a-t0": EpisodeCompleted(outcome="success", reward=1.0, turns=4, tokens=100, latency_s=2.0),
        "b-t0": EpisodeCompleted(outcome="failure", turns=2, tokens=50, latency_s=1.0),
        "c-t0": EpisodeCompleted(outcome="timeout", cause="no completion within 120s"),
        "d-t0": EpisodeCompleted(outcome="error", cause="ModelError in tool: ..."),
    }
    summary = summarize(result, trials=1)
    assert (summary.episodes, summary.tallied) == (4, 2)
    assert (summary.avg_turns, summary.avg_tokens, summary.avg_latency_s) == (3.0, 75.0, 1.5)
    table = shown(summary)
    assert re.search(r"avg turns \(of 2 finished\)[ │]+3\.0 ", table), table
    result.completed = {e: done for e, done in result.completed.items() if done.outcome in ("timeout", "error")}
    nothing = shown(summarize(result, trials=1))
    assert re.search(r"avg tokens \(of 0 finished\)[ │]+- ", nothing), nothing


def test_with_helpers_the_average_tokens_are_every_agents_model_calls() -> None:
    """A run with helpers printed "avg tokens 5927", the tool agent's and the user's as the completions tally them,
    where `compare` and `fama loop` count 15516 for the same journal: every agent's, the helpers' included."""
    result = RunResult([planned(task, 0) for task in "ab"])
    result.completed = {
        "a-t0": EpisodeCompleted(outcome="success", reward=1.0, turns=4, tokens=300),
        "b-t0": EpisodeCompleted(outcome="failure", turns=2, tokens=100),
    }
    calls = [
        AgentCost(agent="tool", episodes=2, calls=6, prompt_tokens=300, completion_tokens=60, latency_s=1.0),
        AgentCost(agent="user", episodes=2, calls=4, prompt_tokens=30, completion_tokens=10, latency_s=0.5),
        AgentCost(agent="verifier", episodes=2, calls=6, prompt_tokens=500, completion_tokens=100, latency_s=1.0),
    ]
    summary = costed(summarize(result, trials=1), calls, ["verifier"])
    assert (summary.avg_tokens, summary.tokens_from_calls) == ((360 + 40 + 600) / 2, True)
    assert re.search(r"avg tokens \(all agents' model calls\)[ │]+500 ", shown(summary)), shown(summary)
    assert costed(summarize(result, trials=1), [], []).avg_tokens == 200.0  # no journal read: the tallies


def test_a_short_run_shows_its_time_not_zero() -> None:
    """Four quick episodes printed "wall time 0.0 s (93.2 episodes/s)" beside a command that took 3 s: the time
    is from the first start to the last completion, and it said neither."""
    result = RunResult([planned(task, 0) for task in "abcd"])
    result.completed = {f"{task}-t0": EpisodeCompleted(outcome="success", reward=1.0) for task in "abcd"}
    result.seconds = 0.043
    table = shown(summarize(result, trials=1))
    assert re.search(r"first start to last completion[ │]+0\.043 s \(93\.0 episodes/s\)", table), table


def test_a_run_cut_short_says_what_did_not_complete_and_how_to_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C before any episode completed printed "episodes 0 ()" and "first start to last completion 2.7 s
    (0.0 episodes/s)": neither said that the run stopped, what it left, or how to run the rest."""
    monkeypatch.setattr("sys.argv", ["faultline", "run", "--tasks", "3"])
    result = RunResult([planned(task, 0) for task in "abc"])
    result.running = {"a-t0": 0.0}
    result.seconds = 2.7
    table = shown(summarize(result, trials=1), result)
    assert re.search(r"episodes[ │]+none completed ", table), table
    assert re.search(r"not completed[ │]+3 of 3: 1 started, 2 never started \(the run was cut short", table), table
    assert re.search(r"to run the rest[ │]+faultline run --tasks 3 --run-id r1 --resume ", table), table
    assert re.search(r"first start to the stop[ │]+2\.7 s ", table), table
    assert "episodes/s" not in table, table


def test_episodes_that_count_no_turns_show_no_turns_row() -> None:
    """A system of one's own has no conversation turns: its table read "avg turns (of 6 finished)  -", six finished
    episodes and no average."""
    result = RunResult([planned(task, 0) for task in "ab"])
    result.completed = {
        "a-t0": EpisodeCompleted(outcome="success", reward=1.0, latency_s=0.05),
        "b-t0": EpisodeCompleted(outcome="failure", cause="expected 4.0, got None", latency_s=0.05),
    }
    table = shown(summarize(result, trials=1))
    assert "avg turns" not in table and re.search(r"avg latency / episode[ │]+50 ms", table), table


def test_stalled_episodes_count_as_failures_and_their_causes_apart() -> None:
    """The runner ends a stalled episode as a failure; its cause goes into `stalled`, where a user's grade that only
    says `stalled` in its cause does not."""
    stall = Stall(quiet_s=10, last="note from asker to silent", receivers=["silent"])
    ended = stall.completion("a-t0").body
    assert isinstance(ended, EpisodeCompleted)
    graded = EpisodeCompleted(outcome="failure", cause="stalled: the grader's own word")
    result = RunResult([planned("a", 0), planned("b", 0)], completed={"a-t0": ended, "b-t0": graded})
    summary = summarize(result, trials=1)
    assert summary.outcomes == {"failure": 2}
    assert summary.stalled == {stall.cause(): 1}
