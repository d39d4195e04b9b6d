"""The debate example's own tests, written with faultline.testing as a user of Faultline would."""

from __future__ import annotations

from pathlib import Path

from debate_models import answer
from debate_system import ROUNDS, Debate

from faultline.bus import EmbeddedServer
from faultline.testing import SystemHarness, run_system, scripted

INPUTS = Path(__file__).parent / "inputs.jsonl"


async def test_each_side_argues_every_round_on_the_floor_before_the_judge_rules() -> None:
    episode = await SystemHarness(Debate, scripted(answer)).run(
        {"motion": "Daily exercise improves health.", "winner": "pro"}
    )
    assert episode.completed is not None and episode.completed.outcome == "success"
    floor = [m.sender for m in episode.messages if m.topic == "floor"]
    assert floor == ["judge", *["pro", "con"] * ROUNDS]
    (ruling,) = [m for m in episode.sent_by("judge") if m.kind == "finished"]
    assert ruling.recipient == "scorer"


async def test_a_motion_without_evidence_goes_to_con_and_fails_a_record_that_says_pro() -> None:
    episode = await SystemHarness(Debate, scripted(answer)).run(
        {"motion": "Homework should be banned.", "winner": "pro"}
    )
    assert episode.completed is not None
    assert episode.completed.cause == "the judge ruled for 'con', the record says 'pro'"


async def test_the_inputs_run_on_nats_and_replay_identically(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    run = await run_system(
        Debate, INPUTS, nats_url=nats_server.url, journal=tmp_path / "journal.sqlite", models=scripted(answer), trials=2
    )
    assert {(p.task, run.completed[p.episode].outcome) for p in run.planned} == {
        ("exercise", "success"),
        ("sugar", "success"),
        ("reading", "success"),
        ("homework", "failure"),
    }
    assert len(run.completed) == 8
    assert run.replay().identical
