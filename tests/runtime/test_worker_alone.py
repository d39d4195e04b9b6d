"""A worker reads its agent's inputs alone: a second worker of the same agent and shard, or of another shard count
beside it on an open server, would be handed every input the first is, so it is refused; once the first has
stopped, a worker of its shard serves."""

from __future__ import annotations

import re

import anyio
import pytest

from faultline import ConsumerInUseError
from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.core import EpisodeStarted
from faultline.runtime import Completions, Worker, WorkerSettings, start_episode
from tests.runtime.toy import EchoBackend, Pinger, Ponger


def worker(bus: Bus, shard: int = 0, shards: int = 1) -> Worker:
    settings = WorkerSettings(shard=shard, shards=shards)
    return Worker(bus, [Pinger, Ponger], backends=lambda role: EchoBackend(), settings=settings)


@pytest.mark.parametrize(
    ("shard", "said"),
    [
        (
            (0, 1),
            "agent pinger, shard 0/1, is served by another worker already (its consumer agent-pinger-0of1 has a"
            " reader): two workers of one agent and shard would each handle every input. Stop the other one first;"
            " to share pinger's load, raise its group's count ([workers.<group>] count = N where `faultline up`"
            " runs) and give each worker its own --shard k/N",
        ),
        (
            (1, 2),
            "agent pinger is served by another worker in 1 shard(s) (its consumer agent-pinger-0of1 has a reader),"
            " and this worker's --shard 1/2 splits its episodes into 2: both would handle the same inputs. Give"
            " every worker of pinger the same shard count, each its own --shard k/1",
        ),
    ],
)
async def test_a_second_worker_of_an_agents_inputs_is_refused_and_one_after_the_first_stopped_serves(
    bus: Bus, nats_server: EmbeddedServer, shard: tuple[int, int], said: str
) -> None:
    first = worker(bus)
    second = await Bus.connect(nats_server.url, settings=BusSettings(other_reader_wait_s=0.5))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.run)
            await first.wait_ready()
            refused = pytest.RaisesExc(
                ConsumerInUseError, match=f"^{re.escape(said)}$", check=lambda e: e.consumer == "agent-pinger-0of1"
            )
            with pytest.RaisesGroup(refused, flatten_subgroups=True), anyio.fail_after(20):
                await worker(second, *shard).run()
            first.stop()
    finally:
        await second.close()

    after = worker(bus)
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(after.run)
        await after.wait_ready()
        await start_episode(bus, f"after-{shard[1]}", "pinger", EpisodeStarted(task="toy"))
        with anyio.fail_after(20):
            done = await completions.wait([f"after-{shard[1]}"])
        after.stop()
    assert done[f"after-{shard[1]}"].outcome == "success"
