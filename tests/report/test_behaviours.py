"""Each behaviour detector fires on a journal that holds its evidence after a fault, and stays quiet on
one that does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.core import (
    AssistantTurn,
    ContextReply,
    ContextRequest,
    DefenseFired,
    Envelope,
    FaultApplied,
    MessageBody,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.report import DETECTORS, Detector, EpisodeTrace, detect, read_cell

from .journals import Step, addressed, episode, faulted, write_journal

EARLY = "I want to return the blue kettle"
PROPOSAL = {"name": "get_order", "arguments": {"order_id": "A2"}}


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
    "tool_error_corrected": [  # the faulted call m9 failed
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", error="unknown order 'A2'"), "m9"),
        ("env", "tool", ToolResult(call_id="c2", name="get_order", output={"status": "shipped"})),
    ],
    "asked_user": [
        ("user", "tool", faulted("m9", "m9", fault="cycle")),
        ("tool", "user", AssistantTurn(text="Which order do you mean?"), "m9"),
        ("user", "tool", UserTurn(text="Order A1.")),
    ],
    "verifier_recheck": [  # the verifier reviewed a call proposed while handling the faulted user turn m9
        ("user", "tool", faulted("m9", "m9", fault="hallucination")),
        ("tool", "verifier", ContextRequest(step=1, proposal=PROPOSAL), "m9"),
        ("verifier", "tool", ContextReply(step=1, helper="verifier", verdict="RECHECK", text="wrong id"), "m2"),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"})),
    ],
    "helper_restored": [
        ("tool", "memory", memory_lost()),
        ("memory", "tool", ContextReply(step=1, helper="memory", text=f"The user said, in order:\n- {EARLY}")),
    ],
    "acted_on_copy": [  # the tool answered the storm's copy with a question: the fault's effect, not asked_user
        ("user", "tool", faulted("m9", "m9", "m9-copy")),
        ("tool", "user", AssistantTurn(text="Which order do you mean?"), "m9-copy"),
        ("user", "tool", UserTurn(text="Order A1.")),
    ],
    "echo_received": [  # a cycle sent the user's turn back to the user, who sent nothing on: the tool never got it
        ("user", "user", UserTurn(text="Order A1, please.")),
        ("user", "", addressed("m1", "user", "tool", ("m1", "user"), fault="cycle")),
    ],
}
"""For each detector, an episode where it must fire (and repair, but for `NEVER_REPAIRS`)."""
NEVER_REPAIRS = {"acted_on_copy", "echo_received"}
"""Detectors whose case here failed in every tier it counts in: a fault's effect, or an echo never passed on."""

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
    "acted_on_copy": [  # dedup dropped the copy; the tool answered the message as sent
        ("user", "tool", faulted("m9", "m9", "m9-copy")),
        ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m9-copy")),
        ("tool", "user", AssistantTurn(text="Which order do you mean?"), "m9"),
    ],
    "echo_received": [  # the cycle breaker dropped the echo at the user
        ("user", "user", UserTurn(text="Order A1, please.")),
        ("user", "", addressed("m1", "user", "tool", ("m1", "user"), fault="cycle")),
        ("user", "", DefenseFired(defense="cycle", agent="user", message_id="m1")),
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
    repairs = name not in NEVER_REPAIRS
    assert [(b.name, b.all_tiers, b.repaired) for b in fired] == [(name, list(DETECTORS[name].all_tiers), repairs)]
    assert name not in {b.name for b in cell.behaviours[("t2", 0)]}


def test_no_behaviour_is_counted_in_an_episode_without_a_fault(tmp_path: Path) -> None:
    steps = [s for s in FIRES["tool_error_corrected"] if s[0] != "tool"]
    cell, _ = read_cell(write_journal(tmp_path / "cell.sqlite", episode("e1", "t1", steps)))
    assert cell.injected == set() and cell.behaviours == {} and cell.solved == {("t1", 0)}


def test_a_clarifying_question_after_a_faulted_instruction_counts_and_a_later_one_does_not(tmp_path: Path) -> None:
    """`instruction_ambiguity` rewrites the user's Start: the user's first turn speaks the vague instruction, and
    the agent's question about it (after a look-up of its own) answers the fault; a question after the user's
    next turn is the episode's ordinary course."""
    steps: list[Step] = [
        ("runner", "user", faulted("s-user", "s-user", fault="instruction_ambiguity")),
        ("user", "tool", UserTurn(text="I want to return the thing I bought."), "s-user"),
        ("tool", "env", ToolCall(call_id="c1", name="find_user"), "m2"),
        ("env", "tool", ToolResult(call_id="c1", name="find_user", output={"orders": ["A1", "A2"]}), "m3"),
        ("tool", "user", AssistantTurn(text="Which of your two orders do you mean?"), "m4"),
        ("user", "tool", UserTurn(text="Order A1."), "m5"),
        ("tool", "user", AssistantTurn(text="Done. Anything else?"), "m6"),
    ]
    cell, _ = read_cell(write_journal(tmp_path / "cell.sqlite", episode("e1", "t1", steps)))
    assert [(b.name, b.pos, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("asked_user", 6, True)]


def call(call_id: str, order: str, cause: str) -> Step:
    return ("tool", "env", ToolCall(call_id=call_id, name="get_order", arguments={"order_id": order}), cause)


def failed(call_id: str, cause: str) -> Step:
    return ("env", "tool", ToolResult(call_id=call_id, name="get_order", error="unknown order"), cause)


def succeeded(call_id: str, cause: str) -> Step:
    return ("env", "tool", ToolResult(call_id=call_id, name="get_order", output={"status": "shipped"}), cause)


def corrected_call(cause: str, at: int = 2) -> list[Step]:
    """A tool call (message m`at`) made while handling message `cause` fails, and the agent's next call succeeds."""
    return [
        call("c1", "A2", cause),
        failed("c1", f"m{at}"),
        call("c2", "A1", f"m{at + 1}"),
        succeeded("c2", f"m{at + 2}"),
    ]


def test_a_corrected_tool_error_counts_only_when_the_fault_caused_it(tmp_path: Path) -> None:
    """The failed call was made while handling the faulted user turn m9: the fault's doing. The same failure of a
    call made while handling m0, a turn before the fault, is the episode's own."""
    fault = ("user", "tool", faulted("m9", "m9", fault="hallucination"))
    journal = write_journal(
        tmp_path / "cell.sqlite",
        episode("e-tied", "t1", [fault, *corrected_call("m9")]),
        episode("e-untied", "t2", [fault, *corrected_call("m0")]),
    )
    cell, _ = read_cell(journal)
    assert [(b.name, b.pos, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("tool_error_corrected", 4, True)]
    assert cell.behaviours[("t2", 0)] == []


def test_a_recheck_counts_only_when_it_reviews_what_the_fault_touched(tmp_path: Path) -> None:
    """RECHECK of a call proposed in answer to the faulted user turn m9 counts; RECHECK of one proposed while
    handling m0, before the fault, does not, though it comes after the fault."""

    def rechecked(cause: str) -> list[Step]:
        return [
            ("user", "tool", faulted("m9", "m9", fault="hallucination")),
            ("tool", "verifier", ContextRequest(step=1, proposal=PROPOSAL), cause),
            ("verifier", "tool", ContextReply(step=1, helper="verifier", verdict="RECHECK", text="wrong id"), "m2"),
            ("env", "tool", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"})),
        ]

    journal = write_journal(
        tmp_path / "cell.sqlite", episode("e-tied", "t1", rechecked("m9")), episode("e-untied", "t2", rechecked("m0"))
    )
    cell, _ = read_cell(journal)
    assert [(b.name, b.pos, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("verifier_recheck", 4, True)]
    assert cell.behaviours[("t2", 0)] == []


def test_a_call_sent_from_a_faulted_model_call_is_the_faults_doing(tmp_path: Path) -> None:
    """A fault on the tool agent's model call while it handles user turn m1 touches what the agent sends after that
    call (the failed call m3); a call it sent before the faulted model call (m2) is its own."""
    lost = FaultApplied(
        rule_id="r1",
        fault="memory_loss",
        original={"id": "llm-0", "sender": "tool", "causation": "m1", "messages": []},
        results=[{"id": "llm-0", "messages": []}],
        model_call=0,
    )
    turn: Step = ("user", "tool", UserTurn(text="Return order A1, please."))
    after = [turn, ("tool", "", lost, "m1"), *corrected_call("m1", at=3)]
    before = [turn, call("c1", "A2", "m1"), ("tool", "", lost, "m1"), failed("c1", "m2"), call("c2", "A1", "m4")]
    before.append(succeeded("c2", "m5"))
    journal = write_journal(
        tmp_path / "cell.sqlite", episode("e-after", "t1", after), episode("e-before", "t2", before)
    )
    cell, _ = read_cell(journal)
    assert [(b.name, b.pos, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("tool_error_corrected", 5, True)]
    assert cell.behaviours[("t2", 0)] == []


EMAIL_QUESTION = AssistantTurn(text="Could you please tell me your email?")
RETURN = UserTurn(text="I want to return the blue kettle.")
EMAIL = UserTurn(text="It is omar@example.com.")


def test_a_sighting_the_fault_free_run_shows_too_is_no_response_to_the_fault(tmp_path: Path) -> None:
    """A storm delivered the user's turn m1 and a copy m2; the tool asked for the email in answer to each. The
    fault-free run of the unit asked once: the first question is the system's ordinary course, the second, asked
    again because of the copy, is what the fault changed: its effect (acted_on_copy), which repairs nothing."""
    storm: list[Step] = [
        ("user", "tool", RETURN),
        ("user", "tool", RETURN),
        ("user", "", faulted("m1", "m1", "m2")),
        ("tool", "user", EMAIL_QUESTION, "m1"),
        ("user", "tool", EMAIL, "m4"),
        ("tool", "user", EMAIL_QUESTION, "m2"),
        ("user", "tool", EMAIL, "m6"),
    ]
    plain: list[Step] = [
        ("user", "tool", RETURN),
        ("tool", "user", EMAIL_QUESTION, "m1"),
        ("user", "tool", EMAIL, "m2"),
    ]
    base, _ = read_cell(write_journal(tmp_path / "baseline.sqlite", episode("e-base", "t1", plain)))
    journal = write_journal(tmp_path / "storm.sqlite", episode("e-storm", "t1", storm))
    alone, _ = read_cell(journal)
    against, _ = read_cell(journal, baseline=base.acts)
    assert [(b.name, b.pos) for b in alone.behaviours[("t1", 0)]] == [("asked_user", 5), ("acted_on_copy", 7)]
    assert [(b.name, b.pos, b.repaired) for b in against.behaviours[("t1", 0)]] == [("acted_on_copy", 7, False)]


def test_a_defense_drop_the_fault_free_run_made_too_is_no_response_to_the_fault(tmp_path: Path) -> None:
    """Dedup drops the user's repeated turn in the fault-free run as well: the same drop after a fault is the
    defense's ordinary work, though the dropped message's id differs between the runs."""
    drop = DefenseFired(defense="dedup", agent="tool", message_id="m2")
    plain: list[Step] = [("user", "tool", RETURN), ("user", "tool", RETURN), ("tool", "", drop)]
    cycled: list[Step] = [
        ("tool", "user", faulted("m0", "m0", fault="cycle")),
        ("user", "tool", RETURN),
        ("user", "tool", RETURN),
        ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m3")),
    ]
    base, _ = read_cell(write_journal(tmp_path / "baseline.sqlite", episode("e-base", "t1", plain)))
    journal = write_journal(tmp_path / "cycle.sqlite", episode("e-cycle", "t1", cycled))
    alone, _ = read_cell(journal)
    against, _ = read_cell(journal, baseline=base.acts)
    assert [(b.name, b.repaired) for b in alone.behaviours[("t1", 0)]] == [("defense_filtered", False)]
    assert against.behaviours[("t1", 0)] == []


def test_questions_asked_in_answer_to_a_storms_copies_are_its_effect_not_repairs(tmp_path: Path) -> None:
    """The shape a sim storm leaves: the user's first turn m1 and two copies m2, m3 reach the tool, which asks for
    the email in answer to each, and the user answers each question. The fault-free run asks once. The extra
    questions were asked because copies got through, not to clarify anything: no asked_user, but one acted_on_copy
    per copy, failed in rule and in reasoning (MAS-FIRE's "duplicates cause abnormal behaviour")."""
    storm: list[Step] = [
        ("user", "tool", RETURN),
        ("user", "tool", RETURN),
        ("user", "tool", RETURN),
        ("user", "", faulted("m1", "m1", "m2", "m3")),
        ("tool", "user", EMAIL_QUESTION, "m1"),
        ("tool", "user", EMAIL_QUESTION, "m2"),
        ("user", "tool", EMAIL, "m5"),
        ("tool", "user", EMAIL_QUESTION, "m3"),
        ("user", "tool", EMAIL, "m6"),
        ("user", "tool", EMAIL, "m8"),
    ]
    plain: list[Step] = [
        ("user", "tool", RETURN),
        ("tool", "user", EMAIL_QUESTION, "m1"),
        ("user", "tool", EMAIL, "m2"),
    ]
    base, _ = read_cell(write_journal(tmp_path / "baseline.sqlite", episode("e-base", "t1", plain)))
    cell, _ = read_cell(write_journal(tmp_path / "storm.sqlite", episode("e-storm", "t1", storm)), baseline=base.acts)
    seen = cell.behaviours[("t1", 0)]
    assert [(b.name, b.pos, b.repaired) for b in seen] == [("acted_on_copy", 7, False), ("acted_on_copy", 9, False)]
    assert all(b.all_tiers == ["rule", "reasoning"] and not b.repaired_in("reasoning") for b in seen)


def test_a_tool_error_set_off_by_a_copy_is_not_a_corrected_fault(tmp_path: Path) -> None:
    """The tool cancelled order A1 in answer to the user's turn m1 and again in answer to its copy m2; the second
    cancel failed and the tool then looked the order up. That failure was the copy's doing and the call after it
    repairs nothing the fault did: acted_on_copy, not tool_error_corrected."""
    cancel = UserTurn(text="Cancel order A1, please.")

    def cancelled(call_id: str, cause: str) -> Step:
        return ("tool", "env", ToolCall(call_id=call_id, name="cancel_order", arguments={"order_id": "A1"}), cause)

    storm: list[Step] = [
        ("user", "tool", cancel),
        ("user", "tool", cancel),
        ("user", "", faulted("m1", "m1", "m2")),
        cancelled("c1", "m1"),
        ("env", "tool", ToolResult(call_id="c1", name="cancel_order", output={"status": "cancelled"}), "m4"),
        cancelled("c2", "m2"),
        ("env", "tool", ToolResult(call_id="c2", name="cancel_order", error="order A1 is already cancelled"), "m6"),
        call("c3", "A1", "m7"),
        succeeded("c3", "m8"),
    ]
    cell, _ = read_cell(write_journal(tmp_path / "storm.sqlite", episode("e-storm", "t1", storm)))
    assert [(b.name, b.pos, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("acted_on_copy", 7, False)]


def test_an_agent_acting_on_a_broadcasts_stray_delivery_is_the_faults_effect(tmp_path: Path) -> None:
    """A broadcast also delivered the tool's call m1 to the user as m2, who answered it; a scope filter that drops
    the stray delivery leaves nothing for the user to act on, and the drop is the rule tier's repair."""
    lookup = ToolCall(call_id="c1", name="get_order", arguments={"order_id": "A1"})

    def broadcast(*after: Step) -> list[Step]:
        return [("tool", "env", lookup), ("tool", "user", lookup), ("tool", "", faulted("m1", "m1", "m2")), *after]

    stray = broadcast(("user", "tool", UserTurn(text="Why am I seeing a tool call?"), "m2"))
    scoped = broadcast(("user", "", DefenseFired(defense="scope", agent="user", message_id="m2")))
    journal = write_journal(
        tmp_path / "broadcast.sqlite", episode("e-stray", "t1", stray), episode("e-scoped", "t2", scoped)
    )
    cell, _ = read_cell(journal)
    assert [(b.name, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("acted_on_copy", False)]
    assert [(b.name, b.repaired) for b in cell.behaviours[("t2", 0)]] == [("defense_filtered", True)]


def test_a_defense_that_drops_a_cycles_echo_stops_the_echo_and_repairs_nothing(tmp_path: Path) -> None:
    """A cycle sent the user's turn m1 back to the user instead of to the tool, and the cycle breaker dropped the
    echo at the user: the echo is stopped, but the tool never gets the turn. The defense fired and did not resolve
    the fault (MAS-FIRE's ✗ in the rule tier), though it met it; a storm's copy dropped while its original reached
    the tool is the rule tier's repair, and a storm whose original and copy were both dropped repaired nothing."""
    cycled: list[Step] = [
        ("user", "user", RETURN),
        ("user", "", addressed("m1", "user", "tool", ("m1", "user"), fault="cycle")),
        ("user", "", DefenseFired(defense="cycle", agent="user", message_id="m1")),
    ]
    storm = addressed("m1", "user", "tool", ("m1", "tool"), ("m2", "tool"), fault="storm")
    deduped: list[Step] = [
        ("user", "tool", RETURN),
        ("user", "tool", RETURN),
        ("user", "", storm),
        ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m2")),
    ]
    starved = [*deduped, ("tool", "", DefenseFired(defense="rate", agent="tool", message_id="m1"))]
    journal = write_journal(
        tmp_path / "cell.sqlite",
        episode("e-cycle", "t1", cycled, outcome="timeout"),
        episode("e-dedup", "t2", deduped),
        episode("e-starved", "t3", starved, outcome="timeout"),
    )
    cell, _ = read_cell(journal)
    assert [(b.name, b.tier, b.repaired) for b in cell.behaviours[("t1", 0)]] == [("defense_filtered", "rule", False)]
    assert [(b.name, b.repaired) for b in cell.behaviours[("t2", 0)]] == [("defense_filtered", True)]
    assert [(b.name, b.repaired) for b in cell.behaviours[("t3", 0)]] == [("defense_filtered", False)] * 2
    assert cell.cancelled == {("t1", 0), ("t2", 0), ("t3", 0)}  # each fault met a defense, repaired or not


def test_a_detector_of_several_tiers_gives_its_behaviour_every_one_with_one_outcome(tmp_path: Path) -> None:
    """A detector that names more than one tier counts its behaviour in each of them; a failed sighting failed in
    all of them."""

    def drops_failed(trace: EpisodeTrace) -> list[tuple[int, bool]]:
        return [(pos, False) for pos, env in trace.after_fault() if isinstance(env.body, DefenseFired)]

    both = Detector("drop", "rule", "a defense's drop, failed in both", drops_failed, tiers=("rule", "reasoning"))
    steps = list(enumerate(episode("e1", "t1", FIRES["defense_filtered"]), 1))
    [seen] = detect(steps, [both])
    assert (seen.all_tiers, seen.repaired, [seen.repaired_in(t) for t in ("rule", "reasoning")]) == (
        ["rule", "reasoning"],
        False,
        [False, False],
    )


def test_a_cycles_echo_passed_on_is_received_without_impact(tmp_path: Path) -> None:
    """A cycle sent the user's turn m1 back to the user, who sent it on to the tool (as it was, or saying it again
    with a word before it), and the tool then did what it does without the fault: MAS-FIRE's "receives cyclic
    messages without impact", failed in rule (nothing filtered it) and repaired in reasoning. Had the user said
    something else, or the tool answered otherwise, the echo changed what they did: acted_on_copy, failed in both;
    had the user said nothing, the tool never got the turn: echo_received failed in both."""
    turn = UserTurn(text="Order A1, please.")
    cycle = addressed("m1", "user", "tool", ("m1", "user"), fault="cycle")
    shipped = AssistantTurn(text="It has shipped.")
    plain: list[Step] = [("user", "tool", turn), ("tool", "user", shipped, "m1")]
    echoed: list[Step] = [("user", "user", turn), ("user", "", cycle)]

    def passed_on(said: UserTurn, answer: AssistantTurn = shipped) -> list[Step]:
        return [*echoed, ("user", "tool", said, "m1"), ("tool", "user", answer, "m3")]

    again = UserTurn(text="To repeat: Order A1, please.")
    cases = {
        "as it was": (passed_on(turn), [("echo_received", False, ["rule"])]),
        "said again": (passed_on(again), [("echo_received", False, ["rule"])]),
        "something else": (passed_on(UserTurn(text="Why did I hear myself?")), [("acted_on_copy", False, [])]),
        "answered otherwise": (passed_on(again, AssistantTurn(text="Which order?")), [("acted_on_copy", False, [])]),
        "said nothing": (echoed, [("echo_received", False, [])]),
    }
    base = read_cell(write_journal(tmp_path / "b.sqlite", *(episode(f"b{i}", c, plain) for i, c in enumerate(cases))))
    journal = write_journal(
        tmp_path / "c.sqlite", *(episode(f"e{i}", c, s) for i, (c, (s, _)) in enumerate(cases.items()))
    )
    cell, _ = read_cell(journal, baseline=base[0].acts)
    for case, (_, expected) in cases.items():
        seen = cell.behaviours[(case, 0)]
        assert [(b.name, b.repaired, b.failed_in) for b in seen] == expected, case
    [received] = cell.behaviours[("said again", 0)]
    assert [received.repaired_in(t) for t in ("rule", "reasoning")] == [False, True]


@pytest.mark.parametrize("body", ["x", {"transcript": 5}])
def test_a_fault_event_that_records_no_message_removed_no_text(body: object) -> None:
    """As any agent's credential may publish one of its own: it is journaled, and read as changing no transcript."""
    recorded = {"id": "m9", "body": body}
    for model_call in (-1, 0):
        fault = FaultApplied(
            rule_id="r1", fault="memory_loss", original=recorded, results=[recorded], model_call=model_call
        )
        assert EpisodeTrace.of([(1, Envelope(id="f", episode="e", sender="tool", body=fault))]).removed == []
