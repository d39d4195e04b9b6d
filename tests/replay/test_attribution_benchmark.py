"""How the attribution benchmark labels a failure and scores an answer, on a real sim campaign."""

from __future__ import annotations

from pathlib import Path

from bench.attribution_accuracy import Label, Said, label, score, summary
from faultline.journal import JournalReader
from faultline.replay import steps
from faultline.runtime import Config, agent_lookup
from tests.replay.sim_labels import decisions

LOOKUP = agent_lookup(Config())


def test_a_failure_is_labelled_with_every_step_that_carries_its_first_mistake(sim_journal: Path) -> None:
    labelled = 0
    with JournalReader(sim_journal) as reader:
        for summary_ in reader.episodes():
            rows = list(reader.episode_rows(summary_.episode))
            made = steps(rows, LOOKUP)
            truth = label(rows, made, summary_.domain)
            mistakes = [d for d in decisions(rows, "tool") if d.mistake]
            if summary_.outcome == "success":
                continue
            assert truth is not None and mistakes, "every failure of a fault-free sim campaign is a mistake of its own"
            first = mistakes[0].mistake
            assert truth.cause == f"mistake: {first['category']}" and truth.agent == "tool"  # type: ignore[index]
            carrying = {d.input_pos for d in mistakes if d.mistake == first}
            assert {s.input_pos for s in made if s.index in truth.steps} == carrying
            labelled += 1
    assert labelled >= 5


def test_no_answer_is_never_right_and_an_unexplained_failure_is_not_scored() -> None:
    truth = Label("mistake: early_stop", "tool", [7, 9])
    assert score(Said("tool", 9, True), truth) | {"seconds": 0} == {
        "agent": True, "step": True, "near": True, "decided": True, "answered": True,
        "forks": 0, "model_calls": 0, "seconds": 0,
    }  # fmt: skip
    assert score(Said("tool", 10, False), truth)["near"] and not score(Said("tool", 10, False), truth)["step"]
    missing = score(Said(None, None, False), truth)
    assert not missing["agent"] and not missing["step"] and not missing["near"] and not missing["answered"]
    unexplained = score(Said("tool", 3, False), None)
    assert unexplained["step"] is None and unexplained["agent"] is None
    rates = summary([score(Said("tool", 9, True), truth), unexplained])
    assert rates["n"] == 2 and rates["labelled"] == 1
    assert rates["step"]["rate"] == 1.0 and rates["step"]["n"] == 1 and rates["answered"]["n"] == 2
