"""The user simulator: speaks from the task's instruction and ends the conversation."""

from __future__ import annotations

import msgspec

from faultline.agents._episode import EpisodeSpec, end_message
from faultline.core import (
    Agent,
    AssistantTurn,
    ChatMessage,
    Context,
    ConversationEnded,
    Envelope,
    LlmRequest,
    Start,
    UserTurn,
)
from faultline.envs import Task, load_domain

STOP = "###STOP###"

SYSTEM = """You play a customer talking to a support agent. Stay in character and pursue this goal:

{instruction}

Facts you know, to share only when asked:
{facts}

Write one short message per turn. Do not invent facts you were not given. When your goal is met,
or the agent cannot help further, reply with exactly {stop}."""

SYSTEM_HIDDEN = """You play a customer talking to a support agent. The brief below is for you alone: never
copy or quote it. Say what you want in your own words, a piece at a time, as a customer would.

{instruction}

Facts you know, to share only when asked:
{facts}

Write one short message per turn. Do not invent facts you were not given. When your goal is met,
or the agent cannot help further, reply with exactly {stop}."""


class UserSimulator(Agent):
    """Plays the customer; the conversation ends when it says so or the turn limit is reached.

    From the simulator's side the agent's messages are the `user` role and its own are
    `assistant`, as a model playing a part expects. A domain with a user agent of its own
    (`Domain.user_agent`) gets it: every message of the episode is handed to that instead.
    A subclass of this one keeps the episode protocol (the Start it reads, the turns it sends,
    how it hands the environment the end) and changes what it says: `opening` is the first
    turn, said as written (a benchmark's own greeting) before the model speaks.
    """

    name = "user"

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.transcript: list[ChatMessage] = []
        self.told: list[str] = []
        self.turns = 0
        self.tokens = 0
        self.ended = False
        self.system = ""
        self.stand_in: Agent | None = None

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if self.stand_in is not None:
            await self.stand_in.on_message(msg, ctx)
        elif isinstance(body, Start):
            self.spec = EpisodeSpec.from_start(body)
            domain = load_domain(self.spec.domain)
            if domain.user_agent is not None and not isinstance(self, domain.user_agent):
                self.stand_in = domain.user_agent()
                await self.stand_in.on_message(msg, ctx)
                return
            task = domain.task(self.spec.task)
            if self.spec.instruction:
                task = msgspec.structs.replace(task, instruction=self.spec.instruction)
            system = domain.user_prompt(task) or _default_prompt(task, domain.hidden_instructions)
            self.system = self.spec.system_prompt(system)
            opening = self.opening(task)
            if opening:
                self._say(ctx, opening)
            else:
                await self._speak(ctx)
        elif isinstance(body, AssistantTurn) and body.ends and not self.ended:
            self._end(ctx)
        elif isinstance(body, AssistantTurn) and not self.ended:
            self.told.append(body.text)
            self.transcript.append(ChatMessage(role="user", content=body.text))
            await self._speak(ctx)
        elif isinstance(body, UserTurn) and not body.done and not self.ended:
            # A turn of its own that came back (a message cycle): heard, answered, never "told".
            self.transcript.append(ChatMessage(role="user", content=body.text))
            await self._speak(ctx)

    async def _speak(self, ctx: Context) -> None:
        assert self.spec is not None
        if self.turns >= self.spec.max_turns:
            self._end(ctx, cause=f"turn limit reached ({self.spec.max_turns} user turns)")
            return
        response = await ctx.llm(self._request())
        self.tokens += response.usage.total
        text = response.content.strip()
        if response.metadata.get("done") or STOP in text:
            self._end(ctx)
            return
        self._say(ctx, text)

    def opening(self, task: Task) -> str:
        """The first user turn, said as written instead of asking the model ("": the model speaks first)."""
        return ""

    def _say(self, ctx: Context, text: str) -> None:
        self.turns += 1
        self.transcript.append(ChatMessage(role="assistant", content=text))
        ctx.send("tool", UserTurn(text=text))

    def _end(self, ctx: Context, cause: str = "") -> None:
        self.ended = True
        ctx.send("tool", UserTurn(text="", done=True))
        assert self.spec is not None
        end = ConversationEnded(told=self.told, turns=self.turns, tokens=self.tokens, cause=cause)
        ctx.send("env", end_message(self.spec, end))

    def _request(self) -> LlmRequest:
        assert self.spec is not None
        return LlmRequest(
            role=self.spec.user_role,
            messages=[ChatMessage(role="system", content=self.system), *self.transcript],
            metadata={"sim": "user", "domain": self.spec.domain, "task": self.spec.task, "seed": self.spec.seed},
        )


def _default_prompt(task: Task, hidden: bool) -> str:
    facts = "\n".join(f"- {k}: {v}" for k, v in task.user_facts.items()) or "- (none)"
    return (SYSTEM_HIDDEN if hidden else SYSTEM).format(instruction=task.instruction, facts=facts, stop=STOP)
