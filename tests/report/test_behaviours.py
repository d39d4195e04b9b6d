"""Each behaviour detector fires on a journal that holds its evidence after a fault, and stays quiet on
one that does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.core import AssistantTurn, ContextReply, DefenseFired, FaultApplied, MessageBody, ToolResult, UserTurn
from faultline.report import DETECTORS, read_cell

from .journals import Step, episode, faulted, write_journal

EARLY = "I want to return the blue kettle"


def memory_lost(text: str = EARLY) -> MessageBody:
    """A memory-loss fault that dropped the user turn `text` from the transcript the tool agent sent."""
    turns = [{"role": "user", "content": text}, {"role": "user", "content": "and get a refund"}]
    return FaultApplied(
        rule_id="r1",
        fault="memory_loss",
        original={"id": "m9", "body": {"transcript": turns}},
        results=[{"id": "m9", "body": {"transcript": turns[1:]}}],
    )


FIRES: dict[str, list[Step]] = {
    "defense_filtered": [
        ("user", "tool", faulted("m9", "m9", "m9-copy")),
        ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m9-copy")),
    ],
    "tool_error_corrected": [
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", error="unknown order 'A2'")),
        ("env", "tool", ToolResult(call_id="c2", name="get_order", output={"status": "shipped"})),
    ],
    "asked_user": [
        ("user", "tool", faulted("m9", "m9", fault="cycle")),
        ("tool", "user", AssistantTurn(text="Which order do you mean?"), "m9"),
        ("user", "tool", UserTurn(text="Order A1.")),
    ],
    "verifier_recheck": [
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("verifier", "tool", ContextReply(step=1, helper="verifier", verdict="RECHECK", text="wrong id")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"})),
    ],
    "helper_restored": [
        ("tool", "memory", memory_lost()),
        ("memory", "tool", ContextReply(step=1, helper="memory", text=f"The user said, in order:\n- {EARLY}")),
    ],
}
"""For each detector, an episode where it must fire and repair."""

QUIET: dict[str, list[Step]] = {
    "defense_filtered": [  # the defense fired before any fault: no response to one
        ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m0")),
        ("user", "tool", faulted("m9", "m9", "m9-copy")),
    ],
    "tool_error_corrected": [  # the call failed and the agent never called again
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", error="unknown order 'A2'")),
        ("tool", "user", AssistantTurn(text="Sorry, I cannot find it.", done=True)),
    ],
    "asked_user": [  # a question in the episode's ordinary course, not caused by the faulted message
        ("user", "tool", faulted("m9", "m9", fault="cycle")),
        ("tool", "user", AssistantTurn(text="Anything else?"), "m7"),
        ("user", "tool", UserTurn(text="No.")),
    ],
    "verifier_recheck": [  # the verifier passed the call
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("verifier", "tool", ContextReply(step=1, helper="verifier", verdict="PASS")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"})),
    ],
    "helper_restored": [  # the helper's reply holds only what the faulted transcript kept
        ("tool", "memory", memory_lost()),
        ("memory", "tool", ContextReply(step=1, helper="memory", text="The user said, in order:\n- and get a refund")),
    ],
}
"""For each detector, an episode with a fault where it must not fire."""


def test_every_detector_has_a_case_that_fires_and_one_that_does_not() -> None:
    assert set(FIRES) == set(QUIET) == set(DETECTORS)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_fires_on_its_evidence_and_only_there(name: str, tmp_path: Path) -> None:
    journal = write_journal(
        tmp_path / "cell.sqlite", episode("e-fires", "t1", FIRES[name]), episode("e-quiet", "t2", QUIET[name])
    )
    cell, episodes = read_cell(journal)
    assert episodes == 2 and cell.injected == {("t1", 0), ("t2", 0)}
    fired = cell.behaviours[("t1", 0)]
    assert [(b.name, b.tier, b.repaired) for b in fired] == [(name, DETECTORS[name].tier, True)]
    assert name not in {b.name for b in cell.behaviours[("t2", 0)]}


def test_no_behaviour_is_counted_in_an_episode_without_a_fault(tmp_path: Path) -> None:
    steps = [s for s in FIRES["tool_error_corrected"] if s[0] != "tool"]
    cell, _ = read_cell(write_journal(tmp_path / "cell.sqlite", episode("e1", "t1", steps)))
    assert cell.injected == set() and cell.behaviours == {} and cell.solved == {("t1", 0)}
