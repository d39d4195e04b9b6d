"""A worker holding thousands of episodes: what it does per episode must not grow with how many it holds."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar, NoReturn

import anyio
import pytest
from nats.aio.msg import Msg

from faultline.bus import Bus, EmbeddedServer
from faultline.core import Agent, Context, Envelope, EpisodeCompleted, EpisodeStarted
from faultline.runtime import Completions, Worker, WorkerSettings, _worker, start_episode
from faultline.runtime._worker import _give_place_up, _remember, _Slot, _take_place_again
from tests.runtime.toy import EchoBackend, Pinger, Ponger


class _NoWalk(dict):  # type: ignore[type-arg]
    """The worker's instances, which may be looked up by episode but never walked through."""

    def _walked(self, *args: Any) -> NoReturn:
        raise AssertionError("forgetting one episode walked through every episode's instances")

    __iter__ = keys = values = items = _walked


async def test_forgetting_a_completed_episode_looks_at_that_episode_only(bus: Bus) -> None:
    """At 5,000 episodes in flight a worker holds 30,000 instances or more: forgetting the thousands completed
    `linger_s` ago by walking all of them for each stalled its event loop for seconds at a time."""
    worker = Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend())
    episodes = [f"forget{i}" for i in range(6)]
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        for e in episodes:
            await start_episode(bus, e, Pinger.name, EpisodeStarted(task="toy"))
        with anyio.fail_after(20):
            await completions.wait(episodes)
        worker.stop()
    held = {e: dict(worker._instances[e]) for e in episodes}
    assert all(set(agents) == {Pinger.name, Ponger.name} for agents in held.values())
    worker._finished = {e: float(i) for i, e in enumerate(episodes)}  # completed in this order
    worker._instances = _NoWalk(worker._instances)

    worker._evict(cutoff=3.0)  # the first three completed before it

    assert list(worker._finished) == episodes[3:]
    assert {e for e in episodes if e in worker._instances} == set(episodes[3:])


class Marks(Agent):
    """Notes that it handled its episode's start, then completes the episode."""

    name = "marks"
    completes = True
    handled: ClassVar[list[str]] = []
    second: ClassVar[anyio.Event]

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        Marks.handled.append(msg.episode)
        if len(Marks.handled) == 2:
            Marks.second.set()
        ctx.emit(EpisodeCompleted(outcome="success"))


async def test_a_handler_waiting_for_its_outputs_to_be_confirmed_holds_no_place(
    bus: Bus, nats_server: EmbeddedServer
) -> None:
    """With one place, the second episode's handler runs while the first one's outputs wait for JetStream's
    confirmation. Holding places through that wait capped a busy worker: it reads confirmations late."""
    Marks.handled, Marks.second = [], anyio.Event()
    worker_bus = await Bus.connect(nats_server.url)
    held: list[Msg] = []
    read = worker_bus._acks._on_answer
    reading = anyio.Event()

    async def late(msg: Msg) -> None:  # confirmations arrive, and the worker reads them only once told to
        if reading.is_set():
            await read(msg)
        else:
            held.append(msg)

    worker_bus._acks._on_answer = late  # type: ignore[method-assign]
    worker = Worker(worker_bus, [Marks], backends=lambda role: EchoBackend(), settings=WorkerSettings(concurrency=1))
    try:
        async with anyio.create_task_group() as tg, Completions(bus, (Marks.name,)) as completions:
            tg.start_soon(worker.run)
            await worker.wait_ready()
            for e in ("first", "second"):
                await start_episode(bus, e, Marks.name, EpisodeStarted(task="toy"))
            with anyio.fail_after(10):
                await Marks.second.wait()
            reading.set()
            for msg in held:
                await read(msg)
            with anyio.fail_after(20):
                done = await completions.wait(["first", "second"])
            worker.stop()
    finally:
        await worker_bus.close()
    assert sorted(Marks.handled) == ["first", "second"]
    assert {c.outcome for c in done.values()} == {"success"}


async def test_a_place_given_up_for_a_model_call_is_taken_back_without_a_turn_of_the_event_loop() -> None:
    """Under load a turn of the loop takes tenths of a second, and every model call of every handler paid one."""
    limiter = anyio.CapacityLimiter(1)
    async with _Slot(limiter):
        others: list[str] = []

        async def other() -> None:  # runs at this task's next turn of the loop
            others.append("ran")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            assert _give_place_up(limiter) and limiter.borrowed_tokens == 0
            await _take_place_again(limiter)  # the model answered at once
            assert others == []
            assert limiter.borrowed_tokens == 1


class _Remembered(OrderedDict[str, None]):
    """Remembered episodes, whose oldest may be forgotten but which are never walked through."""

    def _walked(self, *args: Any) -> NoReturn:
        raise AssertionError("forgetting the oldest remembered episode walked through the others")

    __iter__ = keys = values = items = _walked


def test_remembering_one_more_episode_forgets_the_oldest_without_walking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker remembers the last `EVICTED_KEPT` episodes it forgot: walking them for the oldest stepped over
    every one deleted before it, so each completion cost more the longer the worker ran, up to 50 us."""
    monkeypatch.setattr(_worker, "EVICTED_KEPT", 3)
    remembered = _Remembered()

    for episode in ["e1", "e2", "e3", "e4", "e5", "e3"]:
        _remember(remembered, episode)

    assert len(remembered) == 3
    assert list(OrderedDict.keys(remembered)) == ["e3", "e4", "e5"]
