"""One-line, human-readable renderings of message bodies, for timelines and tails."""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import (
    AssistantTurn,
    Body,
    ContextReply,
    ContextRequest,
    Control,
    DeadLetter,
    DefenseFired,
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    FaultApplied,
    FaultSkipped,
    Finished,
    Note,
    Notice,
    Recording,
    Start,
    Timer,
    TimerFired,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.faults import INJECTOR_ROLE

DESCRIBE_WIDTH = 160
"""Default longest rendering, in characters; longer ones end in an ellipsis."""

_json = msgspec.json.Encoder(order="deterministic")


START_DATA_WIDTH = 80
"""Characters of a Start's data a summary shows: the built-in episodes' settings run to several hundred."""
ARGUMENT_WIDTH = 40
"""Characters of one tool-call argument's value a summary shows, so that a long one leaves room for the others."""


def _compact(value: Any) -> str:
    """Values as compact JSON; strings bare, so text reads as text."""
    if isinstance(value, str):
        return value
    return _json.encode(msgspec.to_builtins(value)).decode()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _args(arguments: dict[str, Any]) -> str:
    """`key=value, ...`, each value as compact JSON cut at ARGUMENT_WIDTH."""
    return ", ".join(
        f"{key}={_clip(_json.encode(msgspec.to_builtins(value)).decode(), ARGUMENT_WIDTH)}"
        for key, value in arguments.items()
    )


def _tool_call(call: dict[str, Any]) -> str:
    """`name(key=value, ...)`: arguments that are not an object (a row written by other code) are left out."""
    arguments = call.get("arguments")
    return f"{call.get('name')}({_args(arguments) if isinstance(arguments, dict) else ''})"


def _asked_role(request: Any) -> Any:
    """The model role an `llm` recording's request asked: a dict as decoded from the journal, else the request."""
    return request.get("role") if isinstance(request, dict) else getattr(request, "role", None)


def _recording(body: Recording) -> str:
    head = f"{body.call}#{body.index}"
    if body.call == "llm" and _asked_role(body.request) == INJECTOR_ROLE:
        # recorded under the faulted message's sender, numbered from 0 like that agent's own calls
        head = f"fault injector {head}"
    failed = [f"#{attempt.number} {attempt.error}" for attempt in body.attempts if attempt.error]
    if failed:
        head += f" [{len(body.attempts)} attempts; {'; '.join(failed)}]"
    if body.error:
        return f"{head} error: {body.error}"
    response = msgspec.to_builtins(body.response)
    if body.call == "llm" and isinstance(response, dict):
        usage = response.get("usage") or {}
        parts = [
            f"{response.get('model') or 'model'}",
            f"{usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} tok",
        ]
        calls = response.get("tool_calls") or []
        said = ", ".join(_tool_call(call) for call in calls if isinstance(call, dict))
        said = said or repr(_one_line(str(response.get("content", ""))))
        return f"{head} {' '.join(parts)} → {said}"
    return f"{head} → {_compact(response)}"


def describe_body(body: Body, width: int = DESCRIBE_WIDTH) -> str:
    """A one-line summary of a body, chosen by kind: text for turns, name(args) for tool calls..."""
    match body:
        case UserTurn() | AssistantTurn():
            text = repr(_one_line(body.text))
            line = f"{text} [done]" if body.done else text
        case Start():
            data = _compact(body.data) if body.data else ""
            shown = data if len(data) <= START_DATA_WIDTH else f"{data[: START_DATA_WIDTH - 1]}…"
            line = f"start {body.text!r}" + (f" {shown}" if shown else "")
        case ToolCall():
            line = f"{body.name}({_args(body.arguments)})"
            if body.arguments_error:
                line += f" arguments error: {body.arguments_error}"
        case ToolResult():
            line = f"{body.name} error: {body.error}" if body.error else f"{body.name} → {_compact(body.output)}"
        case ContextRequest() if "reply" in body.proposal:
            line = f"step {body.step} proposes the message {_one_line(str(body.proposal['reply']))!r}"
            line += f" (revision {body.revision})" if body.revision else ""
        case ContextRequest() if body.proposal:
            line = f"step {body.step} proposes {body.proposal.get('name')}({_args(body.proposal.get('arguments', {}))})"
            line += f" (revision {body.revision})" if body.revision else ""
        case ContextRequest():
            line = f"step {body.step} asks {', '.join(body.helpers) or 'no helpers'}"
        case Timer():
            line = f"wait {body.after_s:g}s {_compact(body.data)}"
        case TimerFired():
            line = f"wait over {_compact(body.data)}"
        case Notice():
            line = repr(body.text)
        case ContextReply():
            verdict = f" {body.verdict}" if body.verdict else ""
            line = f"step {body.step} {body.helper}{verdict}: {body.text!r}"
        case Note():
            line = repr(body.text) + (f" {_compact(body.data)}" if body.data else "")
        case Recording():
            line = _recording(body)
        case Finished():
            line = f"output {_compact(body.output)}"
        case EpisodeStarted():
            line = f"{body.domain or body.system or '-'}/{body.task or '-'} trial {body.trial} seed {body.seed}"
            if body.run:
                line += f" run {body.run}"
            if body.roster:
                line += f" roster {','.join(body.roster)}"
            if body.forked_from:
                line += f" forked from {body.forked_from}@{body.forked_at}"
        case EpisodeCompleted():
            line = f"{body.outcome} reward {body.reward:g} turns {body.turns}"
            if body.cause:
                line += f" cause {body.cause}"
        case ErrorRaised():
            line = f"{body.agent} raised {body.error_type}: {body.message}"
        case FaultApplied():
            line = f"{body.fault} (rule {body.rule_id}) → {len(body.results)} result(s)"
        case FaultSkipped():
            line = f"{body.fault} (rule {body.rule_id}) not applied: {body.reason}"
        case DefenseFired():
            line = f"{body.defense} at {body.agent} dropped {body.message_id}" + (
                f": {body.reason}" if body.reason else ""
            )
        case Control():
            line = f"{body.name} {_compact(body.data)}"
        case DeadLetter():
            line = f"{body.subject}: {body.reason} ({len(body.data)} bytes)"
        case _:
            line = _compact(body)
    return _clip(line, width)
