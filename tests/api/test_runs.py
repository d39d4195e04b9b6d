"""An episode's start records the run it is one of, so that a run is its episodes and no other run's, whatever
their ids begin with; a resumed run's retries record the run they resume."""

from __future__ import annotations

from typing import Any

from faultline.agent import Agent, Context, Envelope, Grade, InputRecord, Start, System
from faultline.api import RunPlan, plan_episodes, plan_records, start_envelopes
from faultline.core import EpisodeStarted, record_of, system_path
from faultline.envs import load_domain


class Echo(Agent):
    """Finishes with what it was started with."""

    name = "echo"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.finish(msg.body.data["word"])


class Echoing(System):
    name = "echoing"
    agents = (Echo,)
    entry = "echo"
    finishers = ("echo",)
    needs = ("word",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


def runs_started(plan: RunPlan) -> list[str]:
    """The run each planned episode's start records."""
    if plan.system:
        planned = plan_records(plan, [record_of({"word": "hi"}, i) for i in (1, 2)])
    else:
        planned = plan_episodes(plan, load_domain("retail"))
    found = []
    for episode in planned:
        body = start_envelopes(plan, episode)[0].body
        assert isinstance(body, EpisodeStarted)
        found.append(body.run)
    return found


def test_each_start_of_a_run_records_the_run_on_the_tool_use_system_and_on_ones_own() -> None:
    assert runs_started(RunPlan(tasks=2, trials=2, run_id="c1-1")) == ["c1-1"] * 4
    assert runs_started(RunPlan(domain="", system=system_path(Echoing), trials=2, run_id="c1-1-x")) == ["c1-1-x"] * 4
