"""The tool-use agent: reads the conversation, asks its helpers, calls tools, answers the user."""

from __future__ import annotations

import json
from typing import Any

from faultline._errors import FaultlineError
from faultline.agents._episode import EpisodeSpec, tally_message
from faultline.agents._text_tools import parse_tool_text, tools_prompt
from faultline.core import (
    Agent,
    AssistantTurn,
    ChatMessage,
    Context,
    ContextReply,
    ContextRequest,
    Envelope,
    EpisodeCompleted,
    LlmRequest,
    LlmToolCall,
    Start,
    Tally,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.envs import Domain, load_domain

HELPERS_TOPIC = "helpers"

SYSTEM = """You are a customer-facing agent that acts through tools. Follow the policy below exactly.
Call at most one tool at a time and wait for its result. Before any action that changes data,
state what you will do and get the user's explicit yes. When the request is done or must be
refused, tell the user the outcome in plain words.

# Policy
{policy}"""


class ToolAgent(Agent):
    """Decides each step with one model call, after the active helpers (if any) replied.

    With an empty roster no context request is sent at all, so helpers cost nothing
    until they are switched on. With the episode's `tool_calls` "text" the tools are
    offered in the prompt and calls read from the answer (`_text_tools`), for
    servers without OpenAI `tools`.
    """

    name = "tool"
    topics = ()

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.domain: Domain | None = None
        self.transcript: list[ChatMessage] = []
        self.step = 0
        self.tokens = 0
        self.mistakes: list[dict[str, Any]] = []
        self.context: dict[str, str] = {}
        self.tools: list[dict[str, Any]] = []
        self.examples = ""
        self.system = ""
        self.finished = False

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            self.spec = EpisodeSpec.from_start(body)
            self.domain = load_domain(self.spec.domain)
            self.tools = _tool_schemas(self.domain)
        elif self.spec is None or self.finished:
            return
        elif isinstance(body, UserTurn):
            if body.done:
                self.finished = True
                return
            if not self.transcript:
                await self._recall(ctx, body.text)
            self.transcript.append(ChatMessage(role="user", content=body.text))
            await self._next_step(ctx)
        elif isinstance(body, ToolResult):
            content = f"Error: {body.error}" if body.error else _as_text(body.output)
            if self.spec.tool_calls == "text":
                self.transcript.append(ChatMessage(role="user", content=f"Result of {body.name}: {content}"))
            else:
                self.transcript.append(
                    ChatMessage(role="tool", content=content, tool_call_id=body.call_id, name=body.name)
                )
            if body.ends:
                self._end(ctx)
                return
            await self._next_step(ctx)
        elif isinstance(body, ContextReply) and body.step == self.step:
            self.context[body.helper] = body.text
            if set(self.spec.helpers) <= self.context.keys():
                await self._decide(ctx)

    async def _recall(self, ctx: Context, query: str) -> None:
        """Past episodes like this one, as in-context examples (MemToolAgent), when memory is on."""
        assert self.spec is not None
        if not self.spec.memory or self.spec.memory.get("mode", "off") == "off":
            return
        from faultline.agents.memory._client import memory_examples, retrieval_mode
        from faultline.agents.memory._preference import tool_name

        mode = retrieval_mode(self.spec.memory)
        if mode is None:
            return
        try:
            self.examples, hidden = await memory_examples(ctx, domain=self.spec.domain, query=query, mode=mode)
        except FaultlineError:
            return  # no memory service: the episode goes on without examples
        self.tools = [t for t in self.tools if tool_name(t) not in set(hidden)]

    async def _next_step(self, ctx: Context) -> None:
        assert self.spec is not None
        self.step += 1
        if self.step > self.spec.max_steps:
            self.finished = True
            ctx.emit(EpisodeCompleted(outcome="failure", cause=f"step limit reached ({self.spec.max_steps} decisions)"))
            return
        self.context = {}
        if self.spec.helpers:
            ctx.publish(
                HELPERS_TOPIC,
                ContextRequest(step=self.step, helpers=list(self.spec.helpers), transcript=self._transcript_data()),
            )
            return
        await self._decide(ctx)

    async def _decide(self, ctx: Context) -> None:
        assert self.spec is not None and self.domain is not None
        response = await ctx.llm(self._request())
        self.tokens += response.usage.total
        mistake = response.metadata.get("mistake")
        if mistake and mistake not in self.mistakes:  # a wrong write shows on its question and its call
            self.mistakes.append(dict(mistake))
        if response.tool_calls:
            call = response.tool_calls[0]
            self.transcript.append(ChatMessage(role="assistant", content=response.content, tool_calls=[call]))
            ctx.send("env", _tool_call(call))
            return
        written = parse_tool_text(response.content, f"text-{self.step}") if self.spec.tool_calls == "text" else None
        if written is not None:
            self.transcript.append(ChatMessage(role="assistant", content=response.content))
            ctx.send("env", _tool_call(written))
            return
        done = bool(response.metadata.get("done"))
        self.transcript.append(ChatMessage(role="assistant", content=response.content))
        ctx.send("env", tally_message(self.spec, Tally(tokens=self.tokens, mistakes=self.mistakes)))
        ctx.send("user", AssistantTurn(text=response.content, done=done))

    def _end(self, ctx: Context) -> None:
        """A terminal tool ran: hand the environment the tally and tell the user the episode is over."""
        assert self.spec is not None
        self.finished = True
        ctx.send("env", tally_message(self.spec, Tally(tokens=self.tokens, mistakes=self.mistakes)))
        ctx.send("user", AssistantTurn(text="", done=True, ends=True))

    def _request(self) -> LlmRequest:
        assert self.spec is not None and self.domain is not None
        system = self.system = self.system or _system_prompt(self.domain)
        if self.examples:
            system += "\n\n# Past episodes\n" + self.examples
        if self.spec.tool_calls == "text":
            system += "\n\n" + tools_prompt(self.tools)
        if self.context:
            system += "\n\n# Notes from your helpers\n" + "\n".join(
                f"[{k}] {v}" for k, v in sorted(self.context.items())
            )
        metadata: dict[str, Any] = {
            "sim": "tool",
            "domain": self.spec.domain,
            "task": self.spec.task,
            "seed": self.spec.seed,
            "error_rates": self.spec.error_rates,
        }
        repair = self.spec.repair_from_decision
        if repair is not None and self.step >= repair:
            metadata["mistakes_off_from_step"] = 0
        return LlmRequest(
            role=self.spec.tool_role,
            messages=[ChatMessage(role="system", content=system), *self.transcript],
            tools=[] if self.spec.tool_calls == "text" else self.tools,
            metadata=metadata,
        )

    def _transcript_data(self) -> list[dict[str, Any]]:
        return [{"role": m.role, "content": m.content} for m in self.transcript]


def _system_prompt(domain: Domain) -> str:
    """The policy inside Faultline's own rules, or alone when the domain says it is the whole prompt."""
    return domain.policy if domain.policy_is_system_prompt else SYSTEM.format(policy=domain.policy)


_schemas: dict[int, list[dict[str, Any]]] = {}


def _tool_schemas(domain: Domain) -> list[dict[str, Any]]:
    """A domain's tools in the OpenAI format, built once per domain instance."""
    if id(domain) not in _schemas:
        _schemas[id(domain)] = [spec.openai() for spec in domain.tools()]
    return _schemas[id(domain)]


def _tool_call(call: LlmToolCall) -> ToolCall:
    return ToolCall(call_id=call.id, name=call.name, arguments=call.arguments, arguments_error=call.arguments_error)


def _as_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, sort_keys=True, default=str)
