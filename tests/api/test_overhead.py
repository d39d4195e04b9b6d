"""The helpers' overhead as the FAMA paper's Table 2 has it (their share of the generated tokens per
episode, with the spread), and Faultline's own beside it, on token counts computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.api import PlannedEpisode, RunResult, summarize, token_overhead, with_costs
from faultline.core import Envelope, EpisodeCompleted, EpisodeStarted, Recording, derive_id
from faultline.journal import Journal
from tests.journal.conftest import incoming

GENERATED = {
    "r-a-t0": {"tool": 100, "dce": 50, "user": 999},
    "r-b-t0": {"tool": 300, "verifier": 50},
    "r-c-t0": {"tool": 200},
}
"""Completion tokens per episode and agent. Assistant + helpers per episode: 150, 350, 200 (mean 700/3);
helpers' mean 100/3, so their share is 1/7. The user simulator is neither."""


def test_the_papers_overhead_is_the_helpers_mean_over_the_mean_of_assistant_and_helpers() -> None:
    row = token_overhead(GENERATED, {"dce", "verifier"})
    assert row is not None and row.episodes == 3
    assert (row.min_tokens, row.median_tokens, row.max_tokens) == (150, 200, 350)
    assert row.mean_tokens == pytest.approx(700 / 3)
    assert (row.assistant_tokens, row.helper_tokens) == (pytest.approx(200), pytest.approx(100 / 3))
    assert row.share == pytest.approx(1 / 7)


def test_the_papers_airline_row_gives_its_30_percent() -> None:
    """Table 2, FAMA on airline: 1822.1 assistant and 795.3 helper tokens per episode on average."""
    row = token_overhead({"e": {"tool": 1822.1, "dce": 795.3}}, {"dce"})
    assert row is not None and row.mean_tokens == pytest.approx(2617.4) and round(row.share, 2) == 0.30


def test_an_episode_without_helper_calls_counts_and_no_episode_gives_no_row() -> None:
    row = token_overhead({"a": {"tool": 10}, "b": {}}, {"dce"})
    assert row is not None and (row.episodes, row.min_tokens, row.share) == (2, 0, 0.0)
    assert token_overhead({}, {"dce"}) is None


def _recording(episode: str, agent: str, index: int, prompt: int, completion: int) -> Envelope:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    response = {"content": "x", "usage": usage, "model": "m", "latency_s": 0.5}
    return Envelope(
        id=derive_id(f"{episode}/{agent}", index),
        episode=episode,
        sender=agent,
        body=Recording(call="llm", index=index, request_digest="d", request={"role": agent}, response=response),
        ts=1_767_225_600.0,
    )


def _started(episode: str, run: str) -> Envelope:
    return Envelope(
        id=derive_id(episode, 0, "s"),
        episode=episode,
        sender="runner",
        body=EpisodeStarted(run=run),
        ts=1_767_225_600.0,
    )


def test_a_run_summary_reports_both_overheads_from_its_journal(tmp_path: Path) -> None:
    """Over run r's episodes: not over those of run r-x, whose ids begin with r's, in the same journal."""
    rows = [_started(e, "r") for e in [*GENERATED, "r-d-t0"]] + [_started("r-x-a-t0", "r-x")]
    rows += [_recording(e, agent, 0, 1000, n) for e, agents in GENERATED.items() for agent, n in agents.items()]
    rows.append(_recording("r-d-t0", "tool", 0, 1000, 5000))  # never completed: not in the paper's row
    rows += [_recording("r-x-a-t0", "tool", 0, 1000, 7000), _recording("r-x-a-t0", "dce", 0, 1000, 9000)]
    path = tmp_path / "j.sqlite"
    with Journal.open(path) as journal:
        journal.append(incoming(rows))
    planned = [PlannedEpisode(episode=e, task=e[2], trial=0, seed=0) for e in GENERATED]
    done = RunResult(planned, {e: EpisodeCompleted(outcome="success", reward=1.0) for e in GENERATED})
    summary = with_costs(summarize(done, trials=1), path, "r", ["dce", "verifier"], list(GENERATED))
    assert summary.overhead is not None and summary.overhead.share == pytest.approx(1 / 7)
    assert summary.overhead.max_tokens == 350
    # Faultline's own: the helpers' prompt and completion tokens over the tool agent's, over every episode of the run.
    helpers, tool = (1000 + 50) + (1000 + 50), (1000 + 100) + (1000 + 300) + (1000 + 200) + (1000 + 5000)
    assert summary.helper_overhead["tokens"] == pytest.approx(helpers / tool)
