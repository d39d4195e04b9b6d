"""Workers follow the rules on fl.ctl.faults: the set in force at start, then every change live."""

from __future__ import annotations

import anyio

from faultline.bus import OPEN_TELLER, Bus, FollowSettings, follow_rules, publish_controls, read_rules
from faultline.core import FaultApplied
from faultline.faults import (
    FaultInterceptor,
    FaultRule,
    RuleSet,
    add_rule_control,
    clear_rules_control,
    remove_rule_control,
)
from tests.faults.test_faults import env, through


async def test_a_starting_worker_reads_the_rules_in_force(bus: Bus) -> None:
    await publish_controls(bus, [
        add_rule_control(FaultRule(id="a", fault="cycle"), "1"),
        add_rule_control(FaultRule(id="b", fault="storm", budget=3), "2"),
        add_rule_control(FaultRule(id="c", fault="broadcast"), "3"),
        remove_rule_control("a", "4"),
    ], workers=())  # fmt: skip
    rules = RuleSet()
    async with follow_rules(bus, rules, name="w1"):
        assert [r.id for r in rules.rules] == ["b", "c"]
        assert rules.last_seq == 4
    assert [r.id for r in (await read_rules(bus)).rules] == ["b", "c"]


async def test_an_empty_stream_means_no_rules(bus: Bus) -> None:
    rules = RuleSet()
    with anyio.fail_after(5):
        async with follow_rules(bus, rules, name="w1"):
            assert len(rules) == 0


async def test_changes_reach_running_workers_and_are_confirmed(bus: Bus) -> None:
    first, second = RuleSet(), RuleSet()
    async with follow_rules(bus, first, name="w1"), follow_rules(bus, second, name="w2"):
        both = [(OPEN_TELLER, "w1"), (OPEN_TELLER, "w2")]
        result = await publish_controls(bus, [add_rule_control(FaultRule(id="x", fault="cycle"), "1")], workers=both)
        assert result["confirmed"] == 2 and result["missing"] == [] and result["seconds"] < 0.2
        assert [r.id for r in first.rules] == [r.id for r in second.rules] == ["x"]
        unknown = await publish_controls(bus, [clear_rules_control("2")], settings=FollowSettings(confirm_grace_s=0.05))
        assert (unknown["workers"], unknown["confirmed"]) == (2, 2)
        assert len(first) == len(second) == 0


async def test_a_budget_holds_across_workers(bus: Bus) -> None:
    rule = FaultRule(id="b", fault="cycle", budget=2)
    rules = RuleSet()
    async with follow_rules(bus, rules, name="w1"):
        await publish_controls(bus, [add_rule_control(rule, "1")], workers=[(OPEN_TELLER, "w1")])
        other = FaultInterceptor(RuleSet())
        other.rules.control(add_rule_control(rule, "x").body)  # type: ignore[arg-type]
        _, [event] = await through(other, env(100))
        assert isinstance(event.body, FaultApplied)
        await bus.publish(event)
        # the follower takes in the stream in order: once it confirms a later control, it has counted the event
        await publish_controls(
            bus,
            [add_rule_control(FaultRule(id="later", fault="storm", episode="elsewhere"), "2")],
            workers=[(OPEN_TELLER, "w1")],
        )
        assert rules.applied("b") == 1
        _, events = await through(FaultInterceptor(rules), *(env(i) for i in range(5)))
        assert len(events) == 1
