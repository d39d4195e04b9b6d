"""The catalogue of fault types, and what a fault type works with: the rule that names it
(checked against the catalogue) and the `FaultSite` it rewrites a message at. A new fault type
is one class: subclass `FaultType`, give it a `name`, a `Params` struct and `apply` (or
`rewrite`), and decorate it with `register_fault`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec

from faultline import _numbers as numbers
from faultline._errors import FaultRuleError, ModelError
from faultline.core import Envelope, LlmRequest, LlmResponse, System, ToolCall, derive_id

MATCH_FIELDS = ("episode", "sender", "recipient", "kind", "topic")
REQUEST_KIND = "llm_request"
"""The kind a rule matches an agent's own model request by (sender: the agent; no recipient, no topic)."""


class NoParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The parameters of a fault type that takes none."""


_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!-]{1,64}")
"""What a match field may be: a name (a subject token, `Subjects`) or an fnmatch pattern of names."""


class FaultRule(msgspec.Struct, frozen=True, kw_only=True):
    """One fault rule, as it travels in a `Control` body and as `faultline faults list` shows it.

    It names a registered fault type, matches messages on episode, sender, recipient, kind and
    topic (shell-style patterns, empty = any), and carries the type's parameters, a probability,
    a budget (most applications, 0 = no limit) and an expiry (absolute unix time, 0 = never).
    """

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
    run: str = ""
    """Only the episodes of this run (`in_run`: those whose start records it, or, where a start records none, whose
    id begins with it and "-"), besides what `episode` matches: `run --fault` scopes its rules so, since an id that
    begins with a run's may be another run's (`c1-1-x-...` of run `c1-1-x`)."""

    def validated(self, named: str = "") -> FaultRule:
        """This rule with its parameters in canonical form, if its fault type exists and its
        fields make sense; else FaultRuleError, naming the rule `named`: as its user wrote it
        (default: its fault type), never by an id the user may not have given."""
        named = named or self.fault
        if not self.id or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", self.id):
            raise FaultRuleError(f"{named}: rule id {self.id!r}: use 1-64 letters, digits, '.', ':', '-' or '_'")
        params = msgspec.to_builtins(fault_type(self.fault).params(self.params, named))
        for name in MATCH_FIELDS:
            pattern = getattr(self, name)
            if pattern and not _PATTERN.fullmatch(pattern):
                raise FaultRuleError(
                    f"{named}: {name} {pattern!r} can match nothing: names are 1-64 letters, digits, '-' or '_',"
                    " and a pattern adds the wildcards * ? [ ]"
                )
        if not 0.0 <= self.probability <= 1.0:
            raise FaultRuleError(f"{named}: probability {self.probability} is not between 0 and 1")
        if self.budget < 0:
            raise FaultRuleError(f"{named}: budget {self.budget} is negative (0 means no limit)")
        return msgspec.structs.replace(self, params=params)

    def matches(self) -> str:
        """The match fields that are set, as `field=pattern` words (for listings)."""
        words = [f"{name}={getattr(self, name)}" for name in MATCH_FIELDS if getattr(self, name)]
        return " ".join([*words, *([f"run={self.run}"] if self.run else [])]) or "*"


class EpisodeCatalog(Protocol):
    """What faults may know about an episode's task, from its Start data (domain, task).

    Supplied by the runtime; the faults package itself knows nothing of domains.
    """

    def tools(self, start: Mapping[str, Any]) -> list[str]: ...

    def plan(self, start: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]: ...

    def instruction(self, start: Mapping[str, Any]) -> str: ...


Injector = Callable[[Envelope, LlmRequest], Awaitable[LlmResponse]]
"""The runtime's fault-injector model: asks `request` in the context of the agent that sent the
envelope, recorded in the journal like the agent's own calls."""


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
    agent_params: ClassVar[tuple[str, ...]] = ()
    """Its parameters that name agents (lists of names), which a rule is checked by against the agents of the
    system it is for (`check_agents`): a name none of them has would leave the rule without effect."""
    needs_plan: ClassVar[bool] = False
    """It takes what it sends from the task's gold actions (`FaultSite.plan`), which only a domain's tasks have:
    on a system of one's own it would never apply."""

    def params(self, raw: Mapping[str, Any], named: str = "") -> Any:
        """`raw` as this type's `Params`; else FaultRuleError, naming the rule `named` (default: this type).

        A number given as text (`run --fault storm:copies=3`) is read as the CLI reads its numeric flags, so a
        wrong one names the parameter, the value and what it takes."""
        given = dict(raw)
        for f in msgspec.structs.fields(self.Params):
            value = given.get(f.name)
            read = numbers.reader(f.type)
            if isinstance(value, str) and read is not None:
                try:
                    given[f.name] = read(value)
                except ValueError as exc:
                    raise FaultRuleError(f"{named or self.name}: {f.name}: {exc}") from None
        try:
            return msgspec.convert(given, self.Params, strict=False)
        except msgspec.ValidationError as exc:
            raise FaultRuleError(f"{named or self.name}: {str(exc).replace('`', '')}") from None

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        raise NotImplementedError

    async def rewrite(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        """What `apply_fault` calls: `apply`, unless the type needs a model (it then raises
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
    user's instruction), and `call_order_swap` follows the task's gold actions; other types rewrite only their `kinds`, which the system may never send
    (`System.sends`). A fault on model requests applies to any agent that calls a model.
    """
    fault = fault_type(name)
    if fault.mechanism == "prompt":
        return (
            f"{name} changes the system prompt or instruction the built-in tool-use agents read from their Start;"
            f" the agents of system {system.name!r} build their own prompts"
        )
    if fault.needs_plan:
        return (
            f"{name} sends the task's next gold action, and only a domain's tasks have them; system"
            f" {system.name!r} runs input records"
        )
    if not fault.kinds or REQUEST_KIND in fault.kinds or fault.kinds & system.sends:
        return ""
    return (
        f"{name} rewrites {', '.join(sorted(fault.kinds))} messages and system {system.name!r} sends none"
        f" (it sends {', '.join(sorted(system.sends))}; System.sends says so)"
    )
