"""Envelopes and bodies survive the wire unchanged, and bad bytes fail with a path."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultline._errors import DecodeError, SubjectError
from faultline.core import (
    AssistantTurn,
    Envelope,
    MessageBody,
    Note,
    Recording,
    Subjects,
    ToolCall,
    ToolResult,
    UserTurn,
    body_digest,
    check_token,
    decode_envelope,
    derive_id,
    encode,
)

tokens = st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
bodies = st.one_of(
    st.builds(UserTurn, text=st.text(), done=st.booleans()),
    st.builds(AssistantTurn, text=st.text()),
    st.builds(
        ToolCall, call_id=tokens, name=tokens, arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4)
    ),
    st.builds(ToolResult, call_id=tokens, name=tokens, output=json_values, error=st.text(max_size=10)),
    st.builds(Note, text=st.text(), data=st.dictionaries(st.text(max_size=8), json_values, max_size=3)),
    st.builds(
        Recording,
        call=st.sampled_from(["llm", "request", "now", "random"]),
        index=st.integers(0, 1000),
        request_digest=st.text(max_size=32),
        response=json_values,
    ),
)
envelopes = st.builds(
    Envelope,
    id=tokens,
    episode=tokens,
    sender=tokens,
    recipient=tokens,
    body=bodies,
    causation=tokens,
    hops=st.integers(0, 10_000),
    ts=st.floats(0, 2e9),
)


@given(envelopes)
def test_envelope_round_trips_through_msgpack(env: Envelope) -> None:
    assert decode_envelope(encode(env)) == env


@given(bodies)
def test_body_digest_is_stable_across_encodings(body: MessageBody) -> None:
    again = msgspec.msgpack.decode(encode(body), type=MessageBody)
    assert body_digest(again) == body_digest(body)


def test_kind_is_the_body_tag() -> None:
    env = Envelope(id="1", episode="e", sender="a", recipient="b", body=UserTurn(text="hi"))
    assert env.kind == "user_turn"
    assert msgspec.msgpack.decode(encode(env))["body"]["kind"] == "user_turn"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1garbage", "not msgpack"),
        (encode({"id": "1", "episode": "e", "sender": "a", "body": {"kind": "nope"}}), "Invalid value 'nope'"),
        (encode({"id": "1", "episode": "e", "sender": "a", "body": {"kind": "user_turn", "text": 3}}), "$.body.text"),
        (encode({"id": "1", "episode": "e", "body": {"kind": "user_turn", "text": "x"}}), "sender"),
        (b"\x81\xa2id\xa2\xc3\x28", "not msgpack: 'utf-8' codec can't decode"),
        (b"\x81\xa4body\x81\xa4data" + b"\x91" * 100_000 + b"\x01", "not a valid envelope: maximum recursion depth"),
    ],
)
def test_malformed_bytes_name_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=None) as info:
        decode_envelope(data)
    assert reason in str(info.value)


def test_derived_ids_depend_only_on_parent_and_index() -> None:
    assert derive_id("abc", 0) == derive_id("abc", 0)
    assert len({derive_id("abc", i) for i in range(100)} | {derive_id("abd", 0)}) == 101
    assert derive_id("abc", 0, "r") != derive_id("abc", 0)


def test_subjects_follow_the_design_and_the_prefix() -> None:
    s = Subjects("xy")
    assert s.direct("e1", "tool") == "xy.ep.e1.tool.*"
    assert s.direct("e1", "tool", "user") == "xy.ep.e1.tool.user"
    assert s.topic("e1", "news") == "xy.tp.e1.news.*"
    assert s.rec("e1", "tool") == "xy.rec.e1.tool"
    assert s.event("completed", "e1") == "xy.ev.completed.e1.*"
    assert s.event_episode(s.event("completed", "e1", "env")) == "e1"
    assert s.dlq == "xy.dlq"
    assert "xy.svc.>" not in s.journaled


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "a*", ">", "x" * 65, "é"])
def test_unsafe_tokens_are_refused(bad: str) -> None:
    with pytest.raises(SubjectError, match="not a valid subject token"):
        check_token(bad, "episode id")
