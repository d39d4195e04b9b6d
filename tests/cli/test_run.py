"""What `faultline run` says when a signal cut it short: how far it got, in words that agree with the counts."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import cast

import pytest

from faultline.agent import EpisodeCompleted
from faultline.api import PlannedEpisode, RunReport, RunResult, Summary
from faultline.cli._run import _stopped


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
