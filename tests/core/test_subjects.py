"""What a delivered envelope must satisfy beyond its shape, and how a refusal reads."""

from __future__ import annotations

import math
import re

import pytest

from faultline._errors import DecodeError, SubjectError
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
    episode_shard,
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


@pytest.mark.parametrize("env", ACCEPTED, ids=lambda env: env.kind)
def test_a_partitioned_subject_carries_the_episodes_partition_and_is_accepted(env: Envelope) -> None:
    """Subjects that name an episode carry its partition after the prefix; controls and dead letters carry none."""
    subject = Subjects("fl", 4).for_envelope(env)
    assert check_delivered(env, subject) is env
    if env.kind in ("control", "dead_letter"):
        assert subject == Subjects("fl").for_envelope(env)
    else:
        assert subject.split(".")[1] == f"{episode_shard(env.episode, 4)}of4"
        assert (
            Subjects("fl", 4).episode_in(subject)
            == env.episode
            == Subjects("fl").episode_in(Subjects("fl").for_envelope(env))
        )


@pytest.mark.parametrize(
    ("subject", "path"),
    [
        ("fl.1of4.ep.e1.env.tool", "$.episode"),  # another partition than e1's (3)
        ("fl.0of2.ep.e1.env.tool", "$.episode"),  # e1's in a layout of 2 partitions is 1
        ("fl.3of4.ctl.faults", "$.body.kind"),  # a tool call is no control
        ("fl.xof4.ep.e1.env.tool", "$.body.kind"),
    ],
)
def test_a_message_on_another_partition_than_its_episodes_is_refused(subject: str, path: str) -> None:
    """A forged partition would put a message in a shard that never sees its episode's other messages."""
    env = call()
    assert episode_shard("e1", 4) == 3 and episode_shard("e1", 2) == 1
    with pytest.raises(DecodeError, match=re.escape(f"at `{path}`")):
        check_delivered(env, subject)


def test_a_shards_filters_name_its_partitions_and_the_journal_shards_split_the_stream() -> None:
    subjects = Subjects("fl", 4)
    inputs = subjects.direct("*", "tool")
    assert inputs == "fl.*.ep.*.tool.*"
    assert subjects.in_shard(inputs, 1, 2) == ["fl.1of4.ep.*.tool.*", "fl.3of4.ep.*.tool.*"]
    assert subjects.in_shard(inputs, 3, 4) == ["fl.3of4.ep.*.tool.*"]
    assert subjects.in_shard(inputs, 0, 1) == [inputs] == Subjects("fl").in_shard(inputs, 1, 2)
    with pytest.raises(SubjectError, match="3 shards do not divide the subjects' 4 partitions"):
        subjects.in_shard(inputs, 0, 3)
    stream = [s for shard in range(2) for s in subjects.shard_journaled(shard, 2)]
    assert stream == ["fl.0of4.>", "fl.2of4.>", "fl.ctl.>", "fl.dlq", "fl.1of4.>", "fl.3of4.>", "fl.ctl.>", "fl.dlq"]
    assert subjects.shard_journaled(0, 1) == [] == Subjects("fl").shard_journaled(0, 2)
    assert len(subjects.journaled) == 4 * 4 + 2 and Subjects("fl").journaled[0] == "fl.ep.>"
    for episode in ("e1", "e2", "ep-77", "x"):
        partition = subjects.direct(episode, "tool").split(".")[1]
        owners = [k for k in range(2) if f"fl.{partition}.>" in subjects.shard_journaled(k, 2)]
        assert owners == [episode_shard(episode, 2)]  # a partition's shard is the episode's shard in a journal set
