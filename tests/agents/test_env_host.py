"""The environment host, driven in-process: ground truth scores 1, tool problems are results."""

from __future__ import annotations

import msgspec
import pytest

from faultline.agents import EnvironmentHost, EpisodeSpec, ToolAgent
from faultline.agents._episode import END, TALLY
from faultline.core import (
    AgentHarness,
    ConversationEnded,
    EpisodeCompleted,
    Note,
    Tally,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.envs import Task, load_domain


async def play(
    domain: str, task: Task, calls: list[ToolCall], told: list[str]
) -> tuple[list[ToolResult], EpisodeCompleted]:
    env = AgentHarness(EnvironmentHost())
    await env.deliver(EpisodeSpec(domain=domain, task=task.id).start())
    results = []
    for call in calls:
        [out] = await env.deliver(call, sender="tool")
        assert out.recipient == "tool" and isinstance(out.body, ToolResult)
        results.append(out.body)
    [done] = await env.deliver(ConversationEnded(told=told, turns=1), sender="user")
    assert isinstance(done.body, EpisodeCompleted)
    return results, done.body


def ground_truth(task: Task) -> list[ToolCall]:
    return [ToolCall(call_id=f"c{i}", name=a.name, arguments=dict(a.arguments)) for i, a in enumerate(task.actions)]


@pytest.mark.parametrize("domain", ["retail", "phone"])
async def test_every_task_ground_truth_through_the_host_scores_one(domain: str) -> None:
    tasks = load_domain(domain).tasks()
    assert len(tasks) >= (60 if domain == "retail" else 20)
    for task in tasks:
        results, done = await play(domain, task, ground_truth(task), told=list(task.outputs))
        assert [r.error for r in results] == [""] * len(results), task.id
        assert (done.outcome, done.reward) == ("success", 1.0), (task.id, done.cause)


async def test_a_wrong_write_scores_zero() -> None:
    domain = load_domain("retail")
    task = next(t for t in domain.tasks() if any(s.writes for s in domain.tools() if s.name == t.actions[-1].name))
    step = len(task.actions) - 1
    wrong = next(
        a for c in ("wrong_entity", "wrong_value", "policy_violation") for a in domain.mistake_candidates(task, step, c)
    )
    calls = ground_truth(task)[:-1] + [ToolCall(call_id="w", name=wrong.name, arguments=dict(wrong.arguments))]
    _, done = await play("retail", task, calls, told=list(task.outputs))
    assert (done.outcome, done.reward) == ("failure", 0.0)
    assert "database differs" in done.cause


async def test_bad_calls_come_back_as_errors_and_the_episode_goes_on() -> None:
    task = load_domain("retail").tasks()[0]
    bad = [
        ToolCall(call_id="a", name="no_such_tool", arguments={}),
        ToolCall(call_id="b", name=task.actions[0].name, arguments={"bogus": [1, 2]}),
        ToolCall(call_id="c", name=task.actions[0].name, arguments_error="Expecting ',' delimiter"),
    ]
    results, done = await play("retail", task, bad + ground_truth(task), told=list(task.outputs))
    assert all(r.error for r in results[:3])
    assert "unknown tool" in results[0].error
    assert "not valid JSON" in results[2].error
    assert done.reward == 1.0


async def test_a_call_with_an_injected_error_fails_with_it_and_runs_nothing() -> None:
    domain = load_domain("retail")
    task = next(t for t in domain.tasks() if any(s.writes for s in domain.tools() if s.name == t.actions[-1].name))
    calls = ground_truth(task)
    last = msgspec.structs.replace(calls[-1], injected_error="Error: duplicate request")
    results, done = await play("retail", task, [*calls[:-1], last], told=list(task.outputs))
    assert results[-1] == ToolResult(call_id=last.call_id, name=last.name, error="Error: duplicate request")
    assert done.outcome == "failure", "the write the call would have made was not made"


async def test_a_refusal_task_is_failed_by_a_forbidden_write() -> None:
    domain = load_domain("retail")
    task = next(t for t in domain.tasks() if t.refusal and t.forbidden)
    forbidden = task.forbidden[0]
    calls = ground_truth(task) + [ToolCall(call_id="f", name=forbidden.name, arguments=dict(forbidden.arguments))]
    results, done = await play("retail", task, calls, told=list(task.outputs))
    assert done.reward == 0.0 or results[-1].error, "a forbidden write is refused by the tool or fails the episode"


async def test_the_protocol_1_notes_of_older_journals_still_score() -> None:
    """Journals written before `Tally` and `ConversationEnded` carried both as notes."""
    task = load_domain("retail").tasks()[0]
    done = []
    for tally, end in [
        (Tally(tokens=7), ConversationEnded(told=list(task.outputs), turns=2, tokens=5)),
        (
            Note(text=TALLY, data={"tokens": 7, "mistakes": []}),
            Note(text=END, data={"told": list(task.outputs), "turns": 2, "tokens": 5}),
        ),
    ]:
        env = AgentHarness(EnvironmentHost())
        await env.deliver(EpisodeSpec(domain="retail", task=task.id).start())
        for call in ground_truth(task):
            await env.deliver(call, sender="tool")
        assert await env.deliver(tally, sender="tool") == []
        [completed] = await env.deliver(end, sender="user")
        done.append(msgspec.structs.replace(completed.body, latency_s=0.0))
    assert done[0] == done[1] and (done[0].reward, done[0].turns, done[0].tokens) == (1.0, 2, 12)


@pytest.mark.parametrize("protocol", [2, 3])
async def test_the_step_limit_fails_the_episode_through_the_environment_from_protocol_3(protocol: int) -> None:
    """Only the environment completes episodes: the tool agent at its step limit hands it a failed end
    (journals of protocol 2 and before keep the tool agent's own completion, so they replay)."""
    task = load_domain("retail").tasks()[0]
    spec = EpisodeSpec(domain="retail", task=task.id, max_steps=0, protocol=protocol).start()
    tool = AgentHarness(ToolAgent())
    await tool.deliver(spec)
    outputs = await tool.deliver(UserTurn(text="hello"), sender="user")
    cause = "step limit reached (0 decisions)"
    if protocol == 2:
        assert [o.body for o in outputs] == [EpisodeCompleted(outcome="failure", cause=cause)]
        return
    assert [(o.recipient, type(o.body)) for o in outputs] == [("env", Tally), ("env", ConversationEnded)]
    env = AgentHarness(EnvironmentHost())
    await env.deliver(spec)
    for call in ground_truth(task):  # the database is right, yet the step limit fails the episode
        await env.deliver(call, sender="tool")
    for output in outputs:
        done = await env.deliver(output.body, sender="tool")
    [completed] = done
    assert completed.sender == "env"
    assert completed.body == EpisodeCompleted(
        outcome="failure",
        cause=cause,
        latency_s=completed.body.latency_s,
        details=completed.body.details,  # type: ignore[union-attr]
    )
