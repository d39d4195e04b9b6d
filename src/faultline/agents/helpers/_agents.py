"""The FAMA helpers: agents that answer the tool agent's context requests before its decisions.

Each helper is told the episode at its start (the same `Start` as the tool agent),
keeps the conversation it is sent (each request carries only what is new), and
answers every request with one `ContextReply`. Model calls go through `ctx.llm`
with the helper's own prompt, so they are journaled and replay exactly; with the
`sim` backend they are answered by the simulator's documented stand-ins.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec

from faultline._errors import AnswerFormatError
from faultline.agents._episode import EpisodeSpec
from faultline.agents.helpers import _prompts as prompts
from faultline.core import (
    RECHECK,
    Agent,
    ChatMessage,
    Context,
    ContextReply,
    ContextRequest,
    Envelope,
    LlmRequest,
    Notice,
    Start,
    memory_turns,
    parse_verdict,
)
from faultline.envs import Domain, load_domain

PLAN_STEPS = 8
"""The longest plan the planner is asked for."""


class Helper(Agent):
    """Base of the helpers: the episode, the conversation so far, and one model call through `ask`."""

    entry: ClassVar[str]
    """The helper's name in a roster (`memory` for `memory:K`)."""

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.domain: Domain | None = None
        self.transcript: list[ChatMessage] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            self.spec = EpisodeSpec.from_start(body)
            self.domain = load_domain(self.spec.domain)
        elif isinstance(body, ContextRequest) and self.spec is not None:
            self.transcript.extend(msgspec.convert(m, ChatMessage) for m in body.transcript)
            text, verdict, data = await self.answer(body, ctx)
            ctx.send(
                msg.sender,
                ContextReply(
                    step=body.step, helper=self.entry, text=text, verdict=verdict, data=data, revision=body.revision
                ),
            )

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        """The reply's text, verdict and data for `request`."""
        raise NotImplementedError

    @staticmethod
    def changed_by(news: Sequence[ChatMessage], spec: EpisodeSpec, last: str) -> bool:
        """Whether a request now could be answered otherwise than with `last`, the helper's last answer,
        given `news`, the conversation messages it has not been sent yet. The tool agent asks only then
        (`ASK_WHEN_CHANGED`). Helpers that ask their model every time: always."""
        return True

    async def ask(self, ctx: Context, system: str, question: str, **metadata: Any) -> str:
        """One model call: the helper's prompt, the conversation, then its question."""
        assert self.spec is not None
        role = str(ctx.settings.get("model_role") or self.name)
        messages = [
            ChatMessage(role="system", content=system),
            *self.transcript,
            ChatMessage(role="user", content=question),
        ]
        sim = {"sim": "helper", "helper": self.entry, "domain": self.spec.domain, "task": self.spec.task}
        response = await ctx.llm(LlmRequest(role=role, messages=messages, metadata=sim | metadata))
        return response.content.strip()

    @property
    def policy(self) -> str:
        assert self.domain is not None
        return self.domain.policy


class ConstraintsExtractor(Helper):
    """Domain Constraints Extractor (DCE): the policy rules that bear on the next step."""

    name = "dce"
    entry = "dce"

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        return await self.ask(ctx, prompts.DCE.format(policy=self.policy), prompts.DCE_ASK), "", {}


class ToolSuggester(Helper):
    """Tool Suggestion (TSA): which tools fit the next step, and why."""

    name = "tsa"
    entry = "tsa"

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        assert self.domain is not None
        tools = "\n".join(f"- {t.name}: {t.description}" for t in self.domain.tools())
        return await self.ask(ctx, prompts.TSA.format(tools=tools), prompts.TSA_ASK), "", {}


class OutputReformulator(Helper):
    """Tool Output Reformulator (TOR): the latest tool output, when longer than the episode's
    `tor_threshold` characters, restated as the few facts the next step needs. Shorter outputs
    need no restating: the reply is empty and no model is asked."""

    name = "tor"
    entry = "tor"

    def __init__(self) -> None:
        super().__init__()
        self.restated = -1
        self.facts = ""

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        assert self.spec is not None
        if not _long_output(self.transcript[-1:], self.spec):
            return "", "", {}
        last = len(self.transcript) - 1
        if last != self.restated:
            self.restated, self.facts = last, await self.ask(ctx, prompts.TOR, prompts.TOR_ASK)
        return self.facts, "", {}

    @staticmethod
    def changed_by(news: Sequence[ChatMessage], spec: EpisodeSpec, last: str) -> bool:
        """A new latest message that is a long output, or one after the output last restated."""
        return bool(news) and (bool(last) or _long_output(news[-1:], spec))


class Planner(Helper):
    """Planner: a short numbered plan for the rest of the task, made again only when the user spoke
    or a tool call failed since the last plan (otherwise the plan stands, with no model call)."""

    name = "planner"
    entry = "planner"

    def __init__(self) -> None:
        super().__init__()
        self.plan = ""
        self.planned_at = 0

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        assert self.spec is not None
        if not self.plan or self.changed_by(self.transcript[self.planned_at :], self.spec, self.plan):
            system = prompts.PLANNER.format(policy=self.policy, max_steps=PLAN_STEPS)
            self.plan = await self.ask(ctx, system, prompts.PLANNER_ASK, max_steps=PLAN_STEPS)
        self.planned_at = len(self.transcript)
        return self.plan, "", {}

    @staticmethod
    def changed_by(news: Sequence[ChatMessage], spec: EpisodeSpec, last: str) -> bool:
        """The user spoke, or a tool call failed: the plan is made again."""
        return any(m.role == "user" or (m.role == "tool" and m.content.startswith("Error")) for m in news)


class UserContext(Helper):
    """Memory (User Context Manager): the last K user turns verbatim, so that what the user said
    early is not lost in a long conversation. No model call."""

    name = "user_context"
    entry = "memory"

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        assert self.spec is not None
        k = next((memory_turns(e) for e in self.spec.helpers if e.partition(":")[0] == self.entry), 0)
        turns = [m.content for m in self.transcript if m.role == "user"][-k:] if k else []
        if not turns:
            return "", "", {}
        return "The user said, in order:\n" + "\n".join(f"- {t}" for t in turns), "", {}

    @staticmethod
    def changed_by(news: Sequence[ChatMessage], spec: EpisodeSpec, last: str) -> bool:
        """The user spoke: only the user's turns are kept."""
        return any(m.role == "user" for m in news)


class Verifier(Helper):
    """Verifier: reviews what the tool agent proposes before it happens, a tool call
    (`{"name", "arguments"}`) or a message to the user (`{"reply"}`, from protocol
    `VERIFY_REPLIES`), and answers PASS or RECHECK with a fix in the structured reflection form.
    An answer that cannot be read is journaled as one `Notice` and replied to with no verdict,
    so the proposal stands."""

    name = "verifier"
    entry = "verifier"

    async def answer(self, request: ContextRequest, ctx: Context) -> tuple[str, str, dict[str, Any]]:
        proposal = request.proposal
        if "reply" in proposal:
            system = prompts.VERIFIER_REPLY.format(policy=self.policy)
            question = prompts.VERIFIER_REPLY_ASK.format(reply=proposal["reply"])
            proposed = "message to the user"
        elif proposal:
            call = f"{proposal.get('name')}({json.dumps(proposal.get('arguments', {}), sort_keys=True)})"
            system = prompts.VERIFIER.format(policy=self.policy)
            question = prompts.VERIFIER_ASK.format(call=call)
            proposed = "call"
        else:
            return "", "", {}
        text = await self.ask(ctx, system, question, proposal=proposal)
        try:
            verdict = parse_verdict(text)
        except AnswerFormatError as exc:
            ctx.emit(
                Notice(
                    text=f"verifier answer could not be read ({exc}); the proposed {proposed} stands",
                    data={"step": request.step, "revision": request.revision, "answer": text[:2000]},
                )
            )
            return "", "", {}
        data: dict[str, Any] = {}
        if verdict.verdict == RECHECK:
            data = {"call": verdict.call} if verdict.call else {"final": verdict.final}
            return f"{verdict.reflection}; fix: {verdict.fix()}", verdict.verdict, data
        return verdict.reflection, verdict.verdict, data


def _long_output(messages: Sequence[ChatMessage], spec: EpisodeSpec) -> bool:
    """Whether the last of `messages` is a tool output over the episode's `tor_threshold` characters."""
    return bool(messages) and messages[-1].role == "tool" and len(messages[-1].content) > spec.tor_threshold


HELPER_CLASSES: tuple[type[Helper], ...] = (
    ConstraintsExtractor,
    ToolSuggester,
    OutputReformulator,
    Planner,
    UserContext,
    Verifier,
)
