"""A run holds a task for each episode it runs, not for each it plans, and fills up at its configured start rate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.api import RunPlan, RunResult, RunSpec, _plan, plan_episodes, run, run_plan
from faultline.api._run import _Ticker
from faultline.bus import Bus, Message
from faultline.core import EpisodeCompleted
from faultline.envs import load_domain
from faultline.runtime import load_config

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


def test_a_run_fills_up_at_the_start_rate_of_its_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def noted(deadline: float) -> None:
        waits.append(deadline)  # the schedule the runner keeps, not waited

    monkeypatch.setattr(_plan, "sleep_until", noted)
    config_file = tmp_path / "faultline.toml"
    config_file.write_text("[run]\nstart_rate = 20.0\n")
    spec = RunSpec(
        config=load_config(config_file), tasks=2, concurrency=2, journal=tmp_path / "j.sqlite", insecure=True
    )
    assert run(spec).summary.outcomes == {"success": 2}
    assert [round(w - waits[0], 6) for w in sorted(waits)] == [0.0, 0.05]


class _Counted(dict):  # type: ignore[type-arg]
    """A dict that counts the entries read by walking it."""

    walked = 0

    def values(self) -> Any:
        for value in super().values():
            _Counted.walked += 1
            yield value


class _Quiet:
    def update(self, done: int, ok: int, waiting: str) -> None:
        self.last = (done, ok)


async def test_telling_the_progress_after_each_episode_does_not_walk_every_episode() -> None:
    """At 5,000 in flight and 15,000 in all, recounting the successes and looking for the oldest running episode
    after each completion was a third of the runner's CPU."""
    episodes = [f"e{i}" for i in range(2_000)]
    result = RunResult([], completed=_Counted(), running=_Counted())
    watcher = _Quiet()
    ticker = _Ticker(watcher, result, 60.0, 10.0)  # type: ignore[arg-type]
    for i, e in enumerate(episodes):
        result.running[e] = float(i)
    _Counted.walked = 0
    for e in episodes:
        del result.running[e]
        result.completed[e] = EpisodeCompleted(outcome="success")
        ticker.on_done(e, result.completed[e])
    assert watcher.last == (2_000, 2_000)
    assert _Counted.walked <= 2 * len(episodes) + 1, f"{_Counted.walked} entries read for {len(episodes)} episodes"
