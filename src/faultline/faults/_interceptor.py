"""Applying fault rules to messages: the `FaultInterceptor` faults what a worker publishes and
an agent's own model requests, `apply_fault` makes one rule's fault of one message (for the
interceptor and for a fork), and the events journal each fault applied or skipped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from faultline._errors import ModelError
from faultline.core import (
    ChatMessage,
    Context,
    Envelope,
    FaultApplied,
    FaultSkipped,
    Inbound,
    Interceptor,
    LlmRequest,
    LlmResponse,
    Outbound,
    Recorder,
    Recording,
    RequestFault,
    Services,
    Start,
    ToolCall,
    derive_id,
    in_run,
)
from faultline.faults._registry import (
    REQUEST_KIND,
    EpisodeCatalog,
    FaultRule,
    FaultSite,
    FaultType,
    Injector,
    fault_type,
)
from faultline.faults._rules import ActiveRule, RuleSet


def context_injector(
    services: Services,
    store: Callable[[Envelope], Awaitable[None]],
    recorded: Callable[[Envelope], Mapping[int, Recording]] | None = None,
) -> Injector:
    """An `Injector` whose call is made in the context of the agent that sent the faulted message,
    caused by that message, its recording handed to `store` (a worker publishes it, a fork keeps it).

    `recorded` gives the recordings made for that cause before (served, not asked again)."""

    async def ask(env: Envelope, request: LlmRequest) -> LlmResponse:
        recorder = Recorder(recorded=recorded(env) if recorded is not None else {}, services=services, store=store)
        return await Context(agent=env.sender, message=env, recorder=recorder, services=services).llm(request)

    return ask


def fault_event(rule: FaultRule, original: Envelope, results: Sequence[Envelope]) -> Envelope:
    """The `FaultApplied` event of one applied fault, on `fl.ev.fault.<episode>.<sender>`."""
    body = FaultApplied(
        rule_id=rule.id,
        fault=rule.fault,
        original=msgspec.to_builtins(original),
        results=[msgspec.to_builtins(r) for r in results],
    )
    return _event(original, body)


def skipped_event(rule: FaultRule, original: Envelope, reason: str) -> Envelope:
    """The `FaultSkipped` event of a fault that could not be made; `original` went out unchanged."""
    return _event(
        original, FaultSkipped(rule_id=rule.id, fault=rule.fault, original=msgspec.to_builtins(original), reason=reason)
    )


def request_fault_event(
    rule: FaultRule, message: Envelope, agent: str, index: int, original: list[Any], faulted: list[Any]
) -> Envelope:
    """The `FaultApplied` event of a fault on model call `index` of `agent` handling `message`."""
    call_id = derive_id(message.id, index, REQUEST_KIND)
    body = FaultApplied(
        rule_id=rule.id,
        fault=rule.fault,
        original={"id": call_id, "sender": agent, "causation": message.id, "messages": original},
        results=[{"id": call_id, "messages": faulted}],
        model_call=index,
    )
    return Envelope(
        id=derive_id(call_id, 0, "fault"),
        episode=message.episode,
        sender=agent,
        causation=message.id,
        hops=message.hops + 1,
        ts=time.time(),
        body=body,
    )


def _event(original: Envelope, body: FaultApplied | FaultSkipped) -> Envelope:
    return Envelope(
        id=derive_id(original.id, 0, "fault"),
        episode=original.episode,
        sender=original.sender,
        causation=original.id,
        hops=original.hops,
        ts=time.time(),
        body=body,
    )


async def apply_fault(
    rule: FaultRule,
    env: Envelope,
    *,
    fault: FaultType | None = None,
    params: Any = None,
    agents: Sequence[str] = (),
    calls: Sequence[ToolCall] = (),
    start: Mapping[str, Any] | None = None,
    catalog: EpisodeCatalog | None = None,
    injector: Injector | None = None,
) -> list[Envelope] | None:
    """What `rule`'s fault makes of `env` (the messages that go out instead), or None when it does not apply.

    The interceptor applies rules with it on a worker's bus; a fork applies one with it to
    inject a known fault into an episode. `fault` and `params` are the rule's, parsed
    already (else taken from the rule). The fault's randomness is seeded by rule and
    message. Raises ModelError when the type needs a model that cannot make the fault.
    """
    kind = fault or fault_type(rule.fault)
    site = FaultSite(
        rule=rule,
        rng=random.Random(f"{rule.id}/{env.id}"),
        agents=agents,
        calls=tuple(calls),
        start=start or {},
        catalog=catalog,
        injector=injector,
    )
    return await kind.rewrite(env, params if fault is not None else kind.params(rule.params), site)


class FaultInterceptor(Interceptor):
    """Applies the rules of `rules` to every direct or topic message this worker publishes.

    One fault at most per message, from the first rule (in the order they were added) that
    matches, draws under its probability, has budget left and applies; the draw and the fault's
    random choices are seeded from (rule id, message id), so a campaign is repeatable. Each fault
    is journaled as `FaultApplied` with the original message and the messages that went out
    instead; one the injector model cannot make (a refusal, a malformed answer, a backend error)
    as `FaultSkipped`, the message going out unchanged: a fault is applied whole or not at all.

    It also watches inbound Start messages for the episode's Start data and outbound tool
    calls for each sender's call history, which some fault types consult.

    A rule scoped to a run (`FaultRule.run`) faults only that run's episodes (`in_run`): `runs` gives the run an
    episode's start records ("" for none, None when it cannot be told now), asked once per episode, and only for
    an episode some such rule matches otherwise. Without `runs`, or where it cannot tell, the id's prefix decides.
    """

    def __init__(
        self,
        rules: RuleSet,
        *,
        agents: Sequence[str] = (),
        catalog: EpisodeCatalog | None = None,
        injector: Injector | None = None,
        runs: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.rules = rules
        self.agents = tuple(agents)
        self.catalog = catalog
        self.injector = injector
        self._starts: dict[str, Mapping[str, Any]] = {}
        self._calls: dict[str, dict[str, list[ToolCall]]] = {}
        """Each episode's tool calls so far, by sender: an episode is forgotten in one step, however many run."""
        self.runs = runs
        self._runs: dict[str, str] = {}
        """The run each episode's start records, as `runs` told it."""

    async def _recorded(self, episode: str) -> str:
        """The run `episode`'s start records, asked of `runs` until it can tell ("" for none, or while it cannot)."""
        recorded = self._runs.get(episode)
        if recorded is None and self.runs is not None:
            recorded = await self.runs(episode)
            if recorded is not None:
                self._runs[episode] = recorded
        return recorded or ""

    async def _of_run(self, episode: str, run: str) -> bool:
        """Whether `episode` is one of run `run`'s (`in_run`), by what its start records, where that can be told."""
        return in_run(episode, await self._recorded(episode), run)

    def observe(self, env: Envelope) -> None:
        """Take in a message of an episode without faulting it: a Start's data, a sender's tool call."""
        body = env.body
        if isinstance(body, Start) and body.data:
            self._starts.setdefault(env.episode, body.data)
        elif isinstance(body, ToolCall):
            self._calls_of(env).append(body)

    def _calls_of(self, env: Envelope) -> list[ToolCall]:
        return self._calls.setdefault(env.episode, {}).setdefault(env.sender, [])

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        if isinstance(message.envelope.body, Start):
            self.observe(message.envelope)
        return (message.envelope,)

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        env = message.envelope
        body = env.body
        if isinstance(body, ToolCall):
            calls = self._calls_of(env)
            try:
                return await self._fault(message, calls)
            finally:
                self.observe(env)
        if not self.rules.in_force or type(body).route != "direct":
            return (env,)
        return await self._fault(message, ())

    async def _fault(self, message: Outbound, calls: Sequence[ToolCall]) -> Sequence[Envelope]:
        env = message.envelope
        if not self.rules.in_force:
            return (env,)
        for active in self.rules.candidates(env, time.time()):
            if active.rule.run and not await self._of_run(env.episode, active.rule.run):
                continue
            try:
                results = await apply_fault(
                    active.rule,
                    env,
                    fault=active.type,
                    params=active.params,
                    agents=self.agents,
                    calls=calls,
                    start=self._starts.get(env.episode, {}),
                    catalog=self.catalog,
                    injector=self.injector,
                )
            except ModelError as exc:
                message.events.append(skipped_event(active.rule, env, str(exc)))
                return (env,)
            if results is None:
                continue
            self.rules.use(active.rule.id, env.id)
            message.events.append(fault_event(active.rule, env, results))
            return results
        return (env,)

    def request(
        self, message: Envelope, agent: str, index: int, request: LlmRequest, *, recorded: str = ""
    ) -> tuple[LlmRequest, Envelope | None]:
        """What model call `index` of `agent` handling `message` sends: `request`, or what the first
        rule on model requests that applies makes of it, with that fault's event. `recorded` is the run the
        episode's start records (for rules scoped to a run; "": by the id's prefix)."""
        if not self.rules.in_force:
            return request, None
        return self._request(self._request_rules(message, agent, index), message, agent, index, request, recorded)

    def _request_rules(self, message: Envelope, agent: str, index: int) -> list[ActiveRule]:
        """The rules on model requests that match model call `index` of `agent` handling `message`, in order."""
        values = (message.episode, agent, "", REQUEST_KIND, "")
        call_id = derive_id(message.id, index, REQUEST_KIND)
        return [a for a in self.rules.matching(values, call_id, time.time()) if REQUEST_KIND in a.type.kinds]

    def _request(
        self,
        matching: Sequence[ActiveRule],
        message: Envelope,
        agent: str,
        index: int,
        request: LlmRequest,
        recorded: str,
    ) -> tuple[LlmRequest, Envelope | None]:
        """`request` with the first of `matching` that applies to it (see `request`)."""
        messages: list[dict[str, Any]] | None = None
        for active in matching:
            if active.rule.run and not in_run(message.episode, recorded, active.rule.run):
                continue
            messages = messages or [msgspec.to_builtins(m) for m in request.messages]
            faulted = active.type.apply_request(messages, active.params)
            if faulted is None:
                continue
            self.rules.use(active.rule.id, derive_id(message.id, index, REQUEST_KIND))
            event = request_fault_event(active.rule, message, agent, index, messages, faulted)
            return msgspec.structs.replace(request, messages=msgspec.convert(faulted, list[ChatMessage])), event
        return request, None

    def request_fault(self, store: Callable[[Envelope], Awaitable[None]]) -> RequestFault:
        """These rules on an agent's own model requests, as a `Recorder` applies them: a faulted
        request goes out, its fault event handed to `store` before the call. The run an episode's start
        records is asked for only where a rule scoped to a run matches the request."""

        async def fault(ctx: Context, index: int, request: LlmRequest) -> LlmRequest:
            if not self.rules.in_force:
                return request
            matching = self._request_rules(ctx.message, ctx.agent, index)
            recorded = await self._recorded(ctx.message.episode) if any(a.rule.run for a in matching) else ""
            sent, event = self._request(matching, ctx.message, ctx.agent, index, request, recorded)
            if event is not None:
                await store(event)
            return sent

        return fault

    def forget(self, episode: str) -> None:
        self._starts.pop(episode, None)
        self._calls.pop(episode, None)
        self._runs.pop(episode, None)
