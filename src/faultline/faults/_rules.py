"""Fault rules: which messages to fault, how, how often, and for how long.

A rule names a registered fault type, matches messages on episode, sender,
recipient, kind and topic (shell-style patterns, empty = any), and carries the
type's parameters, a probability, a budget (most applications, 0 = no limit)
and an expiry (absolute unix time, 0 = never). Rules live on `fl.ctl.faults`
as `Control` bodies (`add`, `remove`, `clear`), so they are journaled like
everything else and a worker rebuilds the current set by reading that subject
from the stream, then follows it live.

The `FaultInterceptor` applies rules to what a worker publishes: one fault at
most per message, from the first rule (in the order they were added) that
matches, draws under its probability, has budget left and applies. The draw and
every random choice of the fault are seeded from (rule id, message id), so a
campaign is repeatable. Each applied fault is journaled as `FaultApplied` with
the original message and the messages that went out instead.

A fault whose rewrite needs a model (the semantic ones) overrides `rewrite`
and asks `site.llm`, the runtime's injector: a model call made through the
sending agent's context with role `injector`, so it is recorded in the journal.
When the injector fails (a refusal, a malformed answer, a backend error) the
message goes out unchanged and `FaultSkipped` is journaled instead: a fault is
applied whole or not at all.

A new fault type is one class: subclass `FaultType`, give it a `name`, a
`Params` struct and `apply` (or `rewrite`), and decorate it with `register_fault`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec

from faultline._errors import FaultRuleError, ModelError
from faultline.core import (
    ChatMessage,
    Context,
    Control,
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
    System,
    ToolCall,
    body_kind,
    derive_id,
)

FAULTS_CONTROL = "faults"
"""The control name of fault rules: they travel on `fl.ctl.faults`."""
CONTROL_EPISODE = "control"
"""The episode field of control-plane envelopes (they belong to no episode)."""
OPERATOR = "operator"
"""The sender of control-plane envelopes published from the command line."""

MATCH_FIELDS = ("episode", "sender", "recipient", "kind", "topic")
REQUEST_KIND = "llm_request"
"""The kind a rule matches an agent's own model request by (sender: the agent; no recipient, no topic)."""
MATCH_CACHE_SIZE = 4096
"""How many (episode, sender, recipient, kind, topic) combinations keep their matching rules cached."""


class NoParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The parameters of a fault type that takes none."""


_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!-]{1,64}")
"""What a match field may be: a name (a subject token, `Subjects`) or an fnmatch pattern of names."""


class FaultRule(msgspec.Struct, frozen=True, kw_only=True):
    """One fault rule, as it travels in a `Control` body and as `faultline faults list` shows it."""

    id: str
    fault: str
    episode: str = ""
    sender: str = ""
    recipient: str = ""
    kind: str = ""
    topic: str = ""
    params: dict[str, Any] = {}
    probability: float = 1.0
    budget: int = 0
    expires_at: float = 0.0
    created_at: float = 0.0
    message: str = ""
    """Only the message (or model call) of this id: a fault injected into one known message."""
    spare: list[str] = []
    """Ids of messages this rule leaves alone: faults a fork undid."""

    def validated(self) -> FaultRule:
        """This rule with its parameters in canonical form, if its fault type exists and its
        fields make sense; else FaultRuleError."""
        if not self.id or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", self.id):
            raise FaultRuleError(f"rule id {self.id!r}: use 1-64 letters, digits, '.', ':', '-' or '_'")
        params = msgspec.to_builtins(fault_type(self.fault).params(self.params))
        for name in MATCH_FIELDS:
            pattern = getattr(self, name)
            if pattern and not _PATTERN.fullmatch(pattern):
                raise FaultRuleError(
                    f"rule {self.id}: {name} {pattern!r} can match nothing: names are 1-64 letters, digits, '-' or '_',"
                    " and a pattern adds the wildcards * ? [ ]"
                )
        if not 0.0 <= self.probability <= 1.0:
            raise FaultRuleError(f"rule {self.id}: probability {self.probability} is not between 0 and 1")
        if self.budget < 0:
            raise FaultRuleError(f"rule {self.id}: budget {self.budget} is negative (0 means no limit)")
        return msgspec.structs.replace(self, params=params)

    def matches(self) -> str:
        """The match fields that are set, as `field=pattern` words (for listings)."""
        return " ".join(f"{name}={getattr(self, name)}" for name in MATCH_FIELDS if getattr(self, name)) or "*"


# -- fault types ---------------------------------------------------------------------------------


class EpisodeCatalog(Protocol):
    """What faults may know about an episode's task, from its Start data (domain, task).

    Supplied by the runtime; the bus itself knows nothing of domains.
    """

    def tools(self, start: Mapping[str, Any]) -> list[str]: ...

    def plan(self, start: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]: ...

    def instruction(self, start: Mapping[str, Any]) -> str: ...


Injector = Callable[[Envelope, LlmRequest], Awaitable[LlmResponse]]
"""The runtime's fault-injector model: asks `request` in the context of the agent that sent the
envelope, recorded in the journal like the agent's own calls."""


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


@dataclass
class FaultSite:
    """Everything a fault type may consult when it rewrites one message."""

    rule: FaultRule
    rng: random.Random
    agents: Sequence[str] = ()
    """Every agent the deployment runs (broadcast targets)."""
    calls: Sequence[ToolCall] = ()
    """The sender's earlier tool calls in this episode, as it made them."""
    start: Mapping[str, Any] = field(default_factory=dict)
    """The episode's Start data as this worker saw it ({} if it saw none)."""
    catalog: EpisodeCatalog | None = None
    injector: Injector | None = None

    def tools(self) -> list[str]:
        return self.catalog.tools(self.start) if self.catalog and self.start else []

    def plan(self) -> list[tuple[str, dict[str, Any]]]:
        return self.catalog.plan(self.start) if self.catalog and self.start else []

    def instruction(self, start: Mapping[str, Any]) -> str:
        """The task instruction of the episode `start` describes ("" if unknown)."""
        return self.catalog.instruction(start) if self.catalog and start else ""

    async def llm(self, env: Envelope, request: LlmRequest) -> LlmResponse:
        """Ask the injector model about `env`; ModelError if this worker has none.

        The call is made for `env` under the id `derive_id(env.id, 0, "injector")`, so its
        recording's id and causation never meet those of an agent that handles `env` itself."""
        if self.injector is None:
            raise ModelError("no fault-injector model on this worker")
        return await self.injector(msgspec.structs.replace(env, id=derive_id(env.id, 0, "injector")), request)


class FaultType:
    """A way to fault a message. `apply` returns the messages that go out instead, or None
    when the fault does not apply to this message (it is then passed unchanged and the rule's
    budget is not used)."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    mechanism: ClassVar[str] = ""
    """How it is injected: one of `MECHANISMS`."""
    Params: ClassVar[type[msgspec.Struct]] = NoParams
    kinds: ClassVar[frozenset[str]] = frozenset()
    """Body kinds the fault applies to; empty means every direct or topic message. `REQUEST_KIND`
    among them: it also applies to an agent's own model requests (`apply_request`)."""

    def params(self, raw: Mapping[str, Any]) -> Any:
        try:
            return msgspec.convert(dict(raw), self.Params, strict=False)
        except msgspec.ValidationError as exc:
            raise FaultRuleError(f"{self.name}: {str(exc).replace('`', '')}") from None

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        raise NotImplementedError

    async def rewrite(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        """What the interceptor calls: `apply`, unless the type needs a model (it then raises
        ModelError when the model cannot make the fault)."""
        return self.apply(env, params, site)

    def apply_request(self, messages: list[dict[str, Any]], params: Any) -> list[dict[str, Any]] | None:
        """The messages a model request of the agent sends instead of `messages` (plain data),
        or None when the fault does not apply to them. Only for types whose kinds hold `REQUEST_KIND`."""
        raise NotImplementedError


MECHANISMS = ("prompt", "structural", "semantic", "routing", "tool_call")
"""Injection mechanisms: prompt modification, response rewriting (structural, without a model;
semantic, by the injector model), message routing, and the structured-reflection tool-call
perturbations that are not in the MAS-FIRE taxonomy."""

MASFIRE_FAULTS = (
    "role_ambiguity",
    "blind_trust",
    "instruction_logic_conflict",
    "instruction_ambiguity",
    "memory_loss",
    "context_length_violation",
    "parameter_format_error",
    "hallucination",
    "inexecutable_plan",
    "critical_information_loss",
    "tool_selection_error",
    "parameter_filling_error",
    "cycle",
    "storm",
    "broadcast",
)
"""The 15 fault types of the MAS-FIRE taxonomy by their registered names, grouped by mechanism
(prompt, structural, semantic, routing): what a campaign over "all" faults runs."""

_REGISTRY: dict[str, FaultType] = {}

F = TypeVar("F", bound=type[FaultType])


def register_fault(cls: F) -> F:
    """Class decorator: make a fault type available to rules under `cls.name`."""
    if cls.mechanism not in MECHANISMS:
        raise FaultRuleError(f"fault type {cls.name!r}: mechanism {cls.mechanism!r} is not one of {MECHANISMS}")
    _REGISTRY[cls.name] = cls()
    return cls


def fault_type(name: str) -> FaultType:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise FaultRuleError(f"unknown fault type {name!r} (known: {', '.join(sorted(_REGISTRY))})") from None


def fault_types() -> dict[str, FaultType]:
    """Every registered fault type by name."""
    return dict(_REGISTRY)


def why_not_on(name: str, system: System) -> str:
    """Why fault type `name` cannot apply to a run of a system of one's own ("" when it can).

    Prompt faults change what the built-in agents read from their Start (a system prompt, the
    user's instruction); other types rewrite only their `kinds`, which the system may never send
    (`System.sends`). A fault on model requests applies to any agent that calls a model.
    """
    fault = fault_type(name)
    if fault.mechanism == "prompt":
        return (
            f"{name} changes the system prompt or instruction the built-in tool-use agents read from their Start;"
            f" the agents of system {system.name!r} build their own prompts"
        )
    if not fault.kinds or REQUEST_KIND in fault.kinds or fault.kinds & system.sends:
        return ""
    return (
        f"{name} rewrites {', '.join(sorted(fault.kinds))} messages and system {system.name!r} sends none"
        f" (it sends {', '.join(sorted(system.sends))}; System.sends says so)"
    )


# -- the current rule set ------------------------------------------------------------------------


def _pattern(text: str) -> Callable[[str], bool] | None:
    if not text:
        return None
    if not any(c in text for c in "*?["):
        return text.__eq__
    return re.compile(fnmatch.translate(text)).match  # type: ignore[return-value]


@dataclass
class _Active:
    """A rule in force, with its parameters converted and its match compiled.

    `checks` are (index into `_match_values`, predicate) pairs, the fault type's
    kinds first. What matches depends on those five values only, so the rule set
    caches it per combination.
    """

    rule: FaultRule
    type: FaultType
    params: Any
    checks: tuple[tuple[int, Callable[[str], bool]], ...]

    @classmethod
    def of(cls, rule: FaultRule) -> _Active:
        kind = fault_type(rule.fault)
        checks = [(i, check) for i, name in enumerate(MATCH_FIELDS) if (check := _pattern(getattr(rule, name)))]
        if kind.kinds:
            checks.insert(0, (MATCH_FIELDS.index("kind"), kind.kinds.__contains__))
        return cls(rule, kind, kind.params(rule.params), tuple(checks))


def _match_values(env: Envelope) -> tuple[str, ...]:
    """The envelope's values for MATCH_FIELDS, in that order."""
    return (env.episode, env.sender, env.recipient, body_kind(env.body), env.topic)


def draw(rule_id: str, message_id: str) -> float:
    """A number in [0, 1) fixed by (rule, message): the same campaign faults the same messages."""
    h = hashlib.blake2b(f"{rule_id}/{message_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


class RuleSet:
    """The rules in force, rebuilt from `fl.ctl.faults` controls, with the budget each has used.

    Applications are counted per rule by original message id, from this worker's own
    faults and from the fault events of every worker, so a budget holds across workers
    (a few messages faulted at the same instant by two workers may overshoot it).
    """

    def __init__(self) -> None:
        self._active: dict[str, _Active] = {}
        self.in_force: tuple[_Active, ...] = ()
        """The rules in force in the order they were added (empty: nothing to do)."""
        self._matching: dict[tuple[str, ...], tuple[_Active, ...]] = {}
        self._applied: dict[str, set[str]] = {}
        self.seen: dict[str, int] = {}
        """Fault events seen per rule id (what `faults list` reports)."""
        self.last_seq = 0
        """Stream sequence of the last control or fault event taken in."""

    def __len__(self) -> int:
        return len(self._active)

    @property
    def rules(self) -> list[FaultRule]:
        return [a.rule for a in self._active.values()]

    def control(self, body: Control) -> None:
        """Take in one `fl.ctl.faults` command; a malformed or unknown one is ignored."""
        op = body.data.get("op")
        if op == "add":
            try:
                rule = msgspec.convert(body.data.get("rule"), FaultRule)
                active = _Active.of(rule.validated())
            except (msgspec.ValidationError, FaultRuleError):
                return
            self._active.pop(rule.id, None)  # re-adding moves it to the end and resets its budget
            self._active[rule.id] = active
            self._applied[rule.id] = set()
            self.seen[rule.id] = 0
        elif op == "remove":
            rule_id = str(body.data.get("id", ""))
            self._active.pop(rule_id, None)
            self._applied.pop(rule_id, None)
        elif op == "clear":
            self._active.clear()
            self._applied.clear()
        self.in_force = tuple(self._active.values())
        self._matching.clear()

    def count(self, event: FaultApplied) -> None:
        """Take in a fault event (this worker's or another's)."""
        if event.rule_id in self._active:
            self.seen[event.rule_id] = self.seen.get(event.rule_id, 0) + 1
            original = event.original.get("id")
            if self._active[event.rule_id].rule.budget and isinstance(original, str):
                self._applied[event.rule_id].add(original)

    def applied(self, rule_id: str) -> int:
        return len(self._applied.get(rule_id, ()))

    def candidates(self, env: Envelope, now: float) -> list[_Active]:
        """Rules that match `env`, are in force at `now`, draw under their probability and have budget."""
        return self.matching(_match_values(env), env.id, now)

    def matching(self, values: tuple[str, ...], message_id: str, now: float) -> list[_Active]:
        """`candidates` for what has the match `values` (in `MATCH_FIELDS` order) and id `message_id`."""
        matching = self._matching.get(values)
        if matching is None:
            if len(self._matching) >= MATCH_CACHE_SIZE:
                self._matching.clear()
            matching = self._matching[values] = tuple(
                a for a in self.in_force if all(check(values[i]) for i, check in a.checks)
            )
        hits = []
        for active in matching:
            rule = active.rule
            if rule.expires_at and now >= rule.expires_at:
                continue
            if (rule.message and rule.message != message_id) or message_id in rule.spare:
                continue
            if rule.probability < 1.0 and draw(rule.id, message_id) >= rule.probability:
                continue
            if rule.budget and len(self._applied[rule.id]) >= rule.budget:
                continue
            hits.append(active)
        return hits

    def use(self, rule_id: str, message_id: str) -> None:
        if self._active[rule_id].rule.budget:
            self._applied[rule_id].add(message_id)


# -- the interceptor ---------------------------------------------------------------------------------


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

    It also watches inbound Start messages for the episode's Start data and outbound tool
    calls for each sender's call history, which some fault types consult.
    """

    def __init__(
        self,
        rules: RuleSet,
        *,
        agents: Sequence[str] = (),
        catalog: EpisodeCatalog | None = None,
        injector: Injector | None = None,
    ) -> None:
        self.rules = rules
        self.agents = tuple(agents)
        self.catalog = catalog
        self.injector = injector
        self._starts: dict[str, Mapping[str, Any]] = {}
        self._calls: dict[tuple[str, str], list[ToolCall]] = {}

    def observe(self, env: Envelope) -> None:
        """Take in a message of an episode without faulting it: a Start's data, a sender's tool call."""
        body = env.body
        if isinstance(body, Start) and body.data:
            self._starts.setdefault(env.episode, body.data)
        elif isinstance(body, ToolCall):
            self._calls.setdefault((env.episode, env.sender), []).append(body)

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        if isinstance(message.envelope.body, Start):
            self.observe(message.envelope)
        return (message.envelope,)

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        env = message.envelope
        body = env.body
        if isinstance(body, ToolCall):
            calls = self._calls.setdefault((env.episode, env.sender), [])
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
        self, message: Envelope, agent: str, index: int, request: LlmRequest
    ) -> tuple[LlmRequest, Envelope | None]:
        """What model call `index` of `agent` handling `message` sends: `request`, or what the first
        rule on model requests that applies makes of it, with that fault's event."""
        if not self.rules.in_force:
            return request, None
        call_id = derive_id(message.id, index, REQUEST_KIND)
        values = (message.episode, agent, "", REQUEST_KIND, "")
        messages: list[dict[str, Any]] | None = None
        for active in self.rules.matching(values, call_id, time.time()):
            if REQUEST_KIND not in active.type.kinds:
                continue
            messages = messages or [msgspec.to_builtins(m) for m in request.messages]
            faulted = active.type.apply_request(messages, active.params)
            if faulted is None:
                continue
            self.rules.use(active.rule.id, call_id)
            event = request_fault_event(active.rule, message, agent, index, messages, faulted)
            return msgspec.structs.replace(request, messages=msgspec.convert(faulted, list[ChatMessage])), event
        return request, None

    def request_fault(self, store: Callable[[Envelope], Awaitable[None]]) -> RequestFault:
        """These rules on an agent's own model requests, as a `Recorder` applies them: a faulted
        request goes out, its fault event handed to `store` before the call."""

        async def fault(ctx: Context, index: int, request: LlmRequest) -> LlmRequest:
            sent, event = self.request(ctx.message, ctx.agent, index, request)
            if event is not None:
                await store(event)
            return sent

        return fault

    def forget(self, episode: str) -> None:
        self._starts.pop(episode, None)
        for key in [k for k in self._calls if k[0] == episode]:
            del self._calls[key]


# -- control-plane messages ------------------------------------------------------------------------


def _control(data: dict[str, Any], nonce: str) -> Envelope:
    return Envelope(
        id=f"ctl-{nonce}",
        episode=CONTROL_EPISODE,
        sender=OPERATOR,
        body=Control(name=FAULTS_CONTROL, data=data),
        ts=time.time(),
    )


def add_rule_control(rule: FaultRule, nonce: str) -> Envelope:
    """The control envelope that puts `rule` in force (`nonce` makes its id unique)."""
    return _control({"op": "add", "rule": msgspec.to_builtins(rule.validated())}, nonce)


def remove_rule_control(rule_id: str, nonce: str) -> Envelope:
    return _control({"op": "remove", "id": rule_id}, nonce)


def clear_rules_control(nonce: str) -> Envelope:
    return _control({"op": "clear"}, nonce)
