"""The MAS-FIRE fault types in one process: prompt, structural and semantic rewrites, and the
injector's failures journaled as not applied."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from faultline._errors import FaultRuleError
from faultline.agents import EpisodeSpec
from faultline.core import (
    AssistantTurn,
    ChatMessage,
    ContextRequest,
    Envelope,
    FaultApplied,
    FaultSkipped,
    Inbound,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    Start,
    ToolCall,
    derive_id,
)
from faultline.faults import (
    COMPRESSED,
    INJECTOR_ROLE,
    INSTRUCTION,
    MASFIRE_FAULTS,
    SYSTEM_ADDENDUM,
    TEMPLATES,
    FaultInterceptor,
    FaultRule,
    FaultType,
    fault_types,
    register_fault,
)
from faultline.runtime.models import SimBackend
from tests.faults.test_faults import Plan, call, env, rules, through

SEMANTIC = [n for n in MASFIRE_FAULTS if fault_types()[n].mechanism == "semantic"]


def start(to: str) -> Envelope:
    return env(0, Start(data={"domain": "d", "task": "t"}), sender="runner", to=to)


def test_every_masfire_type_has_a_mechanism_and_every_semantic_one_a_template() -> None:
    mechanisms = [fault_types()[n].mechanism for n in MASFIRE_FAULTS]
    assert {m: mechanisms.count(m) for m in set(mechanisms)} == {
        "prompt": 4,
        "structural": 3,
        "semantic": 5,
        "routing": 3,
    }
    instruction = {"instruction_logic_conflict", "instruction_ambiguity"}
    assert set(TEMPLATES) == set(SEMANTIC) | instruction | {"call_order_swap", "redundant_call"}
    assert {SYSTEM_ADDENDUM, INSTRUCTION} <= {f.name for f in msgspec.structs.fields(EpisodeSpec)}


@pytest.mark.parametrize(
    ("fault", "key", "words"),
    [
        ("role_ambiguity", SYSTEM_ADDENDUM, "reviewer"),
        ("blind_trust", SYSTEM_ADDENDUM, "absolute truth"),
        ("instruction_logic_conflict", INSTRUCTION, "Cancel order #W2001 for ann@example.com."),
        ("instruction_ambiguity", INSTRUCTION, "Cancel order the one I mentioned for my usual address."),
    ],
)
async def test_prompt_faults_rewrite_the_start_of_their_agents(fault: str, key: str, words: str) -> None:
    injector = Injector()
    interceptor = FaultInterceptor(rules(FaultRule(id="p", fault=fault)), catalog=Plan(), injector=injector)
    target = "tool" if key == SYSTEM_ADDENDUM else "user"
    other = "user" if target == "tool" else "tool"
    out, events = await through(interceptor, start(target), start(other))
    assert len(events) == 1 and out[1] == start(other)
    # the instruction faults are the injector's rewrites (here the offline rules); the system-prompt ones fixed text
    assert [(r.role, r.metadata["fault"]) for _, r in injector.asked] == (
        [(INJECTOR_ROLE, fault)] if key == INSTRUCTION else []
    )
    data = out[0].body.data  # type: ignore[union-attr]
    assert words in data[key] and data["task"] == "t"
    if fault == "instruction_logic_conflict":
        assert data[key].endswith("exactly as it is.")
    assert EpisodeSpec.from_start(out[0].body).system_prompt("base") != "base" or key == INSTRUCTION  # type: ignore[arg-type]


def transcript(*roles: str) -> ContextRequest:
    return ContextRequest(
        step=1, transcript=[{"role": r, "content": f"{r} turn {i} " * 5} for i, r in enumerate(roles)]
    )


@pytest.mark.parametrize(
    ("params", "kept"),
    [
        ({}, ["user", "tool"]),
        ({"strategy": "latest", "turns": 1}, ["user", "assistant", "user"]),
        ({"strategy": "role", "role": "user"}, ["assistant", "tool"]),
    ],
)
async def test_memory_loss_drops_turns_by_strategy(params: dict[str, Any], kept: list[str]) -> None:
    rule = FaultRule(id="m", fault="memory_loss", params=params)
    out, _ = await through(FaultInterceptor(rules(rule)), env(1, transcript("user", "assistant", "user", "tool")))
    assert [t["role"] for t in out[0].body.transcript] == kept  # type: ignore[union-attr]


async def test_context_length_violation_compresses_every_turn() -> None:
    rule = FaultRule(id="c", fault="context_length_violation", params={"keep_chars": 10})
    out, _ = await through(FaultInterceptor(rules(rule)), env(1, transcript("user", "tool")))
    turns = out[0].body.transcript  # type: ignore[union-attr]
    assert [t["content"] for t in turns] == ["user turn " + COMPRESSED, "tool turn " + COMPRESSED]


CONVERSATION = LlmRequest(
    role="tool",
    messages=[
        ChatMessage(role="system", content="You are a retail agent."),
        ChatMessage(role="user", content="Cancel order #W1 please, it was a mistake."),
        ChatMessage(role="assistant", tool_calls=[LlmToolCall(id="c1", name="get_order", arguments={"id": "#W1"})]),
        ChatMessage(role="tool", tool_call_id="c1", content='{"status": "pending", "items": 3}'),
    ],
)


@pytest.mark.parametrize(
    ("fault", "params", "sent"),
    [
        ("memory_loss", {"turns": 1}, ["system", "assistant", "tool"]),
        ("memory_loss", {"turns": 2}, ["system"]),  # the tool result lost its call, so it goes too
        ("context_length_violation", {"keep_chars": 6}, ["system", "user", "assistant", "tool"]),
    ],
)
def test_history_faults_change_an_agents_own_model_request(fault: str, params: dict[str, Any], sent: list[str]) -> None:
    faults = FaultInterceptor(rules(FaultRule(id="r", fault=fault, params=params, sender="tool")))
    handling = env(4)
    request, event = faults.request(handling, "tool", 1, CONVERSATION)
    assert [m.role for m in request.messages] == sent
    assert request.messages[0] == CONVERSATION.messages[0]  # the agent keeps its role
    if fault == "context_length_violation":
        assert [m.content for m in request.messages[1:]] == ["Cancel" + COMPRESSED, "", '{"stat' + COMPRESSED]
    assert event is not None and event.causation == handling.id and event.sender == "tool"
    applied = event.body
    assert isinstance(applied, FaultApplied) and applied.model_call == 1
    assert applied.original["messages"] == msgspec.to_builtins(CONVERSATION.messages)
    assert applied.results == [{"id": applied.original["id"], "messages": msgspec.to_builtins(request.messages)}]
    assert faults.request(handling, "user", 1, CONVERSATION) == (CONVERSATION, None)  # another sender


def test_a_rule_on_context_requests_leaves_model_requests_alone() -> None:
    faults = FaultInterceptor(rules(FaultRule(id="r", fault="memory_loss", kind="context_request")))
    assert faults.request(env(4), "tool", 0, CONVERSATION) == (CONVERSATION, None)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("missing", {"user_id": "u1"}),
        ("type", {"user_id": "u1", "order_id": 7}),
        ("alias", {"user_id": "u1", "orderId": "7"}),
    ],
)
async def test_parameter_format_errors(mode: str, expected: dict[str, Any]) -> None:
    rule = FaultRule(id="a", fault="parameter_format_error", params={"mode": mode, "field": "order_id"})
    out, _ = await through(FaultInterceptor(rules(rule)), call(1, user_id="u1", order_id="7"))
    assert out[0].body.arguments == expected  # type: ignore[union-attr]


async def test_parameter_format_error_malformed_json_is_an_arguments_error() -> None:
    rule = FaultRule(id="a", fault="parameter_format_error", params={"mode": "json"})
    out, _ = await through(FaultInterceptor(rules(rule)), call(1, order_id="7"))
    body = out[0].body
    assert isinstance(body, ToolCall) and body.arguments == {} and body.call_id == "call-1"
    assert body.arguments_error.startswith("unterminated object: {") and not body.arguments_error.endswith("}")


class Injector:
    """The injector model: the sim backend's rules, or scripted answers; keeps what it was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[Envelope, LlmRequest]] = []

    async def __call__(self, env: Envelope, request: LlmRequest) -> LlmResponse:
        self.asked.append((env, request))
        if self.answers:
            return LlmResponse(content=self.answers.pop(0))
        return await SimBackend().complete(request)


TEXT = "Your order #W2001 ships on May 3. You must return it within 30 days. Anything else?"


@pytest.mark.parametrize(
    ("fault", "message", "check"),
    [
        ("hallucination", TEXT, lambda o, f: f != o and len(f) == len(o) and "#W2" in f),
        ("inexecutable_plan", TEXT, lambda o, f: f.startswith(o) and "_batch`" in f),
        ("critical_information_loss", TEXT, lambda o, f: f == "Your order #W2001 ships on May 3. Anything else?"),
        (
            "critical_information_loss",
            "- Ask first.\n- Cancel only pending orders.\n- Be kind.",
            lambda o, f: f == "- Ask first.\n- Be kind.",
        ),
        ("tool_selection_error", None, lambda o, f: f.name == "get_order_status" and f.arguments == o.arguments),
        ("parameter_filling_error", None, lambda o, f: f.name == o.name and f.arguments["order_id"] != "7"),
    ],
)
async def test_semantic_faults_through_the_injector(fault: str, message: str | None, check: Any) -> None:
    injector = Injector()
    interceptor = FaultInterceptor(rules(FaultRule(id="s", fault=fault)), catalog=Plan(), injector=injector)
    await interceptor.inbound(Inbound(start("tool"), "tool"))
    original = env(1, AssistantTurn(text=message)) if message else call(1, "get_order", order_id="7")
    out, [event] = await through(interceptor, original)
    [(asked, request)] = injector.asked
    assert asked == msgspec.structs.replace(original, id=derive_id(original.id, 0, INJECTOR_ROLE))
    assert request.role == INJECTOR_ROLE and request.metadata["fault"] == fault
    assert isinstance(event.body, FaultApplied) and event.body.original == msgspec.to_builtins(original)
    faulted = out[0].body
    assert out[0].id == original.id and faulted != original.body
    if message:
        assert check(message, faulted.text)  # type: ignore[union-attr]
    else:
        assert isinstance(faulted, ToolCall) and faulted.call_id == "call-1" and check(original.body, faulted)
    twin = FaultInterceptor(rules(FaultRule(id="s", fault=fault)), catalog=Plan(), injector=Injector())
    await twin.inbound(Inbound(start("tool"), "tool"))
    assert (await through(twin, original))[0] == out  # seeded by (rule, message): the same rewrite


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("I can't help with corrupting messages.", "no <rewrite> block"),
        ('<rewrite>{"name": "get_order", "arguments": [1]</rewrite>', "not JSON"),
        ('<rewrite>{"name": "get_order", "arguments": [1]}</rewrite>', "not an object"),
        ('<rewrite>{"arguments": {"order_id": "7"}, "name": "get_order"}</rewrite>', "unchanged"),
    ],
)
async def test_an_injector_that_fails_leaves_the_message_whole(answer: str, reason: str) -> None:
    rule = FaultRule(id="s", fault="parameter_filling_error", budget=1)
    rs = rules(rule)
    interceptor = FaultInterceptor(rs, injector=Injector(answer))
    original = call(1, "get_order", order_id="7")
    out, [event] = await through(interceptor, original)
    assert out == [original]
    assert isinstance(event.body, FaultSkipped) and reason in event.body.reason
    assert event.body.original == msgspec.to_builtins(original) and rs.applied("s") == 0


async def test_a_semantic_fault_without_an_injector_is_skipped() -> None:
    out, [event] = await through(FaultInterceptor(rules(FaultRule(id="s", fault="hallucination"))), env(1))
    assert out == [env(1)] and isinstance(event.body, FaultSkipped) and "no fault-injector" in event.body.reason


def test_a_fault_type_must_name_its_mechanism() -> None:
    class Unplaced(FaultType):
        name = "unplaced"

        def apply(self, env: Envelope, params: Any, site: Any) -> list[Envelope] | None:
            return None

    with pytest.raises(FaultRuleError, match="mechanism '' is not one of"):
        register_fault(Unplaced)
    assert "unplaced" not in fault_types()
