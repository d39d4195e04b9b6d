"""Workers in this process against a real nats-server: order, recordings, failures."""

from __future__ import annotations

import functools
import math
import time

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from bench._proxy import network
from faultline._errors import BusError, ModelError
from faultline.bus import Bus, BusSettings, Consumer, Delivery, EmbeddedServer, Message
from faultline.core import (
    RUNNER,
    Agent,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    LlmRequest,
    LlmResponse,
    Note,
    Notice,
    Recording,
    Start,
    Timer,
    TimerFired,
    decode_envelope,
    episode_shard,
)
from faultline.runtime import Completions, Worker, WorkerSettings, start_episode
from tests.runtime.toy import EchoBackend, Pinger, Ponger


async def collect(bus: Bus, episode: str) -> list:  # type: ignore[type-arg]
    subjects = [f"fl.ep.{episode}.>", f"fl.tp.{episode}.>", f"fl.rec.{episode}.>", f"fl.ev.*.{episode}.*"]
    consumer = await bus.consumer(None, subjects)
    got: list = []
    pending = 1
    with anyio.fail_after(5):
        while pending:
            for d in await consumer.batch():
                got.append(d.envelope())
                pending = d.pending
    await consumer.close()
    return got


async def test_ping_pong_episodes_complete_with_recordings(bus: Bus) -> None:
    worker = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        episodes = [f"ep{i}" for i in range(8)]
        for e in episodes:
            await start_episode(bus, e, "pinger", EpisodeStarted(task="toy"))
        with anyio.fail_after(20):
            done = await completions.wait(episodes)
        worker.stop()
    assert {c.outcome for c in done.values()} == {"success"}
    journal = await collect(bus, "ep3")
    notes = [e for e in journal if isinstance(e.body, Note)]
    assert [e.body.data["n"] for e in notes] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [e.sender for e in notes[:2]] == ["pinger", "ponger"]
    recordings = [e.body for e in journal if isinstance(e.body, Recording)]
    assert [r.call for r in recordings].count("llm") == 5
    assert [r.call for r in recordings].count("random") == 5
    for e in notes[1:]:
        assert e.causation in {n.id for n in notes} | {r.id for r in journal}
        assert e.hops > 0
    # A handler's recordings are stored before the outputs it left (they are sent first, on one connection).
    position = {e.id: i for i, e in enumerate(journal)}
    for made in (e for e in journal if isinstance(e.body, Recording)):
        outputs = [
            e for e in journal if (e.sender, e.causation) == (made.sender, made.causation) and e.kind != "recording"
        ]
        assert outputs and all(position[o.id] > position[made.id] for o in outputs)


async def test_a_raising_handler_fails_its_episode_only(bus: Bus) -> None:
    """The raising agent publishes the error; the runner completes the episode. A completion from an agent
    that may not complete episodes (here sent with the operator's rights, which the server lets through) is
    ignored."""
    worker = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        forged = EpisodeCompleted(outcome="success", reward=1.0)
        await bus.publish(Envelope(id="forged", episode="bad", sender="ponger", body=forged))
        await start_episode(bus, "bad", "ponger", EpisodeStarted(), Note(data={"n": 1, "crash_at": 1}))
        await start_episode(bus, "good", "pinger", EpisodeStarted())
        with anyio.fail_after(20):
            done = await completions.wait(["bad", "good"])
        worker.stop()
    assert done["good"].outcome == "success"
    assert done["bad"].outcome == "error"
    assert "RuntimeError in ponger: ponger was told to fail" in done["bad"].cause
    ended = [(e.kind, e.sender) for e in await collect(bus, "bad") if e.kind in ("error_raised", "episode_completed")]
    assert ended == [("episode_completed", "ponger"), ("error_raised", "ponger"), ("episode_completed", RUNNER)]


async def test_a_handler_that_raised_live_does_not_crash_the_rebuild_after_a_restart(bus: Bus) -> None:
    """A restarted worker replays an instance's history; the input that raised live raises again
    there, and must be handled as it was live (its failure events exist already), not crash the worker.
    The runner ended that episode (the error), so the late input's model call is refused, as it would have been
    by a worker that heard the end: refused for that, not for a rebuild that broke."""
    first = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(first.run)
        await first.wait_ready()
        await start_episode(bus, "bad", "ponger", EpisodeStarted(), Note(data={"n": 1, "crash_at": 1}))
        with anyio.fail_after(20):
            await completions.wait(["bad"])
        first.stop()

    second = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    late = Envelope(id="late-1", episode="bad", sender="pinger", recipient="ponger", body=Note(data={"n": 2}))
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(second.run)
        await second.wait_ready()
        await bus.publish(late)
        await start_episode(bus, "after", "pinger", EpisodeStarted())
        with anyio.fail_after(20):
            done = await completions.wait(["after"])
        second.stop()
    assert done["after"].outcome == "success"
    late_ones = [e.body for e in await collect(bus, "bad") if e.causation == "late-1"]
    [refused] = [b for b in late_ones if isinstance(b, ErrorRaised)]
    assert refused.error_type == "ModelError" and refused.message.startswith("the runner ended episode bad while")
    assert not [b for b in late_ones if isinstance(b, Note)]


class SlowModel:
    """A model that takes longer to answer than NATS waits for an acknowledgement."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.called = anyio.Event()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        self.called.set()
        await anyio.sleep(self.seconds)
        return LlmResponse(content="done")

    async def aclose(self) -> None:
        pass


class AsksOnce(Agent):
    name = "asker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        await ctx.llm(LlmRequest(role="slow", messages=[ChatMessage(role="user", content="hi")]))
        ctx.emit(EpisodeCompleted(outcome="success"))


class AsksThenWaits(Agent):
    """Asks the model, then sets a timer."""

    name = "asks_then_waits"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        await ctx.llm(LlmRequest(role="slow", messages=[ChatMessage(role="user", content="hi")]))
        ctx.emit(Timer(after_s=60.0))


class Hangs:
    """A model that never answers; it tells when it was asked and when its call was cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.called = anyio.Event()
        self.cancelled = anyio.Event()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        self.called.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


class AsksAgain(Agent):
    """Asks the model, and once that call fails, asks again; says how both ended."""

    name = "asks_again"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        errors = []
        for _ in range(2):
            try:
                await ctx.llm(LlmRequest(role="slow", messages=[ChatMessage(role="user", content="hi")]))
            except ModelError as exc:
                errors.append(str(exc))
        ctx.emit(Notice(text="asked twice", data={"errors": errors}))


async def test_the_model_call_of_an_episode_the_runner_ended_is_cancelled_and_a_later_one_never_starts(
    bus: Bus,
) -> None:
    model = Hangs()
    worker = Worker(bus, [AsksAgain], backends=lambda role: model)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await start_episode(bus, "given-up", "asks_again", EpisodeStarted())
        with anyio.fail_after(10):
            await model.called.wait()
        ended = EpisodeCompleted(outcome="timeout", cause="ended by the test")
        await bus.publish(Envelope(id="given-up-ended", episode="given-up", sender=RUNNER, body=ended))
        with anyio.fail_after(10):
            await model.cancelled.wait()
        worker.stop()
    assert model.calls == 1, "the call asked after the completion never reached the model"
    journaled = await collect(bus, "given-up")
    calls = [e.body for e in journaled if isinstance(e.body, Recording)]
    assert [call.call for call in calls] == ["llm", "llm"]
    assert all("ended episode given-up while asks_again's model call (role slow)" in c.error for c in calls)
    [told] = [e.body for e in journaled if isinstance(e.body, Notice)]
    assert len(told.data["errors"]) == 2
    assert worker.model_calls == set()


async def test_a_restarted_worker_calls_no_model_for_an_episode_the_runner_ended_while_none_ran(bus: Bus) -> None:
    """Its follower of completions begins at its start; the history it rebuilds an instance from tells it of the
    earlier end, so the input that waited for it asks no model, as if it had heard the end live."""
    told = {"before": anyio.Event(), "ended-while-down": anyio.Event()}

    async def take(delivery: Delivery) -> None:
        env = delivery.envelope()
        if isinstance(env.body, Notice):
            told[env.episode].set()

    model = Hangs()
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(bus.follow, "fl.ev.*.*.*", take, after=0))
        first = Worker(bus, [AsksAgain], backends=lambda role: EchoBackend())
        tg.start_soon(first.run)
        await first.wait_ready()
        await start_episode(bus, "before", "asks_again", EpisodeStarted())
        with anyio.fail_after(20):
            await told["before"].wait()  # it has read an input: the next worker is a restart
        first.stop()
        await start_episode(bus, "ended-while-down", "asks_again", EpisodeStarted())
        ended = EpisodeCompleted(outcome="timeout", cause="ended by the test")
        await bus.publish(Envelope(id="ended-while-down-t", episode="ended-while-down", sender=RUNNER, body=ended))
        second = Worker(bus, [AsksAgain], backends=lambda role: model)
        tg.start_soon(second.run)
        with anyio.fail_after(20):
            await told["ended-while-down"].wait()
        second.stop()
        tg.cancel_scope.cancel()
    assert model.calls == 0
    calls = [e.body for e in await collect(bus, "ended-while-down") if isinstance(e.body, Recording)]
    assert [c.call for c in calls] == ["llm", "llm"]
    assert all("ended episode ended-while-down while asks_again's model call" in c.error for c in calls)


class FinishesThenAsks(Agent):
    """Completes its episode itself, then, told by itself, asks the model."""

    name = "finishes_then_asks"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.emit(EpisodeCompleted(outcome="success"))
            ctx.send(self.name, Note(text="one more thing"))
            return
        await ctx.llm(LlmRequest(role="slow", messages=[ChatMessage(role="user", content="after")]))
        ctx.emit(Notice(text="asked after the end"))


async def test_an_episode_its_own_agents_completed_keeps_its_later_model_calls(bus: Bus) -> None:
    model = SlowModel(seconds=0.5)
    worker = Worker(bus, [FinishesThenAsks], backends=lambda role: model)
    async with anyio.create_task_group() as tg, Completions(bus, (FinishesThenAsks.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await run_episode(bus, completions, "own-end", "finishes_then_asks")
        with anyio.fail_after(10):
            await model.called.wait()
        worker.stop()
    journaled = await collect(bus, "own-end")
    [call] = [e.body for e in journaled if isinstance(e.body, Recording)]
    assert call.error == "" and call.response["content"] == "done"
    assert any(isinstance(e.body, Notice) for e in journaled)


async def test_a_handler_that_sets_a_timer_while_its_worker_stops_leaves_it_to_the_next_worker(bus: Bus) -> None:
    """The stopping worker drains its handlers but fires no more timers: the timer is stored, and the worker
    after it rearms it (`pending_timers`). Arming it into the closed timers ended the worker with an error."""
    model = SlowModel(seconds=0.5)
    worker = Worker(bus, [AsksThenWaits], backends=lambda role: model)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await start_episode(bus, "stopping", AsksThenWaits.name, EpisodeStarted())
        with anyio.fail_after(10):
            await model.called.wait()
        worker.stop()
    assert [e.body for e in await collect(bus, "stopping") if isinstance(e.body, Timer)] == [Timer(after_s=60.0)]


async def run_episode(bus: Bus, completions: Completions, episode: str, agent: str, first: Start | None = None) -> None:
    """Start `episode` with `first` (a bare `Start` by default) to `agent`, and wait until it completed."""
    await start_episode(bus, episode, agent, EpisodeStarted(), first)
    with anyio.fail_after(20):
        await completions.wait([episode])


async def test_a_handler_slower_than_the_ack_wait_sees_its_message_once(bus: Bus) -> None:
    model = SlowModel(seconds=2.5)
    worker = Worker(bus, [AsksOnce], backends=lambda role: model, settings=WorkerSettings(ack_wait_s=1.0))
    async with anyio.create_task_group() as tg, Completions(bus, (AsksOnce.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await run_episode(bus, completions, "slow", "asker")
        worker.stop()
    assert model.calls == 1, "the message was not delivered again while its handler waited on the model"
    assert worker.handled == 1


class Waiter(Agent):
    """Waits once, with a timer, then completes: the shape of the tool agent waiting for its helpers."""

    name = "waiter"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.emit(Timer(after_s=1.5, data={"wait": 1}))
        elif isinstance(msg.body, TimerFired):
            ctx.emit(EpisodeCompleted(outcome="success", details=msg.body.data))


async def set_timer_then_stop(bus: Bus) -> None:
    """A `Waiter` worker sets its timer in episode `wait` and stops before it fires."""
    timers = await bus.consumer(None, ["fl.ev.timer.>"])
    first = Worker(bus, [Waiter], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await first.wait_ready()
        await start_episode(bus, "wait", "waiter", EpisodeStarted())
        with anyio.fail_after(5):
            while not await timers.batch():
                pass
        first.stop()  # its timer goes with it
    await timers.close()


async def completed_by_next_worker(bus: Bus, within_s: float) -> EpisodeCompleted:
    """The completion of episode `wait` by a new `Waiter` worker, within `within_s`."""
    second = Worker(bus, [Waiter], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Waiter.name,)) as completions:
        tg.start_soon(second.run)
        await second.wait_ready()
        with anyio.fail_after(within_s):
            done = await completions.wait(["wait"])
        second.stop()
    return done["wait"]


async def test_a_timer_set_before_its_worker_stopped_fires_from_the_worker_after_it(bus: Bus) -> None:
    await set_timer_then_stop(bus)
    done = await completed_by_next_worker(bus, within_s=10)
    assert done.outcome == "success" and done.details == {"wait": 1}
    journal = await collect(bus, "wait")
    [timer] = [e for e in journal if isinstance(e.body, Timer)]
    assert [e.causation for e in journal if isinstance(e.body, TimerFired)] == [timer.id]


async def test_a_forged_timer_of_a_negative_wait_is_passed_over_by_the_worker_that_rearms_timers(bus: Bus) -> None:
    """A credential of the agent's may publish a timer as it: one that waits -5 s, rearmed, failed every worker
    after the one that would have set it. It is not a timer (it does not decode); the real one still fires."""
    forged = {"id": "forged", "episode": "forged", "sender": "waiter", "body": {"kind": "timer", "after_s": -5.0}}
    await bus.publish_raw(bus.subjects.event("timer", "forged", "waiter"), msgspec.msgpack.encode(forged), "forged")
    await set_timer_then_stop(bus)
    done = await completed_by_next_worker(bus, within_s=10)
    assert done.outcome == "success" and done.details == {"wait": 1}
    with pytest.raises(ValueError, match="a Timer waits 0 to"):
        Timer(after_s=-5.0)  # nor can a handler make one: it raises, and its episode ends in error


async def test_a_timer_rearmed_by_a_worker_whose_clock_is_behind_waits_no_longer_than_it_asked(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock stepped back an hour (an NTP step, a host's clock set right) between the timer and the
    worker after the one that set it: the timer still fires within its own 1.5 s, not an hour later."""
    await set_timer_then_stop(bus)
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() - 3600.0)
    done = await completed_by_next_worker(bus, within_s=10)
    assert done.outcome == "success" and done.details == {"wait": 1}


class Hurried(Agent):
    """Sets a timer it does not wait for when its episode starts, and completes at once; a `Start` that
    says `wait` waits for its timer instead."""

    name = "hurried"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            wait = bool(msg.body.data.get("wait"))
            ctx.emit(Timer(after_s=0.5))  # the second episode starts later: its timer fires after the first's time
            if not wait:
                ctx.emit(EpisodeCompleted(outcome="success"))
        elif isinstance(msg.body, TimerFired):
            ctx.emit(EpisodeCompleted(outcome="success"))


async def test_a_timer_of_an_episode_completed_meanwhile_does_not_fire(bus: Bus) -> None:
    worker = Worker(bus, [Hurried], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Hurried.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await run_episode(bus, completions, "done", "hurried")
        await run_episode(bus, completions, "waits", "hurried", Start(data={"wait": True}))  # its timer fires later
        worker.stop()
    assert any(isinstance(e.body, TimerFired) for e in await collect(bus, "waits"))
    done = await collect(bus, "done")
    assert any(isinstance(e.body, Timer) for e in done)
    assert not any(isinstance(e.body, TimerFired) for e in done)


async def test_a_timer_of_an_episode_already_forgotten_does_not_fire(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer longer than `linger_s` outlives its completed episode's instances: firing it then would only
    have its input rebuild them from the stream, for nobody."""
    forgotten = anyio.Event()
    evict = Worker._evict

    def evict_and_tell(self: Worker, cutoff: float) -> None:
        evict(self, cutoff)
        if "gone" in self._evicted:
            forgotten.set()

    monkeypatch.setattr(Worker, "_evict", evict_and_tell)
    worker = Worker(bus, [Hurried], backends=lambda role: EchoBackend(), settings=WorkerSettings(linger_s=0.05))
    async with anyio.create_task_group() as tg, Completions(bus, (Hurried.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await run_episode(bus, completions, "gone", "hurried")
        with anyio.fail_after(5):
            await forgotten.wait()
        await run_episode(bus, completions, "waits", "hurried", Start(data={"wait": True}))  # its timer fires later
        worker.stop()
    assert any(isinstance(e.body, TimerFired) for e in await collect(bus, "waits"))
    assert not any(isinstance(e.body, TimerFired) for e in await collect(bus, "gone"))


class Patient(Agent):
    """Sets a timer of `after_s` (from its `Start`) when its episode starts, and completes when it fires."""

    name = "patient"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.emit(Timer(after_s=float(msg.body.data["after_s"])))
        elif isinstance(msg.body, TimerFired):
            ctx.emit(EpisodeCompleted(outcome="success"))


async def test_a_completion_sent_while_the_worker_was_cut_off_still_keeps_its_timer_from_firing(
    bus: Bus, nats_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker reads completions from the stream: one sent while its connection was down is read once it is
    back. Heard on core NATS it was lost, and the timer of an episode already completed fired into it."""
    armed = anyio.Event()
    arm = Worker._arm

    def arm_and_tell(self: Worker, timers: list[Envelope]) -> None:
        arm(self, timers)
        if any(timer.episode == "cut" for timer in timers):
            armed.set()

    monkeypatch.setattr(Worker, "_arm", arm_and_tell)
    async with network() as net:
        link = await net.link("worker", "nats", nats_server.port)
        worker_bus = await Bus.connect(link.url, settings=BusSettings(idle_heartbeat_s=0.5))
        worker = Worker(worker_bus, [Patient], backends=lambda role: EchoBackend())
        try:
            async with anyio.create_task_group() as tg, Completions(bus, (Patient.name,)) as completions:
                tg.start_soon(worker.run)
                await worker.wait_ready()
                await start_episode(bus, "cut", "patient", EpisodeStarted(), Start(data={"after_s": 5.0}))
                with anyio.fail_after(10):
                    await armed.wait()  # its timer stored, and held by the worker
                reconnected = worker_bus.next_reconnect()
                link.partition()
                ended = EpisodeCompleted(outcome="timeout", cause="ended by the test")
                await bus.publish(Envelope(id="cut-ended", episode="cut", sender=RUNNER, body=ended))
                link.heal()
                with anyio.fail_after(10):
                    await reconnected.wait()
                # set after the cut episode's timer, this one fires later: by then the other would have fired
                await run_episode(bus, completions, "later", "patient", Start(data={"after_s": 5.5}))
                worker.stop()
        finally:
            await worker_bus.close()
    assert not any(isinstance(e.body, TimerFired) for e in await collect(bus, "cut"))
    assert any(isinstance(e.body, TimerFired) for e in await collect(bus, "later"))


class Tally(Agent):
    """Completes once it has seen ten notes, saying in which order they came."""

    name = "tally"
    completes = True

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        self.seen.append(int(msg.body.data["n"]))  # type: ignore[union-attr]
        if len(self.seen) == 10:
            ctx.emit(EpisodeCompleted(outcome="success", details={"seen": self.seen}))


async def tally_ten_notes(bus: Bus, episode: str, *, within_s: float) -> tuple[EpisodeCompleted, Worker]:
    """Ten notes to a `Tally` worker whose ack wait (60 s) is longer than the test; its completion within
    `within_s`, and the worker."""
    worker = Worker(bus, [Tally], backends=lambda role: EchoBackend(), settings=WorkerSettings(ack_wait_s=60.0))
    async with anyio.create_task_group() as tg, Completions(bus, (Tally.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await bus.publish_all(
            Envelope(id=f"n{i}", episode=episode, sender="feeder", recipient="tally", body=Note(data={"n": i}))
            for i in range(10)
        )
        with anyio.fail_after(within_s):
            done = await completions.wait([episode])
        worker.stop()
    return done[episode], worker


async def test_deliveries_lost_on_the_way_are_handled_in_stream_order_once(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when the worker's server pauses: its consumer sent deliveries 3 to 5, they never arrived, 6 on did.

    The ack wait is longer than the test: only reading the consumer again brings them back.
    """
    arrive = Consumer._on_msg
    dropped: list[int] = []

    async def lossy(self: Consumer, msg: Msg) -> None:
        tokens = msg.reply.split(".")
        if self.name == "agent-tally-0of1" and tokens[6] in {"3", "4", "5"} and len(dropped) < 3:
            dropped.append(int(tokens[5]))
            return
        await arrive(self, msg)

    monkeypatch.setattr(Consumer, "_on_msg", lossy)
    done, worker = await tally_ten_notes(bus, "gap", within_s=20)
    assert len(dropped) == 3
    assert done.details == {"seen": list(range(10))}
    assert worker.handled == 10


async def test_the_last_input_lost_before_a_quiet_period_is_found_by_the_idle_heartbeat(
    nats_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tenth input never arrives and nothing follows it: the consumer's idle heartbeat names it, and the
    worker reads it again from its acknowledgement floor long before the ack wait would send it."""
    arrive = Consumer._on_msg
    dropped: list[str] = []

    async def lossy(self: Consumer, msg: Msg) -> None:
        if self.name == "agent-tally-0of1" and msg.reply and msg.reply.split(".")[6] == "10" and not dropped:
            dropped.append(msg.reply)
            return
        await arrive(self, msg)

    monkeypatch.setattr(Consumer, "_on_msg", lossy)
    bus = await Bus.connect(nats_server.url, settings=BusSettings(idle_heartbeat_s=0.5))
    try:
        await bus.ensure_stream()
        done, _ = await tally_ten_notes(bus, "quiet", within_s=15)  # a quarter of the ack wait
    finally:
        await bus.close()
    assert len(dropped) == 1
    assert done.details == {"seen": list(range(10))}


class Caller(Agent):
    """Asks everyone on topic `roll` at its start and completes once both listeners answered."""

    name = "caller"
    completes = True

    def __init__(self) -> None:
        self.heard: set[str] = set()

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.publish("roll", Note(text="who is there?"))
            return
        self.heard.add(msg.sender)
        if self.heard == {"left", "right"}:
            ctx.emit(EpisodeCompleted(outcome="success"))


class Left(Agent):
    name = "left"
    topics = ("roll",)

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        ctx.send("caller", Note(data={"r": await ctx.random()}))


class Right(Left):
    name = "right"


async def test_every_subscriber_of_a_topic_message_leaves_outputs_of_its_own(bus: Bus) -> None:
    """Two agents handle one topic message: their answers and recordings have ids of their own, so
    JetStream's deduplication keeps both (it would keep one of each if ids followed the input alone)."""
    worker = Worker(bus, [Caller, Left, Right], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Caller.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await run_episode(bus, completions, "roll", "caller")
        worker.stop()
    journal = await collect(bus, "roll")
    (roll,) = [e for e in journal if e.topic == "roll"]
    answers = [e for e in journal if e.causation == roll.id]
    assert sorted((e.sender, e.kind) for e in answers) == [
        ("left", "note"),
        ("left", "recording"),
        ("right", "note"),
        ("right", "recording"),
    ]
    assert len({e.id for e in answers}) == 4


async def test_a_restarted_worker_reads_histories_a_bounded_number_at_a_time(bus: Bus) -> None:
    """A worker restarted with many episodes in flight rebuilds each instance from its history, at most
    `recovery_reads` read at once (thousands of consumers opened together time out on the server)."""
    first = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(first.run)
        await first.wait_ready()
        await run_episode(bus, completions, "before", "pinger")
        first.stop()
    episodes = [f"ep{i}" for i in range(24)]
    for e in episodes:  # begun while no worker runs: the restarted one meets them all at once
        await start_episode(bus, e, "pinger", EpisodeStarted(task="toy"))
    reading = most = 0
    read_stored = bus.read_stored

    async def counted(subjects, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal reading, most
        if not any(subject.startswith("fl.rec.") for subject in subjects):  # not a history: the timers
            return await read_stored(subjects, *args, **kwargs)
        reading += 1
        most = max(most, reading)
        try:
            return await read_stored(subjects, *args, **kwargs)
        finally:
            reading -= 1

    bus.read_stored = counted  # type: ignore[method-assign]
    second = Worker(
        bus, [Pinger, Ponger], backends=lambda role: EchoBackend(), settings=WorkerSettings(recovery_reads=2)
    )
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(second.run)
        await second.wait_ready()
        with anyio.fail_after(60):
            done = await completions.wait(episodes)
        second.stop()
    assert {c.outcome for c in done.values()} == {"success"}
    assert most == 2  # histories were read, two at a time


async def test_a_restarted_worker_asks_again_for_its_timers_while_the_stream_does_not_answer(bus: Bus) -> None:
    """Reading the timers a worker before it left is asked for again, like a history: a stream busy or
    electing a leader at the restart does not end the worker."""
    first = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(first.run)
        await first.wait_ready()
        await run_episode(bus, completions, "before", "pinger")
        first.stop()
    refused = 0
    read_stored = bus.read_stored

    async def refuse_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal refused
        if not refused:
            refused += 1
            raise BusError("opening consumer of fl.ev.timer.* failed: nats: timeout")
        return await read_stored(*args, **kwargs)

    bus.read_stored = refuse_once  # type: ignore[method-assign]
    second = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(second.run)
        with anyio.fail_after(20):
            await second.wait_ready()
        await run_episode(bus, completions, "after", "pinger")
        second.stop()
    assert refused == 1


async def test_worker_shards_on_partitioned_subjects_are_delivered_only_their_own_episodes(
    nats_server: EmbeddedServer,
) -> None:
    """Each shard's consumer is filtered on the server to its partitions: nats-server delivers a message once, to
    the shard of its episode, and not to every shard for it to pass over. Every episode completes once."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(partitions=2))
    try:
        await bus.ensure_stream()
        episodes = [f"part{i}" for i in range(8)]
        assert {episode_shard(e, 2) for e in episodes} == {0, 1}
        workers = [
            Worker(bus, [Tally], backends=lambda role: EchoBackend(), settings=WorkerSettings(shard=k, shards=2))
            for k in range(2)
        ]
        async with anyio.create_task_group() as tg, Completions(bus, (Tally.name,)) as completions:
            for worker in workers:
                tg.start_soon(worker.run)
                await worker.wait_ready()
            await bus.publish_all(
                Envelope(id=f"{e}-n{i}", episode=e, sender="feeder", recipient="tally", body=Note(data={"n": i}))
                for e in episodes
                for i in range(10)
            )
            with anyio.fail_after(20):
                done = await completions.wait(episodes)
            for worker in workers:
                worker.stop()
        assert all(done[e].details["seen"] == list(range(10)) for e in episodes)
        for k in range(2):
            info = await bus.js.consumer_info(bus.subjects.stream, f"agent-tally-{k}of2")
            assert info.config.filter_subject == f"fl.{k}of2.ep.*.tally.*"
            assert info.delivered.consumer_seq == 10 * sum(1 for e in episodes if episode_shard(e, 2) == k)
    finally:
        await bus.close()


class Counts(Agent):
    """Says how many messages it has seen; completes the episode at the second."""

    name = "counts"
    completes = True

    def __init__(self) -> None:
        self.seen = 0

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        self.seen += 1
        ctx.emit(Notice(text="seen", data={"seen": self.seen}))
        if self.seen == 2:
            ctx.emit(EpisodeCompleted(outcome="success"))


async def test_a_late_input_after_its_episodes_instances_were_forgotten_meets_them_rebuilt(bus: Bus) -> None:
    """An input that comes after its completed episode's instances were evicted (a model call that outlived an
    episode's timeout) is handled by an instance rebuilt from the stream, as replay handles it: not by a fresh
    one, which has seen nothing (a user simulator without its task then failed on an assertion)."""
    worker = Worker(bus, [Counts], backends=lambda role: EchoBackend())
    seen: list[int] = []
    third = anyio.Event()

    async def on_notice(msg: Message) -> None:
        seen.append(int(decode_envelope(msg.data).body.data["seen"]))  # type: ignore[union-attr]
        if len(seen) == 3:
            third.set()

    def note(i: int) -> Envelope:
        return Envelope(id=f"late-n{i}", episode="late", sender="feeder", recipient="counts", body=Note(text="x"))

    await bus.subscribe(bus.subjects.event("notice", "late"), on_notice)
    async with anyio.create_task_group() as tg, Completions(bus, (Counts.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        await bus.publish_all([note(0), note(1)])
        with anyio.fail_after(10):
            await completions.wait(["late"])
        worker._finished.setdefault("late", 0.0)  # completed long ago, whenever its own subscription hears it
        worker._evict(cutoff=math.inf)
        assert "late" not in worker._instances
        await bus.publish(note(2))
        with anyio.fail_after(10):
            await third.wait()
        worker.stop()
    assert seen == [1, 2, 3]


async def test_a_worker_shard_of_two_partitions_follows_both_partitions_completions(
    nats_server: EmbeddedServer,
) -> None:
    """Shard 0 of 2 over 4 partitions reads the completions of two subjects: one follower each, in a task group
    of their own (one cancel scope entered twice ended the worker with an error)."""
    bus = await Bus.connect(nats_server.url, prefix="p4", settings=BusSettings(partitions=4))
    await bus.ensure_stream()
    try:
        assert len(bus.subjects.shard_events("completed", 0, 2)) == 2
        worker = Worker(bus, [Hurried], backends=lambda role: EchoBackend(), settings=WorkerSettings(shards=2))
        episode = next(f"two-{i}" for i in range(100) if episode_shard(f"two-{i}", 2) == 0)
        async with anyio.create_task_group() as tg, Completions(bus, (Hurried.name,)) as completions:
            tg.start_soon(worker.run)
            await worker.wait_ready()
            await run_episode(bus, completions, episode, Hurried.name)
            worker.stop()
    finally:
        await bus.close()
