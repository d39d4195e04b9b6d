"""A completion the stream holds but core NATS never brought to the runner is not completed again as a timeout.

Core NATS delivers at most once: bench/chaos.py seed 803 paused a node as the environment completed an
episode, the runner never saw the completion and, 60 s later, journaled a second one (`timeout`). A runner
that lost its connection reads what it missed from the stream as soon as it is back.
"""

from __future__ import annotations

import time

import anyio
import pytest

from bench._proxy import HOST, network
from faultline import JournalError
from faultline.api import RunPlan, RunResult, plan_episodes, run_plan
from faultline.bus import Bus, Delivery, EmbeddedServer
from faultline.core import Envelope, EpisodeCompleted
from faultline.envs import load_domain
from faultline.runtime import Completions


async def test_a_completion_core_nats_lost_is_read_from_the_stream_before_the_episode_times_out(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def lost(self: Completions, delivery: Delivery) -> None:
        """Every completion lost on its way to the runner, with nothing to tell of it."""

    monkeypatch.setattr(Completions, "_on_delivery", lost)
    plan = RunPlan(tasks=1, run_id="missed", concurrency=1, episode_timeout_s=0.5)
    [planned] = plan_episodes(plan, load_domain("retail"))
    done = EpisodeCompleted(outcome="success", reward=1.0)
    await bus.publish(Envelope(id="env-done", episode=planned.episode, sender="env", body=done, ts=time.time()))
    result = RunResult([planned])
    with anyio.fail_after(10):
        await run_plan(bus, plan, result, lambda _episode, _done: None)
    assert result.completed == {planned.episode: done}
    stored = await Completions(bus).stored([planned.episode])
    assert stored == {planned.episode: done}
    assert (await bus.stream_state()).messages == 1 + 1 + 3  # the completion, the start event and three starts


async def test_completions_sent_while_the_runner_was_cut_off_are_read_from_the_stream_once_it_reconnects(
    bus: Bus, nats_server: EmbeddedServer
) -> None:
    episodes = ["cut-0", "cut-1"]
    done = EpisodeCompleted(outcome="success", reward=1.0)
    got: dict[str, EpisodeCompleted] = {}
    async with network() as net:
        link = await net.link("runner", "nats", nats_server.port)
        runner = await Bus.connect(f"nats://{HOST}:{link.port}")
        try:
            async with Completions(runner) as completions:
                with anyio.fail_after(10):
                    async with anyio.create_task_group() as tg:

                        async def wait() -> None:
                            got.update(await completions.wait(episodes))

                        tg.start_soon(wait)
                        await runner.flush()  # its subscriptions are in place before the cut
                        link.partition()
                        for episode in episodes:  # while the runner is away: core NATS brings them to no one
                            env = Envelope(
                                id=f"{episode}-done", episode=episode, sender="env", body=done, ts=time.time()
                            )
                            await bus.publish(env)
                        assert not got
                        link.heal()
        finally:
            await runner.close()
    assert got == dict.fromkeys(episodes, done)


async def test_an_error_inside_a_completions_block_comes_out_as_it_was(bus: Bus) -> None:
    """Not wrapped in an exception group by the block's followers: `run_plan` stops on a JournalError this way."""
    with pytest.raises(JournalError, match="refused"):
        async with Completions(bus):
            raise JournalError("refused")
