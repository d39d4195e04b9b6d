"""Fault rules and fault types: matching, seeded draws, budgets, expiry, and what each type sends."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from faultline._errors import FaultRuleError
from faultline.core import (
    AssistantTurn,
    Control,
    Envelope,
    EpisodeCompleted,
    FaultApplied,
    FaultSkipped,
    Inbound,
    InterceptorChain,
    LlmRequest,
    LlmResponse,
    Note,
    Start,
    ToolCall,
    UserTurn,
)
from faultline.faults import (
    MASFIRE_FAULTS,
    MECHANISMS,
    FaultInterceptor,
    FaultRule,
    RuleSet,
    add_rule_control,
    check_agents,
    clear_rules_control,
    fault_types,
    remove_rule_control,
)
from faultline.runtime.models import SimBackend


def env(i: int = 0, body: Any = None, *, sender: str = "tool", to: str = "user", episode: str = "e1") -> Envelope:
    return Envelope(
        id=f"m{i}", episode=episode, sender=sender, recipient=to, causation=f"c{i}", hops=3,
        body=body or AssistantTurn(text=f"hello {i}"),
    )  # fmt: skip


def call(i: int, tool: str = "get_order", **arguments: Any) -> Envelope:
    return env(i, ToolCall(call_id=f"call-{i}", name=tool, arguments=arguments), to="env")


def rules(*specs: FaultRule) -> RuleSet:
    rs = RuleSet()
    for rule in specs:
        rs.control(add_rule_control(rule, "n").body)  # type: ignore[arg-type]
    return rs


class Plan:
    """A catalog that knows one task: look up a user, then an order, then cancel it."""

    def tools(self, start: Mapping[str, Any]) -> list[str]:
        return ["find_user", "get_order", "get_order_status", "cancel_order"]

    def plan(self, start: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [("find_user", {"user": "ann"}), ("get_order", {"order_id": "7"}), ("cancel_order", {"order_id": "7"})]

    def instruction(self, start: Mapping[str, Any]) -> str:
        return "Cancel order #W2001 for ann@example.com. Ask for a refund of $25 to the gift card."


async def through(interceptor: FaultInterceptor, *messages: Envelope) -> tuple[list[Envelope], list[Envelope]]:
    chain = InterceptorChain([interceptor])
    out: list[Envelope] = []
    events: list[Envelope] = []
    for message in messages:
        sent, fired = await chain.outbound(message)
        out += sent
        events += fired
    return out, events


def test_the_shipped_fault_types_are_registered() -> None:
    assert set(fault_types()) == {*MASFIRE_FAULTS, "call_order_swap", "redundant_call"}
    assert len(set(MASFIRE_FAULTS)) == 15
    assert {n: t.mechanism for n, t in fault_types().items() if t.mechanism in ("routing", "tool_call")} == {
        "cycle": "routing", "storm": "routing", "broadcast": "routing",
        "call_order_swap": "tool_call", "redundant_call": "tool_call",
    }  # fmt: skip
    assert all(t.mechanism in MECHANISMS and t.summary for t in fault_types().values())


def test_a_rule_is_validated_and_its_params_made_canonical() -> None:
    rule = FaultRule(id="r1", fault="storm", params={"copies": "3"}).validated()
    assert rule.params == {"copies": 3}
    assert FaultRule(id="r2", fault="storm").validated().params == {"copies": 5}
    for bad, words in [
        (FaultRule(id="r", fault="nope"), "unknown fault type 'nope'"),
        (FaultRule(id="r", fault="storm", params={"copies": 0}), "copies"),
        (FaultRule(id="r", fault="cycle", params={"x": 1}), "unknown field"),
        (FaultRule(id="r", fault="cycle", probability=1.5), "probability"),
        (FaultRule(id="r", fault="cycle", budget=-1), "budget"),
        (FaultRule(id="a b", fault="cycle"), "rule id"),
    ]:
        with pytest.raises(FaultRuleError, match=words):
            bad.validated()


def test_a_wrong_rule_is_named_as_its_user_wrote_it_never_by_an_id_made_for_it() -> None:
    """A rule's id is made up unless its user gave one: the error names its fault type, or the text it came from."""
    for bad, said in [
        (FaultRule(id="f-1a2b3c4d", fault="storm", params={"copies": 0}), "storm: Expected int >= 1"),
        (FaultRule(id="f-1a2b3c4d", fault="cycle", probability=2.0), "cycle: probability 2.0 is not between"),
        (FaultRule(id="f-1a2b3c4d", fault="cycle", budget=-1), "cycle: budget -1 is negative"),
        (FaultRule(id="f-1a2b3c4d", fault="cycle", recipient="a.b"), "cycle: recipient 'a.b' can match nothing"),
    ]:
        with pytest.raises(FaultRuleError) as caught:
            bad.validated()
        assert str(caught.value).startswith(said) and "f-1a2b3c4d" not in str(caught.value)
    with pytest.raises(FaultRuleError, match=r"^--fault 'storm:copies=0': copies: must be at least 1, got 0$"):
        FaultRule(id="f-1a2b3c4d", fault="storm", params={"copies": "0"}).validated("--fault 'storm:copies=0'")


def test_a_rule_naming_an_agent_the_system_lacks_is_refused_naming_it_and_the_agents_there_are() -> None:
    """Agents in a parameter that names them, and `to`/`from` patterns that match none of the system's agents
    (the runner sends the Starts): such a rule would never apply."""
    agents = ("env", "tool", "user")
    for fine in [
        FaultRule(id="r", fault="role_ambiguity", params={"agents": ["tool"]}),
        FaultRule(id="r", fault="broadcast", params={"targets": ["env", "user"]}),
        FaultRule(id="r", fault="storm", recipient="t*", sender="runner"),
        FaultRule(id="r", fault="storm"),
    ]:
        check_agents(fine.validated(), agents)
    with pytest.raises(FaultRuleError) as caught:
        check_agents(FaultRule(id="f-1a2b3c4d", fault="role_ambiguity", params={"agents": ["tol"]}).validated(), agents)
    assert str(caught.value) == (
        "role_ambiguity: the system has no agent 'tol' (its agents: env, tool, user), so the rule would never apply"
    )
    rule = FaultRule(id="r", fault="broadcast", params={"targets": ["env", "bob"]}, recipient="he*", sender="eve")
    with pytest.raises(FaultRuleError, match=r"^--fault 'b': the system has no agents 'bob', 'he\*', 'eve' \(its"):
        check_agents(rule.validated(), agents, "--fault 'b'")


def test_match_fields_are_patterns_and_empty_means_any() -> None:
    rs = rules(FaultRule(id="r", fault="cycle", episode="run1-*", sender="to?l", kind="assistant_turn"))
    now = time.time()
    assert rs.candidates(env(episode="run1-a"), now)
    assert not rs.candidates(env(episode="run2-a"), now)
    assert not rs.candidates(env(sender="user", to="tool", episode="run1-a"), now)
    assert not rs.candidates(env(body=UserTurn(text="x"), episode="run1-a"), now)


def test_the_draw_is_fixed_by_rule_and_message() -> None:
    rule = FaultRule(id="half", fault="cycle", probability=0.5)
    first = [bool(rules(rule).candidates(env(i), 0.0)) for i in range(200)]
    again = [bool(rules(rule).candidates(env(i), 0.0)) for i in range(200)]
    assert first == again
    assert 60 < sum(first) < 140
    other = [
        bool(rules(FaultRule(id="other", fault="cycle", probability=0.5)).candidates(env(i), 0.0)) for i in range(200)
    ]
    assert other != first


async def test_budget_and_expiry_bound_a_rule() -> None:
    interceptor = FaultInterceptor(rules(FaultRule(id="b", fault="cycle", budget=2)))
    _, events = await through(interceptor, *(env(i) for i in range(5)))
    assert len(events) == 2
    expired = FaultInterceptor(rules(FaultRule(id="x", fault="cycle", expires_at=time.time() - 1)))
    assert (await through(expired, env(1)))[1] == []


def test_a_budget_counts_other_workers_faults_once_each() -> None:
    rs = rules(FaultRule(id="b", fault="cycle", budget=3))
    rs.use("b", "m1")
    for original in ("m1", "m2", "m2"):
        rs.count(FaultApplied(rule_id="b", fault="cycle", original={"id": original}))
    assert rs.applied("b") == 2
    assert rs.seen["b"] == 3


def test_controls_add_remove_clear_and_ignore_the_malformed() -> None:
    rs = rules(FaultRule(id="a", fault="cycle"), FaultRule(id="b", fault="storm"))
    assert [r.id for r in rs.rules] == ["a", "b"]
    rs.control(remove_rule_control("a", "n").body)  # type: ignore[arg-type]
    assert [r.id for r in rs.rules] == ["b"]
    rs.control(Control(name="faults", data={"op": "add", "rule": {"id": "c", "fault": "unknown"}}))
    rs.control(Control(name="faults", data={"op": "add", "rule": "garbage"}))
    rs.control(Control(name="faults", data={"op": "explode"}))
    assert [r.id for r in rs.rules] == ["b"]
    rs.control(clear_rules_control("n").body)  # type: ignore[arg-type]
    assert len(rs) == 0


async def test_only_conversation_messages_are_faulted_and_one_fault_per_message() -> None:
    interceptor = FaultInterceptor(
        rules(FaultRule(id="s", fault="storm", params={"copies": 2}), FaultRule(id="c", fault="cycle"))
    )
    event = Envelope(id="done", episode="e1", sender="env", body=EpisodeCompleted(outcome="success"))
    out, events = await through(interceptor, event, env(1))
    assert out[0] is event
    assert [e.body.rule_id for e in events] == ["s"]  # type: ignore[union-attr]
    assert len(out) == 1 + 3


async def test_a_fault_event_records_the_original_and_the_results() -> None:
    interceptor = FaultInterceptor(rules(FaultRule(id="c", fault="cycle")))
    original = env(1)
    out, [event] = await through(interceptor, original)
    applied = event.body
    assert isinstance(applied, FaultApplied)
    assert msgspec.convert(applied.original, Envelope) == original
    assert [msgspec.convert(r, Envelope) for r in applied.results] == out
    assert (event.episode, event.sender, event.causation) == ("e1", "tool", original.id)


async def test_cycle_sends_a_message_back_to_its_sender() -> None:
    out, _ = await through(FaultInterceptor(rules(FaultRule(id="c", fault="cycle"))), env(1))
    assert [(m.id, m.sender, m.recipient, m.body) for m in out] == [("m1", "tool", "tool", env(1).body)]


async def test_storm_adds_copies_with_derived_ids() -> None:
    out, _ = await through(FaultInterceptor(rules(FaultRule(id="s", fault="storm", params={"copies": 3}))), env(1))
    assert len({m.id for m in out}) == 4 and out[0] == env(1)
    assert {(m.recipient, m.body, m.causation, m.hops) for m in out} == {("user", env(1).body, "c1", 3)}


async def test_broadcast_reaches_the_other_agents_or_the_named_ones() -> None:
    everyone = FaultInterceptor(rules(FaultRule(id="b", fault="broadcast")), agents=["env", "tool", "user", "auditor"])
    out, _ = await through(everyone, env(1))
    assert [m.recipient for m in out] == ["user", "env", "auditor"]
    named = FaultInterceptor(rules(FaultRule(id="b", fault="broadcast", params={"targets": ["auditor"]})))
    out, _ = await through(named, env(1))
    assert [m.recipient for m in out] == ["user", "auditor"]
    assert len({m.id for m in out}) == 2


async def sim_injector(env: Envelope, request: LlmRequest) -> LlmResponse:
    """The offline fault-injector model (the sim backend's rules)."""
    return await SimBackend().complete(request)


async def test_call_order_swap_sends_the_tasks_next_call_made_to_fail() -> None:
    interceptor = FaultInterceptor(
        rules(FaultRule(id="w", fault="call_order_swap")), catalog=Plan(), injector=sim_injector
    )
    await interceptor.inbound(Inbound(env(0, Start(data={"domain": "d", "task": "t"}), to="tool"), "tool"))
    out, events = await through(interceptor, call(1, "find_user", user="ann"), call(2, "cancel_order", order_id="7"))
    too_early = "Error: get_order was refused: a step it depends on has not been done yet."
    assert [m.body for m in out] == [
        ToolCall(call_id="call-1", name="get_order", arguments={"order_id": "7"}, injected_error=too_early),
        ToolCall(call_id="call-2", name="cancel_order", arguments={"order_id": "7"}),  # no next call: untouched
    ]
    assert len(events) == 1


async def test_redundant_call_repeats_the_previous_call_made_to_fail() -> None:
    interceptor = FaultInterceptor(
        rules(FaultRule(id="r", fault="redundant_call", kind="tool_call", sender="tool")), injector=sim_injector
    )
    out, events = await through(interceptor, call(1, "find_user", user="ann"), call(2, "get_order", order_id="7"))
    # the first call has nothing to repeat; the second becomes the first again, under its own call id, and fails
    duplicate = "Error: duplicate request: find_user was just called with these arguments and was not run again."
    assert [m.body for m in out] == [
        ToolCall(call_id="call-1", name="find_user", arguments={"user": "ann"}),
        ToolCall(call_id="call-2", name="find_user", arguments={"user": "ann"}, injected_error=duplicate),
    ]
    irrelevant = FaultInterceptor(
        rules(FaultRule(id="r", fault="redundant_call", params={"arguments": "irrelevant"})), injector=sim_injector
    )
    out, _ = await through(irrelevant, call(1, "find_user", user="ann"), call(2, "get_order", order_id="7"))
    assert out[1].body == ToolCall(
        call_id="call-2", name="find_user", arguments={"order_id": "7"}, injected_error=duplicate
    )


async def test_a_failing_call_without_an_injector_is_skipped_and_the_call_goes_out_whole() -> None:
    interceptor = FaultInterceptor(rules(FaultRule(id="r", fault="redundant_call")))
    out, [event] = await through(interceptor, call(1, "find_user", user="ann"), call(2, "get_order", order_id="7"))
    assert [m.body for m in out] == [call(1, "find_user", user="ann").body, call(2, "get_order", order_id="7").body]
    assert isinstance(event.body, FaultSkipped) and "fault-injector" in event.body.reason


async def test_tool_call_faults_leave_other_kinds_alone() -> None:
    interceptor = FaultInterceptor(
        rules(*(FaultRule(id=n, fault=n) for n in ("parameter_format_error", "redundant_call")))
    )
    out, events = await through(interceptor, env(1, Note(text="x")))
    assert out == [env(1, Note(text="x"))] and events == []


async def test_forget_drops_an_episodes_history() -> None:
    interceptor = FaultInterceptor(rules(FaultRule(id="r", fault="redundant_call")))
    await through(interceptor, call(1, "find_user"))
    interceptor.forget("e1")
    assert (await through(interceptor, call(2)))[1] == []
