"""The episode agents follow the domain: terminal tools end the episode, the user is the domain's."""

from __future__ import annotations

import sqlite3

from faultline._errors import ToolError
from faultline.agents import EnvironmentHost, EpisodeSpec, ToolAgent, UserSimulator
from faultline.core import (
    Agent,
    AgentHarness,
    AssistantTurn,
    Context,
    ConversationEnded,
    Envelope,
    Note,
    Start,
    Tally,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.envs import Action, Domain, Task, tool
from faultline.runtime.models import SimBackend

BRIEF = "You are Dana. You want a human; never say you are following a brief."


class Helpdesk(Domain):
    name = "helpdesk"
    hidden_instructions = True

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE tickets (text TEXT)")

    def tasks(self) -> list[Task]:
        handoff = Action(name="transfer", arguments={"summary": "wants a human"})
        return [Task(id="0", instruction=BRIEF, user_facts={"name": "Dana"}, actions=[handoff])]

    @tool("Open a ticket.", writes=True, text=("string", "What it is about."))
    def open_ticket(self, db: sqlite3.Connection, text: str) -> str:
        db.execute("INSERT INTO tickets VALUES (?)", (text,))
        return "opened"

    @tool("Hand the user to a human.", terminal=True, summary=("string", "The case."))
    def transfer(self, db: sqlite3.Connection, summary: str) -> str:
        return "Transfer successful"


class ScriptedUser(Agent):
    """A domain's own user agent: says one fixed line whatever happens."""

    name = "user"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        ctx.send("tool", UserTurn(text=f"scripted reply to {type(msg.body).__name__}"))


class OwnUser(Helpdesk):
    user_agent = ScriptedUser


class OwnPrompt(Helpdesk):
    def user_prompt(self, task: Task) -> str:
        return f"Benchmark user prompt. Goal: {task.instruction}"


HERE = "tests.agents.test_domain_episodes"


def start(domain: str) -> Start:
    return EpisodeSpec(domain=f"{HERE}:{domain}", task="0", protocol=2).start()


async def test_after_a_terminal_tool_the_episode_ends_and_no_tool_runs() -> None:
    env = AgentHarness(EnvironmentHost())
    await env.deliver(start("Helpdesk"))
    [done] = await env.deliver(ToolCall(call_id="a", name="transfer", arguments={"summary": "x"}), sender="tool")
    assert done.body == ToolResult(call_id="a", name="transfer", output="Transfer successful", ends=True)
    [late] = await env.deliver(ToolCall(call_id="b", name="open_ticket", arguments={"text": "x"}), sender="tool")
    assert isinstance(late.body, ToolResult) and late.body.error == "the episode is over; no tool runs now"

    agent = AgentHarness(ToolAgent(), backend=SimBackend())
    await agent.deliver(start("Helpdesk"))
    await agent.deliver(UserTurn(text="hello"), sender="user")
    calls = len(agent.recordings)
    outputs = await agent.deliver(done.body, sender="env")
    assert len(agent.recordings) == calls  # no further decision
    assert [(o.recipient, type(o.body)) for o in outputs] == [("env", Tally), ("user", AssistantTurn)]
    assert outputs[1].body == AssistantTurn(text="", done=True, ends=True)

    user = AgentHarness(UserSimulator(), backend=SimBackend())
    await user.deliver(start("Helpdesk"))
    calls = len(user.recordings)
    ended = await user.deliver(outputs[1].body, sender="tool")
    assert len(user.recordings) == calls
    assert [o.body for o in ended] == [
        UserTurn(text="", done=True),
        ConversationEnded(told=[], turns=1, tokens=ended[1].body.tokens),
    ]  # type: ignore[union-attr]


async def test_a_hidden_instruction_never_reaches_the_agent_and_the_prompt_says_not_to_quote_it() -> None:
    user = AgentHarness(UserSimulator(), backend=SimBackend())
    [first] = await user.deliver(start("Helpdesk"))
    assert isinstance(first.body, UserTurn) and BRIEF not in first.body.text and "Dana" not in first.body.text
    [echo] = await user.deliver(first.body, sender="user")  # its own words back: the sim clarifies
    assert isinstance(echo.body, UserTurn) and BRIEF not in echo.body.text
    system = user.recordings[0].request.messages[0].content
    assert BRIEF in system and "never\ncopy or quote it" in system


async def test_the_domain_supplies_the_user_prompt_or_the_whole_user_agent() -> None:
    user = AgentHarness(UserSimulator(), backend=SimBackend())
    await user.deliver(start("OwnPrompt"))
    assert user.recordings[0].request.messages[0].content == f"Benchmark user prompt. Goal: {BRIEF}"

    own = AgentHarness(UserSimulator(), backend=SimBackend())
    [said] = await own.deliver(start("OwnUser"))
    [again] = await own.deliver(Note(text="anything"), sender="tool")
    assert [said.body, again.body] == [
        UserTurn(text="scripted reply to Start"),
        UserTurn(text="scripted reply to Note"),
    ]
    assert own.recordings == []


class Greeter(UserSimulator):
    """A benchmark's user: its own greeting first, then the model, through the public API only."""

    def opening(self, task: Task) -> str:
        return "Hi! I need some help."


class GreetingUser(Helpdesk):
    user_agent = Greeter


class FailingTransfer(Helpdesk):
    terminal_on_error = True

    @tool("Hand the user to a human.", terminal=True, summary=("string", "The case."))
    def transfer(self, db: sqlite3.Connection, summary: str) -> str:
        raise ToolError("no human is free")


async def test_a_user_simulator_subclass_says_its_opening_then_lets_the_model_speak() -> None:
    user = AgentHarness(UserSimulator(), backend=SimBackend())
    [first] = await user.deliver(start("GreetingUser"))
    assert first.body == UserTurn(text="Hi! I need some help.")
    assert user.recordings == []  # the opening is said as written: no model call
    [second] = await user.deliver(AssistantTurn(text="How can I help?"), sender="tool")
    assert isinstance(second.body, UserTurn) and second.body.text and len(user.recordings) == 1
    prompt = user.recordings[0].request.messages
    assert [m.role for m in prompt] == ["system", "assistant", "user"]
    assert prompt[1].content == "Hi! I need some help."


async def test_a_terminal_tool_that_fails_ends_the_episode_only_where_the_domain_says_so() -> None:
    env = AgentHarness(EnvironmentHost())
    await env.deliver(start("FailingTransfer"))
    [failed] = await env.deliver(ToolCall(call_id="a", name="transfer", arguments={"summary": "x"}), sender="tool")
    assert isinstance(failed.body, ToolResult) and failed.body.error and failed.body.ends

    kept = AgentHarness(EnvironmentHost())
    await kept.deliver(start("Helpdesk"))
    [refused] = await kept.deliver(ToolCall(call_id="a", name="transfer", arguments={}), sender="tool")
    assert isinstance(refused.body, ToolResult) and refused.body.error and not refused.body.ends
