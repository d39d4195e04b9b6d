"""A rule scoped to a run (`FaultRule.run`, as `run --fault` makes them) faults that run's episodes alone: those whose
start records it, where another run's ids begin as its own do; by the id's prefix where a start records no run."""

from __future__ import annotations

from typing import Any

from faultline.core import FaultApplied
from faultline.faults import FaultInterceptor, FaultRule, RuleSet, add_rule_control
from tests.faults.test_faults import env, rules, through
from tests.faults.test_masfire import CONVERSATION

RECORDED = {"c1-1-a-t0": "c1-1", "c1-1-x-a-t0": "c1-1-x", "c1-1-old-t0": ""}
"""The run each episode's start records ("": journaled before starts did)."""


class Starts:
    """`FaultInterceptor.runs` over RECORDED, counting what it was asked; None (cannot tell now) while `down`."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.down = False

    async def __call__(self, episode: str) -> str | None:
        self.asked.append(episode)
        return None if self.down else RECORDED.get(episode)


def storm(**match: str) -> FaultRule:
    return FaultRule(id="s", fault="storm", params={"copies": 2}, **match)


def faulted(events: list[object]) -> list[str]:
    return [e.episode for e in events if isinstance(e.body, FaultApplied)]  # type: ignore[attr-defined]


async def test_a_run_scoped_rule_faults_the_episodes_whose_start_records_the_run_asking_once_an_episode() -> None:
    starts = Starts()
    faults = FaultInterceptor(rules(storm(episode="c1-1-*", run="c1-1")), runs=starts)
    messages = [env(i, episode=e) for i, e in enumerate([*RECORDED, *RECORDED, "c2-a-t0"])]
    _, events = await through(faults, *messages)
    assert faulted(events) == ["c1-1-a-t0", "c1-1-old-t0", "c1-1-a-t0", "c1-1-old-t0"]
    assert starts.asked == list(RECORDED)  # c2-a-t0 is no match of the pattern: never asked
    faults.forget("c1-1-x-a-t0")
    _, events = await through(faults, env(9, episode="c1-1-x-a-t0"))
    assert faulted(events) == [] and starts.asked[-1] == "c1-1-x-a-t0"


async def test_where_the_run_cannot_be_told_the_ids_prefix_decides_and_it_is_asked_again() -> None:
    starts = Starts()
    starts.down = True
    faults = FaultInterceptor(rules(storm(episode="c1-1-*", run="c1-1")), runs=starts)
    _, events = await through(faults, env(1, episode="c1-1-x-a-t0"))
    assert faulted(events) == ["c1-1-x-a-t0"]  # as the pattern alone did
    starts.down = False
    _, events = await through(faults, env(2, episode="c1-1-x-a-t0"))
    assert faulted(events) == [] and starts.asked == ["c1-1-x-a-t0"] * 2
    _, events = await through(FaultInterceptor(rules(storm(run="c1-1"))), env(3, episode="c1-1-x-a-t0"))
    assert faulted(events) == ["c1-1-x-a-t0"]  # without `runs` (the runner's own Starts): by the prefix


async def test_a_rule_with_no_run_asks_nothing() -> None:
    starts = Starts()
    _, events = await through(
        FaultInterceptor(rules(storm(episode="c1-1-*")), runs=starts), env(1, episode="c1-1-x-a-t0")
    )
    assert faulted(events) == ["c1-1-x-a-t0"] and starts.asked == []


async def test_a_run_scoped_rule_on_model_requests_changes_those_of_the_runs_episodes_alone() -> None:
    starts = Starts()
    rule = FaultRule(id="m", fault="memory_loss", params={"turns": 1}, episode="c1-1-*", run="c1-1")
    fault = FaultInterceptor(rules(rule), runs=starts).request_fault(_kept := _Store())
    for episode in ("c1-1-a-t0", "c1-1-x-a-t0"):
        await fault(_Ctx(env(1, episode=episode)), 0, CONVERSATION)  # type: ignore[arg-type]
    assert [e.episode for e in _kept.events] == ["c1-1-a-t0"]
    assert starts.asked == ["c1-1-a-t0", "c1-1-x-a-t0"]


class _CountedRules(RuleSet):
    """A rule set that counts how often its rules are matched."""

    def __init__(self, *specs: FaultRule) -> None:
        super().__init__()
        self.matched = 0
        for rule in specs:
            self.control(add_rule_control(rule, "n").body)  # type: ignore[arg-type]

    def matching(self, values: tuple[str, ...], message_id: str, now: float) -> Any:
        self.matched += 1
        return super().matching(values, message_id, now)


async def test_a_model_request_matches_the_rules_once_and_faults_as_the_request_with_its_recorded_run_does() -> None:
    starts = Starts()
    specs = (
        storm(run="c1-1"),  # no rule on model requests: never makes one ask the run
        FaultRule(id="m", fault="memory_loss", params={"turns": 1}, episode="c1-1-*", run="c1-1", probability=0.5),
    )
    counted = _CountedRules(*specs)
    fault = FaultInterceptor(counted, runs=starts).request_fault(kept := _Store())
    reference = FaultInterceptor(rules(*specs))
    faulted = 0
    for index in range(8):
        for episode in ("c1-1-a-t0", "c1-1-x-a-t0"):
            handling = env(1, episode=episode)
            sent = await fault(_Ctx(handling), index, CONVERSATION)  # type: ignore[arg-type]
            expected, event = reference.request(handling, "tool", index, CONVERSATION, recorded=RECORDED[episode])
            assert sent == expected
            if event is not None:
                faulted += 1
                assert kept.events[-1].body == event.body  # type: ignore[attr-defined]
    assert 0 < faulted == len(kept.events) < 8  # seeded draws: some of c1-1-a-t0's calls, none of c1-1-x's
    assert counted.matched == 16
    assert starts.asked == ["c1-1-a-t0", "c1-1-x-a-t0"]
    only_storm = FaultInterceptor(rules(specs[0]), runs=starts).request_fault(_Store())
    await only_storm(_Ctx(env(2, episode="c1-1-b-t0")), 0, CONVERSATION)  # type: ignore[arg-type]
    assert starts.asked == ["c1-1-a-t0", "c1-1-x-a-t0"]


class _Store:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def __call__(self, event: object) -> None:
        self.events.append(event)


class _Ctx:
    """What `request_fault` reads of a `Context`: the message handled and the agent."""

    def __init__(self, message: object) -> None:
        self.message = message
        self.agent = "tool"
