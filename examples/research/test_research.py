"""The research example's own tests, written with faultline.testing as a user of Faultline would."""

from __future__ import annotations

from pathlib import Path

from research_models import answer
from research_system import Research

from faultline.bus import EmbeddedServer
from faultline.testing import SystemHarness, run_system, scripted

INPUTS = Path(__file__).parent / "inputs.jsonl"


async def test_one_episode_in_the_harness_is_planned_researched_written_and_approved() -> None:
    harness = SystemHarness(Research, scripted(answer))
    episode = await harness.run({"question": "What is the capital of France and what is the capital of Japan?",
                                 "expect": ["Paris", "Tokyo"]})  # fmt: skip
    assert episode.completed is not None and episode.completed.outcome == "success"
    parts = [m.body for m in episode.sent_by("planner") if m.topic == "questions"]
    assert len(parts) == 2
    assert [m.recipient for m in episode.sent_by("researcher_a")] == ["writer"]
    assert [m.recipient for m in episode.sent_by("researcher_b")] == ["writer"]
    finished = [m for m in episode.sent_by("reviewer") if m.kind == "finished"]
    assert len(finished) == 1 and "Paris" in finished[0].body.output and "Tokyo" in finished[0].body.output


async def test_an_unknown_fact_fails_with_the_scorer_naming_it() -> None:
    episode = await SystemHarness(Research, scripted(answer)).run(
        {"question": "What is the moon of Mars?", "expect": ["Phobos"]}
    )
    assert episode.completed is not None
    assert (episode.completed.outcome, episode.completed.cause) == ("failure", "the answer does not mention Phobos")


async def test_the_inputs_run_on_nats_journal_every_message_and_replay_identically(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    run = await run_system(
        Research, INPUTS, nats_url=nats_server.url, journal=tmp_path / "journal.sqlite", models=scripted(answer)
    )
    outcomes = {p.task: run.completed[p.episode].outcome for p in run.planned}
    assert outcomes == {"france-japan": "success", "water": "success", "planet-light": "success",
                        "hamlet-mars": "failure"}  # fmt: skip
    kinds = [m.kind for m in run.messages("water")]
    assert kinds[:3] == ["episode_started", "start", "start"]
    assert "finished" in kinds and kinds[-1] != "episode_started"
    report = run.replay()
    assert report.identical and report.episodes == 4
