"""The tool-use agent: reads the conversation, asks its helpers, calls tools, answers the user."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from faultline._errors import FaultlineError
from faultline.agents._episode import (
    ASK_WHEN_CHANGED,
    RECALL_USER,
    STEP_LIMIT_TO_ENV,
    VERIFY_REPLIES,
    EpisodeSpec,
    tally_message,
)
from faultline.agents._text_tools import parse_tool_text, tools_prompt
from faultline.agents.helpers import HELPER_CLASSES
from faultline.agents.memory import (
    RATING_RANKER,
    is_preference_task,
    memory_examples,
    retrieval_mode,
    task_user,
    tool_name,
)
from faultline.core import (
    RECHECK,
    Agent,
    AssistantTurn,
    ChatMessage,
    Context,
    ContextReply,
    ContextRequest,
    ConversationEnded,
    Envelope,
    EpisodeCompleted,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    Notice,
    Start,
    Tally,
    Timer,
    TimerFired,
    ToolCall,
    ToolResult,
    UserTurn,
    helper_agent,
    helper_name,
    parse_turn,
)
from faultline.envs import Domain, load_domain

VERIFIER = "verifier"
REFLECT_ON_ERROR = """# Your last tool call failed
Before you act again, reflect. Answer in exactly this form:
<reflect>what went wrong, and what to do about it</reflect>
then either <call>{"name": "<tool name>", "arguments": {...}}</call> to call a tool,
or <final>your message to the user</final>."""
HELPERS = {cls.entry: cls for cls in HELPER_CLASSES}

SYSTEM = """You are a customer-facing agent that acts through tools. Follow the policy below exactly.
Call at most one tool at a time and wait for its result. Before any action that changes data,
state what you will do and get the user's explicit yes. When the request is done or must be
refused, tell the user the outcome in plain words.

# Policy
{policy}"""


class ToolAgent(Agent):
    """Decides each step with one model call, after the helpers of its roster replied.

    Before a decision it asks the helpers of the roster but the verifier for context and
    waits for their replies, at most `helper_wait_s` (a `Timer`); a helper that did not
    answer in time is named in a `Notice` and the decision is made without it. A helper
    whose last answer nothing new in the conversation can change is not asked again: that
    answer stands (from protocol `ASK_WHEN_CHANGED`; before it, every helper was asked). With a
    verifier in the roster, a proposed tool call is reviewed before it runs, and from protocol
    `VERIFY_REPLIES` a message to the user before it is sent: PASS runs (sends) it, RECHECK asks
    the model for a revised proposal (at most `verifier_revisions` of them), and the last
    proposal runs. With an empty roster no request is sent at all.
    With the episode's `tool_calls` "text" the tools are offered in the prompt and calls
    read from the answer (`_text_tools`), for servers without OpenAI `tools`.
    """

    name = "tool"
    topics = ()

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.me = self.name
        """The name this instance runs under in the episode (the key of `EpisodeSpec.sample_from`)."""
        self.domain: Domain | None = None
        self.transcript: list[ChatMessage] = []
        self.step = 0
        self.tokens = 0
        self.mistakes: list[dict[str, Any]] = []
        self.context: dict[str, str] = {}
        self.waiting: set[str] = set()
        """Helpers whose reply to the current request has not come yet."""
        self.sent: dict[str, int] = {}
        """For each helper, how much of the transcript it has been sent."""
        self.answers: dict[str, str] = {}
        """For each helper that answered its last request, that answer."""
        self.proposal: LlmResponse | None = None
        self.revision = 0
        self.rechecks = 0
        """RECHECKs received in the episode (the simulator draws its mistakes afresh after each)."""
        self.tools: list[dict[str, Any]] = []
        self.examples = ""
        self.system = ""
        self.finished = False
        self.failed = ""
        """The error of the last tool call, while nothing has happened since ("" when it did not fail)."""
        self.reflecting = False
        """Whether the request in flight asked for the structured reflection form."""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            self.me = ctx.agent
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
            self.failed = ""
            self.transcript.append(ChatMessage(role="user", content=body.text))
            await self._next_step(ctx)
        elif isinstance(body, ToolResult):
            self.failed = body.error
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
        elif isinstance(body, ContextReply) and self._awaited(body.step, body.revision, body.helper):
            self.waiting.discard(body.helper)
            if body.helper == VERIFIER:
                await self._verdict(ctx, body)
                return
            self.answers[body.helper] = body.text
            if body.text:
                self.context[body.helper] = body.text
            if not self.waiting:
                await self._decide(ctx)
        elif isinstance(body, TimerFired) and self._awaited(body.data.get("step"), body.data.get("revision"), ""):
            missing = sorted(self.waiting)
            ctx.emit(
                Notice(
                    text=f"no answer from {', '.join(missing)} within {self.spec.helper_wait_s:g}s; deciding without",
                    data={"step": self.step, "revision": self.revision, "missing": missing},
                )
            )
            self.waiting.clear()
            for helper in missing:
                self.answers.pop(helper, None)
            if self.proposal is not None:
                await self._act(ctx, self.proposal)
            else:
                await self._decide(ctx)

    def _awaited(self, step: Any, revision: Any, helper: str) -> bool:
        """Whether a reply (or the timer, with no helper) belongs to the request in flight."""
        return (
            step == self.step
            and revision == self.revision
            and bool(self.waiting)
            and (not helper or helper in self.waiting)
        )

    async def _recall(self, ctx: Context, query: str) -> None:
        """Past episodes like this one, as in-context examples (MemToolAgent), when memory is on.

        On a preference task the request names the task's user (from protocol `RECALL_USER`), so
        the tools that user rated 0 leave the tool list (hard preference guiding, which the paper
        applies to personalised tool use only); `[memory] ranker = "rating"` groups the examples.
        """
        assert self.spec is not None
        if not self.spec.memory or self.spec.memory.get("mode", "off") == "off":
            return
        mode = retrieval_mode(self.spec.memory)
        if mode is None:
            return
        assert self.domain is not None
        task = self.domain.task(self.spec.task)
        user = task_user(task) if self.spec.protocol >= RECALL_USER and is_preference_task(task) else ""
        try:
            self.examples, hidden = await memory_examples(
                ctx,
                domain=self.spec.domain,
                query=query,
                mode=mode,
                user=user,
                split_by_feedback=self.spec.memory.get("ranker") == RATING_RANKER,
            )
        except FaultlineError:
            return  # no memory service: the episode goes on without examples
        self.tools = [t for t in self.tools if tool_name(t) not in set(hidden)]

    async def _next_step(self, ctx: Context) -> None:
        assert self.spec is not None
        self.step += 1
        if self.step > self.spec.max_steps:
            self.finished = True
            cause = f"step limit reached ({self.spec.max_steps} decisions)"
            if self.spec.protocol < STEP_LIMIT_TO_ENV:  # as journals of earlier protocols recorded it
                ctx.emit(EpisodeCompleted(outcome="failure", cause=cause))
                return
            ctx.send("env", tally_message(self.spec, Tally(tokens=self.tokens, mistakes=self.mistakes)))
            ctx.send("env", ConversationEnded(cause=cause, failed=True))
            return
        self.proposal, self.revision = None, 0
        advisers = [name for name in map(helper_name, self.spec.helpers) if name != VERIFIER]
        asked = [name for name in advisers if self._must_ask(name)]
        self.context = {name: self.answers[name] for name in advisers if name not in asked and self.answers[name]}
        if asked:
            self._ask(ctx, asked)
            return
        await self._decide(ctx)

    def _must_ask(self, helper: str) -> bool:
        """Whether `helper` is asked before this decision: unless it answered its last request and
        nothing new in the conversation can change that answer (`Helper.changed_by`)."""
        assert self.spec is not None
        if self.spec.protocol < ASK_WHEN_CHANGED or helper not in self.answers:
            return True
        news = self.transcript[self.sent.get(helper, 0) :]
        return HELPERS[helper].changed_by(news, self.spec, self.answers[helper])

    def _ask(self, ctx: Context, helpers: list[str], proposal: dict[str, Any] | None = None) -> None:
        """Send each helper what is new in the conversation, and set the timer that bounds the wait."""
        assert self.spec is not None
        for helper in helpers:
            start = self.sent.get(helper, 0)
            self.sent[helper] = len(self.transcript)
            request = ContextRequest(
                step=self.step,
                helpers=list(self.spec.helpers),
                transcript=[msgspec.to_builtins(m) for m in self.transcript[start:]],
                proposal=proposal or {},
                revision=self.revision,
            )
            ctx.send(helper_agent(helper), request)
        self.waiting = set(helpers)
        ctx.emit(Timer(after_s=self.spec.helper_wait_s, data={"step": self.step, "revision": self.revision}))

    async def _decide(self, ctx: Context) -> None:
        """Ask the model for the step's action; a tool call (from protocol `VERIFY_REPLIES`, a message to
        the user too) goes to the verifier first, if there is one."""
        assert self.spec is not None
        response = await ctx.llm(self._request())
        self.tokens += response.usage.total
        # The last revision allowed runs unreviewed: a RECHECK of it could change nothing.
        verify = VERIFIER in map(helper_name, self.spec.helpers) and self.revision < max(
            1, self.spec.verifier_revisions
        )
        call = self._call_in(response)
        proposal: dict[str, Any] = {}
        if call is not None:
            proposal = {"name": call.name, "arguments": call.arguments}
        elif self.spec.protocol >= VERIFY_REPLIES:
            proposal = {"reply": response.content}
        if proposal and verify:
            self.proposal = response
            self._ask(ctx, [VERIFIER], proposal)
            return
        await self._act(ctx, response)

    async def _verdict(self, ctx: Context, reply: ContextReply) -> None:
        """PASS (or no verdict) runs the proposal; RECHECK asks for a revised one while revisions remain."""
        assert self.spec is not None and self.proposal is not None
        if reply.verdict != RECHECK or self.revision >= self.spec.verifier_revisions:
            await self._act(ctx, self.proposal)
            return
        self.revision += 1
        self.rechecks += 1
        proposed = "call" if self._call_in(self.proposal) is not None else "message to the user"
        self.context[VERIFIER] = f"RECHECK of your proposed {proposed}: {reply.text}"
        self.proposal = None
        await self._decide(ctx)

    async def _act(self, ctx: Context, response: LlmResponse) -> None:
        """Carry out a decision: send its tool call to the environment, or its text to the user."""
        assert self.spec is not None
        self.proposal = None
        mistake = response.metadata.get("mistake")
        if mistake and mistake not in self.mistakes:  # a wrong write shows on its question and its call
            self.mistakes.append(dict(mistake))
        call = self._call_in(response)
        if call is not None:
            # a call from the reflection form is kept as a native one, where the role takes native calls
            native = [call] if response.tool_calls or (self.reflecting and self.spec.tool_calls == "native") else []
            self.transcript.append(ChatMessage(role="assistant", content=response.content, tool_calls=native))
            ctx.send("env", _tool_call(call))
            return
        done = bool(response.metadata.get("done"))
        self.transcript.append(ChatMessage(role="assistant", content=response.content))
        text = (parse_turn(response.content).final or response.content) if self.reflecting else response.content
        ctx.send("env", tally_message(self.spec, Tally(tokens=self.tokens, mistakes=self.mistakes)))
        ctx.send("user", AssistantTurn(text=text, done=done))

    def _call_in(self, response: LlmResponse) -> LlmToolCall | None:
        """The tool call a model answer makes: its first native one, or, with text tool calls, the one
        written in its text; None when the answer is a message to the user."""
        assert self.spec is not None
        if response.tool_calls:
            return response.tool_calls[0]
        if self.reflecting:
            calls = parse_turn(response.content).calls
            if not calls:
                return None
            name, arguments = calls[0]["name"], calls[0]["arguments"]
            return LlmToolCall(id=f"reflect-{self.step}", name=name, arguments=arguments)
        if self.spec.tool_calls == "text":
            return parse_tool_text(response.content, f"text-{self.step}")
        return None

    def _end(self, ctx: Context) -> None:
        """A terminal tool ran: hand the environment the tally and tell the user the episode is over."""
        assert self.spec is not None
        self.finished = True
        ctx.send("env", tally_message(self.spec, Tally(tokens=self.tokens, mistakes=self.mistakes)))
        ctx.send("user", AssistantTurn(text="", done=True, ends=True))

    def _request(self) -> LlmRequest:
        assert self.spec is not None and self.domain is not None
        system = self.system = self.system or self.spec.system_prompt(_system_prompt(self.domain))
        if self.examples:
            system += "\n\n# Past episodes\n" + self.examples
        self.reflecting = self.spec.reflection == "after_error" and bool(self.failed)
        if self.spec.tool_calls == "text" or self.reflecting:
            system += "\n\n" + tools_prompt(self.tools)
        if self.reflecting:
            system += "\n\n" + REFLECT_ON_ERROR
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
        if self.spec.sample and self.step >= self.spec.sample_from.get(self.me, self.spec.max_steps + 1):
            metadata["sample"] = self.spec.sample
        if self.spec.helpers:
            metadata |= {"helpers": sorted(self.context), "helper_effect": self.spec.helper_effect}
            if self.rechecks:
                metadata["rechecks"] = self.rechecks
        if self.reflecting:
            metadata["reflect"] = True
        return LlmRequest(
            role=self.spec.tool_role,
            messages=[ChatMessage(role="system", content=system), *self.transcript],
            tools=[] if self.spec.tool_calls == "text" or self.reflecting else self.tools,
            metadata=metadata,
        )


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
