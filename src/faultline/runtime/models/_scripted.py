"""`scripted`: a model whose answers a test chooses, from a file of rules or from a Python function.

For tests and examples of a system of one's own: offline, deterministic, and recorded and replayed
like any model call (the agent's context records each answer; replay serves it from the journal).
A rules file (`script = "answers.jsonl"` in `[models.<role>]`) holds one JSON object a line; the
first rule that matches a request answers it:

    {"role": "writer", "contains": "draft", "reply": "Here is the merged draft."}
    {"contains": "weather", "tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}]}
    {"reply": "I do not know."}

`role` must equal the request's role and `contains` must occur in the text of its last message;
a rule without them matches every request. A request that no rule matches fails its call with a
ModelError that names the role and the message, so the episode ends in error with that cause.
`script = "package.module:function"` names a function instead, called with each `LlmRequest`,
that returns the reply's text or a whole `LlmResponse`; it must be a pure function of the request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec

from faultline._errors import ConfigError, ModelError
from faultline.core import (
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    Usage,
    is_import_path,
    load_plugin,
    numbered_lines,
    plugin_error,
)


class ScriptSettings(Protocol):
    """The part of a model role's settings the scripted backend reads."""

    @property
    def script(self) -> str: ...


class ScriptedCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = {}


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One line of a rules file: when it matches (`role`, `contains`) and what it answers."""

    role: str = ""
    contains: str = ""
    reply: str = ""
    tool_calls: list[ScriptedCall] = []

    def matches(self, request: LlmRequest) -> bool:
        return (not self.role or self.role == request.role) and self.contains in _last_text(request)


Script = Callable[[LlmRequest], str | LlmResponse]


def read_rules(path: Path) -> list[Rule]:
    """The rules of a file, each line checked: a bad one is one error naming the file and line."""
    rules = []
    for number, line in numbered_lines(path, label="scripted model: "):
        try:
            rules.append(msgspec.json.decode(line, type=Rule))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ConfigError(f"scripted model: {path}:{number}: {exc}") from None
    if not rules:
        raise ConfigError(f"scripted model: {path}: holds no rule")
    return rules


def load_script(script: str) -> Script | list[Rule]:
    """What `script` names: a function (`package.module:function`) or the rules of a file."""
    if not script:
        raise ConfigError('scripted model: set script = "answers.jsonl" or "package.module:function"')
    if not is_import_path(script):  # a rules file
        return read_rules(Path(script))
    function = load_plugin("model", script)
    if not callable(function):
        raise plugin_error("model", script, f"a {type(function).__name__} is not a function of the request")
    return function


class ScriptedBackend:
    """Answers from a script (see the module docstring); built from its role's settings."""

    model: Final = "scripted"

    def __init__(self, settings: ScriptSettings | None = None, *, answer: Script | None = None) -> None:
        """From a role's settings (`script`), or, in a test, straight from an `answer` function of the request."""
        self.answer: Script | list[Rule]
        if answer is not None:
            self.script, self.answer = getattr(answer, "__qualname__", "answer"), answer
        elif settings is not None:
            self.script, self.answer = settings.script, load_script(settings.script)
        else:
            raise ConfigError("scripted model: give the role's settings or an answer function")

    async def complete(self, request: LlmRequest) -> LlmResponse:
        if isinstance(self.answer, list):
            return _from_rules(self.answer, request)
        try:
            reply = self.answer(request)
        except Exception as exc:  # noqa: BLE001 - the script is the user's; its failure is this call's
            raise ModelError(f"scripted: {self.script} raised {type(exc).__name__}: {exc}") from None
        if isinstance(reply, LlmResponse):
            return reply
        return _response(str(reply), [], request)

    async def aclose(self) -> None:
        return None


def _from_rules(rules: list[Rule], request: LlmRequest) -> LlmResponse:
    rule = next((r for r in rules if r.matches(request)), None)
    if rule is None:
        last = _last_text(request)
        shown = last if len(last) <= 80 else f"{last[:77]}..."
        raise ModelError(f"scripted: no rule answers role {request.role!r} after {shown!r}")
    calls = [
        LlmToolCall(
            id=f"scripted-{i}",
            name=call.name,
            arguments=call.arguments,
            raw_arguments=msgspec.json.encode(call.arguments).decode(),
        )
        for i, call in enumerate(rule.tool_calls)
    ]
    return _response(rule.reply, calls, request)


def _response(text: str, calls: list[LlmToolCall], request: LlmRequest) -> LlmResponse:
    prompt = sum(len(m.content.split()) for m in request.messages)
    completion = len(text.split()) + sum(len(c.raw_arguments.split()) for c in calls)
    return LlmResponse(
        content=text,
        tool_calls=calls,
        usage=Usage(prompt_tokens=prompt, completion_tokens=completion),
        model="scripted",
        finish_reason="tool_calls" if calls else "stop",
    )


def _last_text(request: LlmRequest) -> str:
    return request.messages[-1].content if request.messages else ""
