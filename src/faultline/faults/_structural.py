"""Response rewriting without a model (MAS-FIRE structure-level mutations).

`memory_loss` and `context_length_violation` act on what an agent works from:
the messages of its own model requests (kind `llm_request`: every turn after the
system prompt, which stays, so the agent keeps its role), and the conversation
it hands on (a `ContextRequest`'s transcript, which is how the tool agent shares
its history with helpers). `parameter_format_error` breaks a tool call's syntax:
its JSON, an argument's type, a required argument, or an argument's name.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

from faultline.core import ContextRequest, Envelope, ToolCall
from faultline.faults._registry import REQUEST_KIND, FaultSite, FaultType, register_fault

_HISTORY = frozenset({"context_request", REQUEST_KIND})


def _history(messages: list[dict[str, Any]]) -> int:
    """Where a request's conversation starts: after its leading system messages."""
    return next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))


def _answered(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`turns` without tool results whose call was dropped (a model API refuses such a request)."""
    calls = {c.get("id") for t in turns for c in t.get("tool_calls", ())}
    return [t for t in turns if t.get("role") != "tool" or t.get("tool_call_id", "") in calls]


class MemoryLossParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    strategy: Literal["earliest", "latest", "role"] = "earliest"
    """Which turns go: the first `turns`, the last `turns`, or every turn of `role`."""
    turns: Annotated[int, msgspec.Meta(ge=1)] = 2
    role: str = "tool"


@register_fault
class MemoryLoss(FaultType):
    name = "memory_loss"
    summary = "drop turns from an agent's history, in its model request or handed on (earliest, latest, one role's)"
    mechanism = "structural"
    kinds = _HISTORY
    Params = MemoryLossParams

    def apply(self, env: Envelope, params: MemoryLossParams, site: FaultSite) -> list[Envelope] | None:
        body = env.body
        assert isinstance(body, ContextRequest)
        kept = self.dropped(body.transcript, params)
        if len(kept) == len(body.transcript):
            return None
        return [msgspec.structs.replace(env, body=msgspec.structs.replace(body, transcript=kept))]

    def apply_request(self, messages: list[dict[str, Any]], params: MemoryLossParams) -> list[dict[str, Any]] | None:
        start = _history(messages)
        kept = messages[:start] + _answered(self.dropped(messages[start:], params))
        return kept if len(kept) < len(messages) else None

    @staticmethod
    def dropped(turns: list[dict[str, Any]], params: MemoryLossParams) -> list[dict[str, Any]]:
        if params.strategy == "earliest":
            return turns[params.turns :]
        if params.strategy == "latest":
            return turns[: -params.turns]
        return [t for t in turns if t.get("role") != params.role]


class ContextLengthParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    keep_chars: Annotated[int, msgspec.Meta(ge=0)] = 24
    """Characters of each turn's content that survive the compression."""


COMPRESSED = " [...]"
"""What marks a turn cut short by `context_length_violation`."""


@register_fault
class ContextLengthViolation(FaultType):
    name = "context_length_violation"
    summary = "compress every turn of an agent's history (its model request or handed on) to `keep_chars` characters"
    mechanism = "structural"
    kinds = _HISTORY
    Params = ContextLengthParams

    def apply(self, env: Envelope, params: ContextLengthParams, site: FaultSite) -> list[Envelope] | None:
        body = env.body
        assert isinstance(body, ContextRequest)
        turns = self.compressed(body.transcript, params)
        if turns == body.transcript:
            return None
        return [msgspec.structs.replace(env, body=msgspec.structs.replace(body, transcript=turns))]

    def apply_request(self, messages: list[dict[str, Any]], params: ContextLengthParams) -> list[dict[str, Any]] | None:
        start = _history(messages)
        turns = messages[:start] + self.compressed(messages[start:], params)
        return turns if turns != messages else None

    @staticmethod
    def compressed(turns: list[dict[str, Any]], params: ContextLengthParams) -> list[dict[str, Any]]:
        cut = params.keep_chars
        return [
            t | {"content": t["content"][:cut] + COMPRESSED}
            if isinstance(t.get("content"), str) and len(t["content"]) > cut
            else t
            for t in turns
        ]


FORMAT_ERRORS = ("json", "missing", "type", "alias")


class FormatParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    mode: Literal["any", "json", "missing", "type", "alias"] = "any"
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


def malformed(arguments: dict[str, Any]) -> str:
    """The arguments' JSON with its closing brace lost and a quote unescaped: text no parser takes."""
    text = json.dumps(arguments, sort_keys=True)
    return text[:-1].replace('"', '\\"', 1) if arguments else "{"


@register_fault
class ParameterFormatError(FaultType):
    name = "parameter_format_error"
    summary = "break a tool call's syntax: malformed JSON, an argument missing, of the wrong type or renamed"
    mechanism = "structural"
    kinds = frozenset({"tool_call"})
    Params = FormatParams

    def apply(self, env: Envelope, params: FormatParams, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        mode = params.mode if params.mode != "any" else site.rng.choice(FORMAT_ERRORS)
        if mode == "json":
            error = f"unterminated object: {malformed(call.arguments)}"
            body = ToolCall(call_id=call.call_id, name=call.name, arguments_error=error)
            return [msgspec.structs.replace(env, body=body)]
        if not call.arguments:
            return None
        key = params.field if params.field in call.arguments else site.rng.choice(sorted(call.arguments))
        arguments = dict(call.arguments)
        value = arguments.pop(key)
        if mode == "type":
            arguments[key] = _wrong_type(value)
        elif mode == "alias":
            arguments[_alias(key)] = value
        body = ToolCall(call_id=call.call_id, name=call.name, arguments=arguments)
        return [msgspec.structs.replace(env, body=body)]
