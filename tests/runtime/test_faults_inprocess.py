"""Faults and defenses around a worker in this process, against a real nats-server."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from faultline.bus import Bus
from faultline.core import (
    Agent,
    AssistantTurn,
    Context,
    DefenseFired,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    Inbound,
    Interceptor,
    LlmRequest,
    LlmResponse,
    Note,
    Outbound,
    Recording,
    Start,
)
from faultline.faults import DefenseInterceptor, DefenseSettings, FaultInterceptor, FaultRule, RuleSet, add_rule_control
from faultline.runtime import Completions, Worker, WorkerSettings, injector_for, start_episode
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
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
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


class Speaker(Agent):
    """Tells the listener one fact when the episode starts."""

    name = "speaker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.send("listener", AssistantTurn(text="Your order #W1234567 is on its way."))


class Listener(Agent):
    name = "listener"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, AssistantTurn):
            ctx.emit(EpisodeCompleted(outcome="success", details={"heard": msg.body.text}))


class Injector:
    """A fault-injector model that rewrites by a fixed rule and counts its calls."""

    calls = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        type(self).calls += 1
        return LlmResponse(content=f"<rewrite>{request.messages[-1].content.replace('1234567', '7654321')}</rewrite>")

    async def aclose(self) -> None:
        return None


class Crash(Interceptor):
    """Stands for a worker that dies once its message is faulted, before the message goes out."""

    def __init__(self) -> None:
        self.reached = anyio.Event()

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        return (message.envelope,)

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        if message.events:
            self.reached.set()
            await anyio.sleep_forever()
        return (message.envelope,)


async def test_a_worker_recovering_after_a_crash_serves_the_injectors_journaled_answer(bus: Bus) -> None:
    rule = FaultRule(id="h", fault="hallucination", sender="speaker", kind="assistant_turn")
    Injector.calls = 0

    async def worker_with(*others: Interceptor) -> tuple[Worker, list[Interceptor]]:
        rules = RuleSet()
        rules.control(add_rule_control(rule, "n").body)  # type: ignore[arg-type]
        faults = FaultInterceptor(rules)
        settings = WorkerSettings(drain_timeout_s=0.2)  # the crashed worker's message is never finished
        worker = Worker(bus, [Speaker, Listener], backends=lambda role: Injector(), settings=settings)
        faults.injector = injector_for(bus, worker, worker.recorded_for)
        return worker, [faults, *others]

    crash = Crash()
    first, installed = await worker_with(crash)
    for interceptor in installed:
        bus.interceptors.add(interceptor)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await first.wait_ready()
        await start_episode(bus, "e1", "speaker", EpisodeStarted())
        with anyio.fail_after(20):
            await crash.reached.wait()  # the injector's answer is journaled, the faulted message not sent
        first.stop()
    for interceptor in installed:
        bus.interceptors.remove(interceptor)
    assert Injector.calls == 1

    second, installed = await worker_with()
    bus.interceptors.add(installed[0])
    async with anyio.create_task_group() as tg, Completions(bus, (Listener.name,)) as completions:
        tg.start_soon(second.run)
        await second.wait_ready()
        with anyio.fail_after(20):
            done = await completions.wait(["e1"])
        second.stop()
    assert Injector.calls == 1  # served from the journal on recovery, not asked again
    assert done["e1"].details == {"heard": "Your order #W7654321 is on its way."}
    journal = await collect(bus, "e1")
    assert len([e for e in journal if isinstance(e.body, Recording)]) == 1
