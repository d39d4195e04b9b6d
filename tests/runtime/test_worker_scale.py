"""A worker holding thousands of episodes: what it does per episode must not grow with how many it holds."""

from __future__ import annotations

from typing import Any, NoReturn

import anyio

from faultline.bus import Bus
from faultline.core import EpisodeStarted
from faultline.runtime import Completions, Worker, start_episode
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
