"""`faultline up` on a stream that holds fault rules from before it started says so: they apply to its episodes
from the first, and a user who injected them into an earlier `up` would not know they are still in force."""

from __future__ import annotations

import time

from faultline.bus import Bus, FollowSettings, publish_controls
from faultline.cli._system import rules_left
from faultline.faults import FaultRule, add_rule_control, remove_rule_control


async def test_a_fresh_stream_has_no_rules_to_speak_of(bus: Bus) -> None:
    assert await rules_left(bus, FollowSettings()) == ""


async def test_the_rules_left_in_force_are_named_and_the_removed_and_expired_are_not(bus: Bus) -> None:
    past = time.time() - 1
    await publish_controls(bus, [
        add_rule_control(FaultRule(id="a", fault="storm", sender="triage", params={"copies": 3}), "1"),
        add_rule_control(FaultRule(id="b", fault="cycle"), "2"),
        add_rule_control(FaultRule(id="c", fault="broadcast", expires_at=past), "3"),
        remove_rule_control("b", "4"),
    ], workers=())  # fmt: skip
    assert await rules_left(bus, FollowSettings()) == (
        "1 fault rule in force from before this start, on the episodes they match: a: storm on sender=triage"
        " (`faultline faults clear` removes them)"
    )
