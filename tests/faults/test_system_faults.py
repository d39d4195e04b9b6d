"""Which fault types can apply to a system of one's own, and why the others cannot."""

from __future__ import annotations

from typing import Any

from faultline.agent import Grade, InputRecord, System
from faultline.faults import why_not_on


class Caller(System):
    """A system whose agents send tool calls."""

    name = "caller"
    sends = frozenset({"start", "note", "finished", "tool_call", "tool_result"})

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


def test_a_fault_that_follows_the_tasks_gold_actions_cannot_apply_to_input_records() -> None:
    """call_order_swap sends the task's next gold action: on a system that sends tool calls it was accepted and
    never applied, without a word, not even a skipped fault."""
    assert why_not_on("call_order_swap", Caller()) == (
        "call_order_swap sends the task's next gold action, and only a domain's tasks have them; system 'caller'"
        " runs input records"
    )
    assert why_not_on("redundant_call", Caller()) == ""  # it repeats the agent's own previous call
