"""Defenses: what each one drops, per agent, in a fixed order, with the drop journaled."""

from __future__ import annotations

from typing import Any

import pytest

from faultline._errors import ConfigError
from faultline.core import AssistantTurn, DefenseFired, Envelope, InterceptorChain, Note, Start, TimerFired, UserTurn
from faultline.faults import (
    DEFENSE_ORDER,
    DefenseInterceptor,
    DefenseSettings,
    build_defenses,
    check_defenses,
    settings_from,
)


def msg(
    i: str, *, sender: str = "tool", to: str = "user", hops: int = 1, body: Any = None, cause: str = ""
) -> Envelope:
    return Envelope(
        id=i, episode="e1", sender=sender, recipient=to, hops=hops, causation=cause, body=body or AssistantTurn(text=i)
    )


START = Envelope(id="s", episode="e1", sender="runner", recipient="user", body=Start())


async def deliver(
    interceptor: DefenseInterceptor, agent: str, *messages: Envelope
) -> tuple[list[str], list[DefenseFired]]:
    chain = InterceptorChain([interceptor])
    passed: list[str] = []
    fired: list[DefenseFired] = []
    for message in messages:
        out, events = await chain.inbound(message, agent)
        passed += [m.id for m in out]
        fired += [e.body for e in events]  # type: ignore[misc]
    return passed, fired


async def test_dedup_drops_a_repeated_id_and_copies_of_a_body() -> None:
    d = DefenseInterceptor({"*": ["dedup"]})
    same = AssistantTurn(text="yes")
    passed, fired = await deliver(
        d, "user",
        msg("a", body=same, cause="c1"), msg("a", body=same, cause="c1"),  # redelivered
        msg("b", body=same, cause="c1"),  # a copy: same sender, same body, same cause
        msg("c", body=same, cause="c2"),  # the same words in answer to something else: kept
        msg("d", body=same, cause="c1", sender="env"),  # another sender: kept
    )  # fmt: skip
    assert passed == ["a", "c", "d"]
    assert [(f.defense, f.message_id, f.redelivery) for f in fired] == [("dedup", "a", True), ("dedup", "b", False)]


async def test_cycle_breaker_drops_echoes_and_deep_messages() -> None:
    d = DefenseInterceptor({"*": ["cycle"]}, DefenseSettings(max_hops=10))
    passed, fired = await deliver(
        d, "user", msg("a"), msg("echo", sender="user"), msg("deep", hops=11), msg("edge", hops=10)
    )
    assert passed == ["a", "edge"]
    assert [f.message_id for f in fired] == ["echo", "deep"]
    assert fired[1].settings == {"max_hops": 10, "echo": True}
    no_echo = DefenseInterceptor({"*": ["cycle"]}, DefenseSettings(echo=False))
    assert (await deliver(no_echo, "user", msg("echo", sender="user")))[0] == ["echo"]


async def test_a_timer_the_agent_set_is_not_an_echo() -> None:
    d = DefenseInterceptor({"*": ["cycle"]})
    fired = msg("wait-over", sender="tool", to="tool", body=TimerFired(data={"step": 1}))
    assert (await deliver(d, "tool", fired, msg("echo", sender="tool", to="tool")))[0] == ["wait-over"]


async def test_scope_filter_drops_direct_messages_to_an_agent_not_started_in_the_episode() -> None:
    d = DefenseInterceptor({"*": ["scope"]})
    topic = Envelope(id="t", episode="e1", sender="tool", topic="helpers", body=Note())
    passed, fired = await deliver(d, "user", msg("early"), topic, START, msg("late"))
    assert passed == ["t", "s", "late"]
    assert [f.message_id for f in fired] == ["early"]
    d.forget("e1")
    assert (await deliver(d, "user", msg("after")))[0] == []


async def test_rate_limit_counts_messages_per_sender_per_window_of_hops() -> None:
    d = DefenseInterceptor({"*": ["rate"]}, DefenseSettings(rate_limit=2, rate_window_hops=4))
    flood = [msg(f"f{i}", hops=5) for i in range(4)]
    passed, fired = await deliver(d, "user", *flood, msg("other", sender="env", hops=5), msg("next", hops=8))
    assert passed == ["f0", "f1", "other", "next"]
    assert {f.message_id for f in fired} == {"f2", "f3"}
    assert fired[0].settings == {"rate_limit": 2, "rate_window_hops": 4}


async def test_defenses_are_per_agent_and_run_in_a_fixed_order() -> None:
    d = DefenseInterceptor({"*": ["rate", "cycle"], "env": []})
    assert d.names_for("user") == ("cycle", "rate") == tuple(n for n in DEFENSE_ORDER if n in {"rate", "cycle"})
    assert (await deliver(d, "env", msg("echo", sender="env", to="env")))[0] == ["echo"]
    assert (await deliver(d, "user", msg("echo", sender="user")))[0] == []


async def test_a_drop_is_an_event_naming_the_message_and_the_agent() -> None:
    d = DefenseInterceptor({"user": ["cycle"]})
    chain = InterceptorChain([d])
    dropped = msg("echo", sender="user", hops=4)
    out, [event] = await chain.inbound(dropped, "user")
    assert out == []
    assert (event.episode, event.sender, event.causation, event.hops) == ("e1", "user", "echo", 5)
    assert isinstance(event.body, DefenseFired) and event.body.agent == "user" and "came back" in event.body.reason
    _, [again] = await chain.inbound(dropped, "user")
    assert again.id == event.id  # deterministic: a recovering worker publishes the same event


def test_recorded_settings_rebuild_the_same_defense() -> None:
    live = build_defenses(["rate", "cycle"], DefenseSettings(max_hops=7, rate_limit=9))
    rebuilt = build_defenses(["cycle", "rate"], settings_from({**live[0].recorded(), **live[1].recorded(), "x": 1}))
    assert [d.recorded() for d in rebuilt] == [d.recorded() for d in live]


def test_unknown_defense_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown defense 'dedupe'"):
        check_defenses(["dedup", "dedupe"])
    with pytest.raises(ConfigError):
        DefenseInterceptor({"*": ["firewall"]})


async def test_a_user_turn_is_not_mistaken_for_a_copy_of_another() -> None:
    d = DefenseInterceptor({"*": list(DEFENSE_ORDER)})
    yes = UserTurn(text="Yes, please go ahead.")
    stream = [Envelope(id="s", episode="e1", sender="runner", recipient="tool", body=Start())]
    stream += [msg(f"y{i}", sender="user", to="tool", body=yes, hops=2 * i + 1, cause=f"a{i}") for i in range(6)]
    assert (await deliver(d, "tool", *stream))[0] == ["s", *(f"y{i}" for i in range(6))]
