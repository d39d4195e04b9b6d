"""Bodies render as one readable line each, chosen by kind, and never longer than asked."""

from __future__ import annotations

import pytest

from faultline.core import (
    Body,
    ContextReply,
    ContextRequest,
    Control,
    DeadLetter,
    EpisodeStarted,
    ErrorRaised,
    FaultSkipped,
    Finished,
    LlmRequest,
    ModelAttempt,
    Recording,
    Start,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.faults import INJECTOR_ROLE
from faultline.journal import describe_body


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (UserTurn(text="Hello,\n  where is\tA1?", done=True), "'Hello, where is A1?' [done]"),
        (ToolCall(call_id="c", name="refund", arguments={"id": "A1", "amount": 5}), 'refund(id="A1", amount=5)'),
        (
            ToolCall(call_id="c", name="refund", arguments_error="Expecting ',' delimiter"),
            "refund() arguments error: Expecting ',' delimiter",
        ),
        (ToolResult(call_id="c", name="refund", error="order A1 not found"), "refund error: order A1 not found"),
        (ContextRequest(step=3, helpers=["planner", "verifier"]), "step 3 asks planner, verifier"),
        (
            ContextRequest(step=3, helpers=["verifier"], proposal={"reply": "All done.\n Goodbye."}, revision=1),
            "step 3 proposes the message 'All done. Goodbye.' (revision 1)",
        ),
        (
            ContextReply(step=3, helper="verifier", verdict="RECHECK", text="wrong id"),
            "step 3 verifier RECHECK: 'wrong id'",
        ),
        (Recording(call="now", index=4, request_digest="d", response=1767225600.5), "now#4 → 1767225600.5"),
        (
            Recording(call="llm", index=0, request_digest="d", request=LlmRequest(role=INJECTOR_ROLE, messages=[])),
            "fault injector llm#0 → null",
        ),
        (
            Recording(call="llm", index=0, request_digest="d", request={"role": "injector"}, error="timeout"),
            "fault injector llm#0 error: timeout",
        ),
        (Recording(call="llm", index=0, request_digest="d", request={"role": "tool"}, error="x"), "llm#0 error: x"),
        (Recording(call="llm", index=1, request_digest="d", error="timeout"), "llm#1 error: timeout"),
        (
            Recording(
                call="llm",
                index=1,
                request_digest="d",
                response={"content": "Hi", "model": "m"},
                attempts=[ModelAttempt(number=1, error="HTTP 500 (busy)"), ModelAttempt(number=2)],
            ),
            "llm#1 [2 attempts; #1 HTTP 500 (busy)] m 0+0 tok → 'Hi'",
        ),
        (
            Recording(call="llm", index=2, request_digest="d", response={"content": "Done.", "model": "m"}),
            "llm#2 m 0+0 tok → 'Done.'",
        ),
        (
            Recording(
                call="llm",
                index=3,
                request_digest="d",
                response={
                    "model": "m",
                    "tool_calls": [
                        {"id": "1", "name": "stock", "arguments": {"item": "flour"}},
                        {"id": "2", "name": "stock", "arguments": {"item": "eggs", "note": "fresh " * 20}},
                    ],
                },
            ),
            'llm#3 m 0+0 tok → stock(item="flour"), stock(item="eggs", note="fresh fresh fresh fresh fresh fresh fr…)',
        ),
        (
            Recording(
                call="llm",
                index=4,
                request_digest="d",
                response={"model": "m", "tool_calls": [{"name": "stock", "arguments": '{"item": "flour"}'}]},
            ),
            "llm#4 m 0+0 tok → stock()",
        ),
        (
            ToolCall(call_id="c", name="note", arguments={"text": "x" * 100, "to": "chef"}),
            f'note(text="{"x" * 38}…, to="chef")',
        ),
        (
            EpisodeStarted(domain="airline", task="t1", forked_from="ep-a", forked_at=12),
            "airline/t1 trial 0 seed 0 forked from ep-a@12",
        ),
        (EpisodeStarted(domain="retail", task="t2", trial=1, run="c1-1"), "retail/t2 trial 1 seed 0 run c1-1"),
        (EpisodeStarted(task="sum", system="desk:HelpDesk"), "desk:HelpDesk/sum trial 0 seed 0"),  # not "-/sum"
        (Finished(output=4.0), "output 4.0"),
        (Finished(), "output null"),  # was {"kind":"finished"}, which hid that the finisher finished with nothing
        (ErrorRaised(agent="env", input_id="i", error_type="KeyError", message="'x'"), "env raised KeyError: 'x'"),
        (
            FaultSkipped(rule_id="r1", fault="hallucination", reason="the injector returned the message unchanged"),
            "hallucination (rule r1) not applied: the injector returned the message unchanged",
        ),
        (Control(name="helpers", data={"roster": ["planner"]}), 'helpers {"roster":["planner"]}'),
        (DeadLetter(reason="not msgpack", subject="fl.ep.e.a", data=b"\xff\x00"), "fl.ep.e.a: not msgpack (2 bytes)"),
        (Start(text="go", data={"question": "why"}), 'start \'go\' {"question":"why"}'),
        (
            Start(data={f"setting_{i}": i for i in range(20)}),
            "start '' " + '{"setting_0":0,"setting_1":1,"setting_10":10,"setting_11":11,"setting_12":12,"s…',
        ),
    ],
)
def test_each_kind_has_a_readable_line(body: Body, line: str) -> None:
    assert describe_body(body) == line


def test_long_renderings_are_clipped_to_the_width() -> None:
    line = describe_body(UserTurn(text="word " * 100), width=40)
    assert len(line) == 40 and line.endswith("…")
