"""A send to an agent the system does not have fails at once, naming it, the agents there are and the closest one."""

from __future__ import annotations

from typing import Any

import pytest

from faultline import UnknownRecipientError
from faultline.core import (
    BUILTIN_SYSTEM,
    SCORER,
    Agent,
    AgentHarness,
    Context,
    Envelope,
    Grade,
    InputRecord,
    Note,
    Recipients,
    Start,
    System,
    load_system,
)
from faultline.testing import SystemHarness


class Triage(Agent):
    """Hands the question to the desk its record names, and finishes with the desk's answer."""

    name = "triage"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.send(str(msg.body.data["desk"]), Note(text=str(msg.body.data["question"])))
        elif isinstance(msg.body, Note):
            ctx.finish(msg.body.text)


class Math(Agent):
    name = "math"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Note):
            ctx.send(msg.sender, Note(text="5"))


class Desk(System):
    name = "help-desk"
    agents = (Triage, Math)
    entry = "triage"
    finishers = ("triage",)
    needs = ("desk", "question")

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0) if output == "5" else Grade(0.0, f"answered {output!r}")


class Unnamed(Desk):
    name = System.name


def path(cls: type) -> str:
    return f"{__name__}:{cls.__qualname__}"


async def test_a_send_to_a_typo_of_an_agent_ends_the_episode_in_error_naming_it_and_the_closest_agent() -> None:
    episode = await SystemHarness(Desk).run({"desk": "mth", "question": "2 plus 3?"})
    assert episode.completed is not None
    assert (episode.completed.outcome, episode.completed.cause) == (
        "error",
        "UnknownRecipientError in triage: system help-desk has no agent 'mth' to send to: did you mean 'math'?"
        " (its agents: math, scorer, triage)",
    )
    assert not [m for m in episode.messages if m.recipient == "mth"]


async def test_a_send_to_a_name_like_none_of_them_suggests_nothing_and_an_unnamed_system_goes_by_its_class() -> None:
    episode = await SystemHarness(path(Unnamed)).run({"desk": "weather", "question": "rain?"})
    assert episode.completed is not None
    assert episode.completed.cause == (
        "UnknownRecipientError in triage: system Unnamed has no agent 'weather' to send to"
        " (its agents: math, scorer, triage)"
    )


async def test_sends_to_the_systems_agents_and_back_to_a_sender_pass() -> None:
    episode = await SystemHarness(Desk).run({"desk": "math", "question": "2 plus 3?"})
    assert episode.completed is not None and episode.completed.outcome == "success"
    assert [m.recipient for m in episode.messages if m.sender in ("triage", "math")] == ["math", "triage", SCORER]


def test_the_error_carries_the_recipient_the_agents_and_the_closest() -> None:
    recipients = load_system(path(Desk)).recipients("triage")
    assert recipients == Recipients("help-desk", frozenset({"triage", "math", SCORER}))
    with pytest.raises(UnknownRecipientError) as raised:
        recipients.check("mth")
    assert (raised.value.recipient, raised.value.agents, raised.value.closest) == (
        "mth",
        ("math", SCORER, "triage"),
        "math",
    )


def test_only_a_systems_own_agents_on_a_system_of_ones_own_are_held_to_its_agents() -> None:
    """The built-in tool-use system's helpers join by roster and a configuration may add agents beside it, and an
    agent outside a system (the scorer, one of the configuration's) may be sent to by no system's rule."""
    assert load_system(BUILTIN_SYSTEM).recipients("tool") is None
    assert load_system(path(Desk)).recipients(SCORER) is None
    assert load_system(path(Desk)).recipients("archivist") is None


async def test_an_answer_to_the_runner_is_let_by_as_before() -> None:
    """An agent that answers whoever sent it a message answers the runner for a Start (and, under a broadcast of
    the entry's Start, agents that never expected one do): the answer reaches no one, and ends nothing."""
    episode = await SystemHarness(Desk).run({"desk": "runner", "question": "2 plus 3?"})
    assert episode.completed is None
    assert [m.recipient for m in episode.sent_by("triage")] == ["runner"]


async def test_an_agent_harness_told_the_agents_system_refuses_a_typo_as_its_worker_would() -> None:
    """Without a system it lets any name by, as a worker that runs none; with one, by class or path, it holds the
    agent to that system's agents."""
    typo = Start(data={"desk": "mth", "question": "2 plus 3?"})
    for system in (Desk, path(Desk)):
        with pytest.raises(UnknownRecipientError) as raised:
            await AgentHarness(Triage(), system=system).deliver(typo)
        assert str(raised.value) == (
            "system help-desk has no agent 'mth' to send to: did you mean 'math'? (its agents: math, scorer, triage)"
        )
    sent = await AgentHarness(Triage(), system=Desk).deliver(Start(data={"desk": "math", "question": "2 plus 3?"}))
    assert [m.recipient for m in sent] == ["math"]
    assert [m.recipient for m in await AgentHarness(Triage()).deliver(typo)] == ["mth"]
