"""What a delivered envelope must satisfy beyond its shape, and how a refusal reads."""

from __future__ import annotations

import math

import pytest

from faultline._errors import DecodeError
from faultline.core import (
    Control,
    DeadLetter,
    Envelope,
    EpisodeCompleted,
    Note,
    Recording,
    Subjects,
    ToolCall,
    check_delivered,
)
from faultline.core._subjects import MAX_HOPS

CALL = ToolCall(call_id="c1", name="get_order")


def call(**fields: object) -> Envelope:
    values: dict[str, object] = {"id": "m1", "episode": "e1", "sender": "tool", "recipient": "env", "body": CALL}
    values.update(fields)
    return Envelope(**values)  # type: ignore[arg-type]


ACCEPTED = [
    call(),
    call(hops=MAX_HOPS, ts=1.7e9),
    Envelope(id="m", episode="e1", sender="user", topic="chat", body=Note(text="hi")),
    Envelope(id="m", episode="e1", sender="tool", body=Recording(call="now", index=0, request_digest="d")),
    Envelope(id="m", episode="e1", sender="runner", body=EpisodeCompleted(outcome="success")),
    Envelope(id="m", episode="ops", sender="operator", body=Control(name="faults")),
    Envelope(id="m", episode="dlq", sender="bus", body=DeadLetter(reason="r", subject="fl.ep.e1.env", data=b"x")),
]


@pytest.mark.parametrize("env", ACCEPTED, ids=lambda env: env.kind)
def test_an_envelope_on_its_own_subject_is_accepted(env: Envelope) -> None:
    for prefix in ("fl", "other"):
        assert check_delivered(env, Subjects(prefix).for_envelope(env)) is env


REFUSED = [
    (call(sender="evil.sender"), "fl.ep.e1.env.tool", "a subject token", "'evil.sender'", "$.sender"),
    (call(sender=""), "fl.ep.e1.env.tool", "a subject token", "''", "$.sender"),
    (call(episode="e 1"), "fl.ep.e1.env.tool", "a subject token", "'e 1'", "$.episode"),
    (call(ts=math.nan), "fl.ep.e1.env.tool", "a finite `float` >= 0", "nan", "$.ts"),
    (call(ts=-math.inf), "fl.ep.e1.env.tool", "a finite `float` >= 0", "-inf", "$.ts"),
    (call(hops=2**63), "fl.ep.e1.env.tool", f"`int` in 0..{MAX_HOPS}", str(2**63), "$.hops"),
    (call(hops=-1), "fl.ep.e1.env.tool", f"`int` in 0..{MAX_HOPS}", "-1", "$.hops"),
    (call(), "fl.ep.e2.env.tool", "subject `fl.ep.e1.env.tool`", "`fl.ep.e2.env.tool`", "$.episode"),
    (call(), "fl.ep.e1.user.tool", "subject `fl.ep.e1.env.tool`", "`fl.ep.e1.user.tool`", "$.recipient"),
    (call(), "fl.ep.e1.env.user", "subject `fl.ep.e1.env.tool`", "`fl.ep.e1.env.user`", "$.sender"),
    (call(), "fl.ep.e1.env.tool.more", "no subject tokens past", "`fl.ep.e1.env.tool.more`", "$.sender"),
    (call(), "fl.ev.completed.e1.tool", "subject `fl.ep.e1.env.tool`", "`fl.ev.completed.e1.tool`", "$.body.kind"),
    (call(recipient=""), "fl.ep.e1.env.tool", "a recipient or a topic", "neither", "$.recipient"),
    (
        Envelope(id="m", episode="e1", sender="tool", body=Recording(call="now", index=0, request_digest="d")),
        "fl.rec.e1.user",
        "subject `fl.rec.e1.tool`",
        "`fl.rec.e1.user`",
        "$.sender",
    ),
    (
        Envelope(id="m", episode="e1", sender="env", body=EpisodeCompleted(outcome="success")),
        "fl.ep.e1.env.tool",
        "subject `fl.ev.completed.e1.env`",
        "`fl.ep.e1.env.tool`",
        "$.body.kind",
    ),
    (
        Envelope(id="m", episode="e1", sender="env", body=EpisodeCompleted(outcome="success")),
        "fl.ev.started.e1.tool",
        "subject `fl.ev.completed.e1.env`",
        "`fl.ev.started.e1.tool`",
        "$.body.kind",
    ),
    (
        Envelope(id="m", episode="ops", sender="operator", body=Control(name="helpers")),
        "fl.ctl.faults",
        "subject `fl.ctl.helpers`",
        "`fl.ctl.faults`",
        "$.body.name",
    ),
]


@pytest.mark.parametrize(("env", "subject", "expected", "got", "path"), REFUSED)
def test_a_refusal_says_what_was_expected_what_came_and_where(
    env: Envelope, subject: str, expected: str, got: str, path: str
) -> None:
    with pytest.raises(DecodeError) as refused:
        check_delivered(env, subject)
    reason = str(refused.value)
    assert reason.startswith(f"envelope refused: Expected {expected}")
    assert f", got {got}" in reason
    assert reason.endswith(f" - at `{path}`")


def test_a_refusal_quotes_a_long_value_only_in_part() -> None:
    with pytest.raises(DecodeError) as refused:
        check_delivered(call(sender="x" * 10_000), "fl.ep.e1.env")
    assert len(str(refused.value)) < 300 and "..." in str(refused.value)


def test_what_was_accepted_before_does_not_let_a_bad_envelope_through_later() -> None:
    """`check_delivered` remembers subjects and names that agreed; time, hops and a control's name are still checked."""
    faults = Envelope(id="m", episode="ops", sender="operator", body=Control(name="faults"))
    assert check_delivered(call(), "fl.ep.e1.env.tool") is not None
    assert check_delivered(faults, "fl.ctl.faults") is faults
    helpers = Envelope(id="m", episode="ops", sender="operator", body=Control(name="helpers"))
    for env, subject in ((call(ts=math.nan), "fl.ep.e1.env.tool"), (call(hops=-1), "fl.ep.e1.env.tool")):
        with pytest.raises(DecodeError):
            check_delivered(env, subject)
    with pytest.raises(DecodeError):
        check_delivered(helpers, "fl.ctl.faults")
