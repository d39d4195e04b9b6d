"""How the attribution benchmark labels a failure from the ground truth and scores an answer, on a real sim campaign."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bench.attribution_accuracy import Label, Said, label, score, summary
from faultline.journal import JournalReader, JournalRow
from faultline.replay import Step, steps
from faultline.runtime import Config, agent_lookup
from tests.replay.sim_labels import SCRAMBLED, decisions, relabelled

LOOKUP = agent_lookup(Config())


def labelled_failures(journal: Path) -> Iterator[tuple[list[JournalRow], list[Step], Label]]:
    """Each failure of `journal`: its rows, its steps and the label the benchmark draws from them."""
    with JournalReader(journal) as reader:
        for summary_ in reader.episodes():
            if summary_.outcome == "success":
                continue
            rows = list(reader.episode_rows(summary_.episode))
            made = steps(rows, LOOKUP)
            truth = label(rows, made)
            assert truth is not None, "every failure of a fault-free sim campaign departs from the gold"
            yield rows, made, truth


def test_a_failure_is_labelled_from_the_ground_truth_at_the_decision_the_simulator_made_it(sim_journal: Path) -> None:
    """A check of the labeller against how the simulator built each failure: the label, drawn from the journal
    and the task's ground truth alone, holds exactly the tool agent's decisions the simulator's first mistake
    shaped (its question, confirmation and call)."""
    labelled = 0
    for rows, made, truth in labelled_failures(sim_journal):
        mistakes = [d for d in decisions(rows, "tool") if d.mistake]
        assert mistakes
        first = mistakes[0].mistake
        assert truth.cause.startswith("ground truth: ") and truth.agent == "tool"
        carrying = {d.input_pos for d in mistakes if d.mistake == first}
        assert {s.input_pos for s in made if s.index in truth.steps} == carrying
        labelled += 1
    assert labelled >= 5


def test_the_label_never_reads_the_simulators_own_labels(sim_journal: Path) -> None:
    """With the simulator's labels removed, or a made-up one on every decision, every failure's label is the same."""
    checked = 0
    for rows, _, truth in labelled_failures(sim_journal):
        for changed in (relabelled(rows, None), relabelled(rows, SCRAMBLED)):
            assert changed != rows
            assert label(changed, steps(changed, LOOKUP)) == truth
        checked += 1
    assert checked >= 5


def test_no_answer_is_never_right_and_an_unexplained_failure_is_not_scored() -> None:
    truth = Label("ground truth: early_stop", "tool", [7, 9])
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
