"""A run holds a task for each episode it runs, not for each it plans: thousands planned cost nothing until they start."""

from __future__ import annotations

import asyncio

import anyio

from faultline.api import RunPlan, RunResult, plan_episodes, run_plan
from faultline.bus import Bus, Message
from faultline.envs import load_domain

PLANNED = 300
IN_FLIGHT = 3


async def test_a_run_makes_an_episodes_task_only_when_the_episode_starts(bus: Bus) -> None:
    """No worker runs, so the first episodes never complete: the rest of the plan waits without tasks."""
    plan = RunPlan(tasks=3, trials=PLANNED // 3, run_id="tasks", concurrency=IN_FLIGHT, start_rate=0)
    planned = plan_episodes(plan, load_domain("retail"))
    assert len(planned) == PLANNED
    result = RunResult(planned)
    users: list[str] = []
    all_started = anyio.Event()

    async def started(msg: Message) -> None:  # the user's Start is each episode's last
        users.append(msg.subject)
        if len(users) == IN_FLIGHT:
            all_started.set()

    sub = await bus.subscribe(bus.subjects.direct("*", "user"), started)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_plan, bus, plan, result, lambda _episode, _done: None)
        with anyio.fail_after(20):
            await all_started.wait()
        tasks = len(asyncio.all_tasks())
        tg.cancel_scope.cancel()
    await sub.unsubscribe()
    assert len(result.running) == IN_FLIGHT
    assert tasks < 30, f"{tasks} tasks for {IN_FLIGHT} episodes in flight of {PLANNED} planned"
