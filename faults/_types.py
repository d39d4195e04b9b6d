"""The fault types that ship with Faultline, one class each.

Message routing (MAS-FIRE, communication faults): `cycle` sends a message back
to its sender, `storm` adds copies, `broadcast` also delivers to agents it was
not meant for. None of them changes a message's content.

Tool-call perturbations (structured reflection): each replaces the tool call
an agent made at a step by a wrong one, keeping its call id, so the agent gets
an answer to a call it did not make and must notice: `call_order_swap` (the
task's next call instead), `redundant_call` (the agent's previous call again),
`missing_call` (another tool instead of the intended one) and `argument_error`
(one argument missing, of the wrong type, under an alias, or a boundary value).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

from faultline.core import Envelope, ToolCall, derive_id
from faultline.faults._rules import FaultSite, FaultType, register_fault

MAX_COPIES = 100
"""Most copies one `storm` or `broadcast` may add to a message."""

_TOOL_CALL = frozenset({"tool_call"})


# -- message routing -----------------------------------------------------------------------------


@register_fault
class Cycle(FaultType):
    name = "cycle"
    summary = "redirect a message back to its sender"

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        if env.recipient == env.sender:
            return None
        return [msgspec.structs.replace(env, recipient=env.sender, topic="")]


class StormParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    copies: Annotated[int, msgspec.Meta(ge=1, le=MAX_COPIES)] = 5


@register_fault
class Storm(FaultType):
    name = "storm"
    summary = "deliver a message and `copies` duplicates of it (new ids)"
    Params = StormParams

    def apply(self, env: Envelope, params: StormParams, site: FaultSite) -> list[Envelope] | None:
        copies = [msgspec.structs.replace(env, id=derive_id(env.id, i, "storm")) for i in range(1, params.copies + 1)]
        return [env, *copies]


class BroadcastParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    targets: Annotated[list[str], msgspec.Meta(max_length=MAX_COPIES)] = []
    """Agents that also get the message; empty: every agent of the deployment but sender and recipient."""


@register_fault
class Broadcast(FaultType):
    name = "broadcast"
    summary = "also deliver a message to agents it was not meant for"
    Params = BroadcastParams

    def apply(self, env: Envelope, params: BroadcastParams, site: FaultSite) -> list[Envelope] | None:
        pool = params.targets or site.agents
        targets = [a for a in dict.fromkeys(pool) if a not in (env.sender, env.recipient)]
        if not targets:
            return None
        copies = [
            msgspec.structs.replace(env, id=derive_id(env.id, i, "bcast"), recipient=agent, topic="")
            for i, agent in enumerate(targets, start=1)
        ]
        return [env, *copies]


# -- tool-call perturbations -----------------------------------------------------------------------


def _replaced(env: Envelope, call: ToolCall, name: str, arguments: dict[str, Any]) -> list[Envelope]:
    body = ToolCall(call_id=call.call_id, name=name, arguments=arguments)
    return [msgspec.structs.replace(env, body=body)]


@register_fault
class CallOrderSwap(FaultType):
    name = "call_order_swap"
    summary = "replace a tool call by the task's next call (needs the episode's plan)"
    kinds = _TOOL_CALL

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        plan = site.plan()
        at = next((i for i, (n, a) in enumerate(plan) if n == call.name and a == call.arguments), None)
        if at is None:
            at = next((i for i, (n, _) in enumerate(plan) if n == call.name), None)
        if at is None or at + 1 >= len(plan):
            return None
        name, arguments = plan[at + 1]
        return _replaced(env, call, name, dict(arguments))


class RedundantParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arguments: Literal["unchanged", "irrelevant"] = "unchanged"
    """The repeated call's arguments: its own, or the ones the agent meant for this step."""


@register_fault
class RedundantCall(FaultType):
    name = "redundant_call"
    summary = "replace a tool call by the agent's previous call, repeated"
    kinds = _TOOL_CALL
    Params = RedundantParams

    def apply(self, env: Envelope, params: RedundantParams, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        if not site.calls:
            return None
        previous = site.calls[-1]
        arguments = previous.arguments if params.arguments == "unchanged" else call.arguments
        return _replaced(env, call, previous.name, dict(arguments))


class MissingParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str = ""
    """The tool called instead; empty: the most similar other tool of the domain (or of the agent's calls)."""


def _similarity(a: str, b: str) -> int:
    return len(set(a.split("_")) & set(b.split("_")))


@register_fault
class MissingCall(FaultType):
    name = "missing_call"
    summary = "replace the intended tool by another one (same arguments)"
    kinds = _TOOL_CALL
    Params = MissingParams

    def apply(self, env: Envelope, params: MissingParams, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        if params.tool:
            other = params.tool
        else:
            pool = site.tools() or [c.name for c in site.calls]
            candidates = sorted({t for t in pool if t != call.name})
            if not candidates:
                return None
            best = max(_similarity(call.name, t) for t in candidates)
            other = site.rng.choice([t for t in candidates if _similarity(call.name, t) == best])
        return _replaced(env, call, other, dict(call.arguments))


ARGUMENT_ERRORS = ("missing", "type", "alias", "boundary")


class ArgumentParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    mode: Literal["any", "missing", "type", "alias", "boundary"] = "any"
    field: str = ""
    """The argument to corrupt; empty: one drawn from the call's arguments."""


def _wrong_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return int(value) if value.isdigit() else [value]
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return 0


def _alias(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest) if rest else f"{key}_value"


def _boundary(value: Any, rng: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([-1, 0, 2**31 - 1])
    if isinstance(value, float):
        return rng.choice([-1.0, 0.0, 1e308])
    if isinstance(value, str):
        return rng.choice(["", "0", value * 64])
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    return ""


@register_fault
class ArgumentError(FaultType):
    name = "argument_error"
    summary = "corrupt one argument of a tool call: missing, wrong type, alias or boundary value"
    kinds = _TOOL_CALL
    Params = ArgumentParams

    def apply(self, env: Envelope, params: ArgumentParams, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        if not call.arguments:
            return None
        key = params.field if params.field in call.arguments else site.rng.choice(sorted(call.arguments))
        mode = params.mode if params.mode != "any" else site.rng.choice(ARGUMENT_ERRORS)
        arguments = dict(call.arguments)
        value = arguments.pop(key)
        if mode == "type":
            arguments[key] = _wrong_type(value)
        elif mode == "alias":
            arguments[_alias(key)] = value
        elif mode == "boundary":
            arguments[key] = _boundary(value, site.rng)
        return _replaced(env, call, call.name, arguments)
