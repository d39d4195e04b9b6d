"""Faults and defenses around a worker in this process, against a real nats-server."""

from __future__ import annotations

import anyio

from faultline.bus import Bus
from faultline.core import Agent, Context, DefenseFired, Envelope, EpisodeStarted, FaultApplied, Note
from faultline.faults import DefenseInterceptor, DefenseSettings, FaultInterceptor, FaultRule, RuleSet, add_rule_control
from faultline.runtime import Completions, Worker, start_episode
from tests.runtime.test_worker_inprocess import collect
from tests.runtime.toy import EchoBackend, Pinger, Ponger


class Bystander(Agent):
    """An agent that takes part in no episode; it only notes what reaches it."""

    name = "bystander"
    seen: list[str] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        type(self).seen.append(msg.id)


async def run_with(
    bus: Bus, rule: FaultRule, defenses: dict[str, list[str]], settings: DefenseSettings
) -> list[Envelope]:
    rules = RuleSet()
    rules.control(add_rule_control(rule, "n").body)  # type: ignore[arg-type]
    bus.interceptors.add(DefenseInterceptor(defenses, settings))
    bus.interceptors.add(FaultInterceptor(rules, agents=["pinger", "ponger", "bystander"]))
    worker = Worker(bus, [Pinger, Ponger, Bystander], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await start_episode(bus, "e1", "pinger", EpisodeStarted(task="toy"))
        with anyio.fail_after(20):
            done = await completions.wait(["e1"])
        worker.stop()
    assert done["e1"].outcome == "success"
    return await collect(bus, "e1")


async def test_broadcast_copies_to_an_agent_outside_the_episode_are_scoped_out(bus: Bus) -> None:
    Bystander.seen = []
    rule = FaultRule(id="amp", fault="broadcast", sender="ponger")
    journal = await run_with(bus, rule, {"bystander": ["scope"]}, DefenseSettings())
    copies = {r["id"] for e in journal if isinstance(e.body, FaultApplied) for r in e.body.results[1:]}
    assert len(copies) == 5 and {e.recipient for e in journal if e.id in copies} == {"bystander"}
    fired = [e.body for e in journal if isinstance(e.body, DefenseFired)]
    assert {(f.defense, f.agent) for f in fired} == {("scope", "bystander")}
    assert {f.message_id for f in fired} == copies
    assert Bystander.seen == []


async def test_the_rate_limit_cuts_a_storm_per_window_of_hops(bus: Bus) -> None:
    rule = FaultRule(id="flood", fault="storm", sender="ponger", params={"copies": 5}, budget=1)
    journal = await run_with(bus, rule, {"pinger": ["rate"]}, DefenseSettings(rate_limit=2, rate_window_hops=2))
    [applied] = [e.body for e in journal if isinstance(e.body, FaultApplied)]
    fired = [e.body for e in journal if isinstance(e.body, DefenseFired)]
    assert [f.defense for f in fired] == ["rate"] * 4  # 6 deliveries at one hop, 2 allowed
    delivered = {r["id"] for r in applied.results} - {f.message_id for f in fired}
    assert len(delivered) == 2
    handled_by_pinger = {e.causation for e in journal if e.sender == "pinger" and isinstance(e.body, Note)}
    assert delivered <= handled_by_pinger
