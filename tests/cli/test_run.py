"""What `faultline run` and `faultline attribute` say of their counts, in words that agree with them: how far a run
cut short got, how many tasks and trials it ran, how many episodes and forks an attribution took."""

from __future__ import annotations

import io
import signal
from pathlib import Path
from typing import cast

import pytest
from rich.console import Console

from faultline.agent import EpisodeCompleted
from faultline.api import PlannedEpisode, RunReport, RunResult, Summary, summarize
from faultline.cli._fork import attribution_table
from faultline.cli._run import _stopped
from faultline.replay import Attribution
from tests.api.tables import shown


def _cut_short(running: int) -> RunReport:
    planned = [PlannedEpisode(episode=f"e{i}", task=f"t{i}", trial=0, seed=i) for i in range(4)]
    result = RunResult(planned, completed={"e0": EpisodeCompleted(outcome="success", reward=1.0)})
    result.running = {f"e{i}": 0.0 for i in range(1, 1 + running)}
    return RunReport(
        summary=cast(Summary, None),  # the stop line reads only the episodes
        episodes=result,
        journal=Path("runs/j.sqlite"),
        run_id="r000001",
        uses_sim=True,
        signal=signal.SIGINT,
    )


@pytest.mark.parametrize(("running", "said"), [(1, "1 was running, 2 never started"), (2, "2 were running, 1 never")])
def test_a_stopped_run_says_how_many_episodes_were_running_in_agreement_with_the_count(running: int, said: str) -> None:
    line = _stopped(_cut_short(running), url="")
    assert line.startswith(f"faultline: stopped by SIGINT: 1 of 4 episodes completed, {said}")


@pytest.mark.parametrize(("tasks", "trials", "said"), [(1, 1, "1 task x 1 trial"), (2, 3, "2 tasks x 3 trials")])
def test_the_results_table_counts_tasks_and_trials_in_words_that_agree(tasks: int, trials: int, said: str) -> None:
    planned = [PlannedEpisode(f"t{i}-{k}", f"t{i}", k, 0) for i in range(tasks) for k in range(trials)]
    result = RunResult(planned, completed={p.episode: EpisodeCompleted(outcome="success") for p in planned})
    assert f"retail, {said}" in shown(summarize(result, trials=trials))


@pytest.mark.parametrize(("failed", "said"), [(1, "attribution of 1 failed episode "), (2, "of 2 failed episodes ")])
def test_the_attribution_table_counts_its_episodes_in_words_that_agree(failed: int, said: str) -> None:
    results = [
        Attribution(episode=f"e{i}", method="sampled", agent=None, step=None, position=None, decided=False,
                    flipped=False, forks=1)
        for i in range(failed)
    ]  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=200).print(attribution_table(results, "runs/j.forks.sqlite"))
    assert said in out.getvalue()
    assert "sampled: 1 fork " in out.getvalue() and "1 forks" not in out.getvalue()
