"""Text the memory puts in front of its extractor model, and the offline critique writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from faultline.agents.memory import MemoryEntry, ToolCallRecord, call_data, format_entries, json_text, verdict
from faultline.core import ChatMessage, LlmRequest


class ToolExchange(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of the failed run and what the environment answered (or the error)."""

    call: ToolCallRecord
    response: str = ""
    error: str = ""


class ExtractionInput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the memory extractor sees, as MemToolAgent lists it: r = E(q, T, a, e, f, M').

    `tools` are the JSON schemas offered to the agent, `exchanges` its calls
    with the environment's responses, `reply` its last words to the user,
    `similar` the most similar stored entries. `style` picks a critique of the
    mistakes (general tool use) or a summary of the user's tool preferences
    (personalised tool use). `mistakes` travel in the request metadata for the
    offline `sim` backend (see `sim_reflection`); real models ignore them.
    """

    query: str
    feedback: Literal[0, 1]
    tools: list[dict[str, Any]] = []
    exchanges: list[ToolExchange] = []
    reply: str = ""
    similar: list[MemoryEntry] = []
    domain: str = ""
    context: str = ""
    style: Literal["critique", "preferences"] = "critique"
    mistakes: list[dict[str, Any]] = []


class PromptSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Limits on what the prompts include, and how the extractor model is asked."""

    role: str = "memory_extractor"
    temperature: float = 0.0
    max_tokens: int = 400
    max_similar: int = 5
    response_chars: int = 2000


_CRITIQUE_SYSTEM = """\
You review one run of a tool-using assistant that the user judged unsuccessful, \
and write a critique that a later run on a similar request can learn from.
The run contains at least one mistake. Look for it in particular here:
- the order of the tool calls, and calls that are missing or superfluous;
- argument values that were invented instead of taken from the user or from an earlier tool output;
- wrong argument values or types (ids, dates, amounts, units, names);
- conditions and time references in the request that were ignored or misread;
- stopping before the whole request was carried out, or doing more than was asked.
Similar past requests follow with their outcomes; a critique written for one of \
them may name the same mistake. Do not retell the run. Name the mistake and say \
what should have been done instead, in a few sentences, and make sure the \
sentences do not contradict each other."""

_PREFERENCES_SYSTEM = """\
You study which tools a user likes, from requests the user rated 1 (satisfied) \
or 0 (not satisfied) together with the tool calls that served them.
Report a preference only when it recurs: a tool, or a family of tools, must \
appear in at least two requests with the same rating. Consider only preferences \
that bear on the current request. Answer in this form and nothing else:
PREFERENCES
- preferred tools: <names, or none>
- avoided tools: <names, or none>
If no pattern recurs, answer "No clear preference"."""


def extractor_request(data: ExtractionInput, settings: PromptSettings | None = None) -> LlmRequest:
    """The model call that writes an entry's reflection (for failures) or preference summary."""
    s = settings or PromptSettings()
    system = _CRITIQUE_SYSTEM if data.style == "critique" else _PREFERENCES_SYSTEM
    if data.context:
        system = f"{system}\n\n{data.context}"
    parts = [
        f"## Request\n{data.query}",
        "## Tools available\n" + "\n".join(json_text(tool) for tool in data.tools) if data.tools else "",
        "## Similar past requests\n" + format_entries(data.similar[: s.max_similar]) if data.similar else "",
        "## What the assistant did\n" + _format_exchanges(data.exchanges, s.response_chars),
        f"## Final reply to the user\n{data.reply}" if data.reply else "",
        f"## User feedback\n{verdict(data.feedback)} ({data.feedback})",
        "Write the critique." if data.style == "critique" else "Write the preference summary.",
    ]
    return LlmRequest(
        role=s.role,
        messages=[
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content="\n\n".join(p for p in parts if p)),
        ],
        temperature=s.temperature,
        max_tokens=s.max_tokens,
        metadata={
            "purpose": "memory_extraction",
            "style": data.style,
            "domain": data.domain,
            "mistakes": list(data.mistakes),
        },
    )


def _format_exchanges(exchanges: Sequence[ToolExchange], limit: int) -> str:
    if not exchanges:
        return "No tool was called."
    lines = []
    for step, ex in enumerate(exchanges, start=1):
        answer = f"error: {ex.error}" if ex.error else ex.response
        if len(answer) > limit:
            answer = answer[:limit] + f" ... [{len(answer) - limit} more characters]"
        lines.append(f"{step}. call {json_text(call_data(ex.call))}\n   response: {answer}")
    return "\n".join(lines)


# -- the offline writers ---------------------------------------------------------------------


def sim_preferences(ratings: Mapping[str, int]) -> str:
    """The preference summary of one rated episode, with no model: the `sim` extractor's.

    It has the form the preference prompt asks a model for, but reads only this
    episode's ratings (a model also weighs similar past requests), so rebuilding
    the memory from the journal writes the same text.
    """
    preferred = sorted(name for name, rating in ratings.items() if rating)
    avoided = sorted(name for name, rating in ratings.items() if not rating)
    if not preferred and not avoided:
        return "No clear preference"
    return (
        "PREFERENCES\n"
        f"- preferred tools: {', '.join(preferred) or 'none'}\n"
        f"- avoided tools: {', '.join(avoided) or 'none'}"
    )


_CATEGORY_ALIASES = {
    "argument_error": "arguments",
    "parameter_error": "arguments",
    "parameter_filling_error": "arguments",
    "wrong_arguments": "arguments",
    "missing_call": "missing",
    "redundant_call": "redundant",
    "call_order_swap": "order",
    "order_swap": "order",
    "wrong_order": "order",
    "tool_selection_error": "tool",
    "wrong_tool": "tool",
    "hallucination": "hallucination",
    "early_stop": "incomplete",
    "incomplete_fulfilment": "incomplete",
    "incomplete": "incomplete",
}

_LESSONS = {
    "arguments": "take every argument value from the user's words or an earlier tool output, never guess it",
    "missing": "check that every part of the request has a call that carries it out",
    "redundant": "call a tool only when its result is needed, and not twice for the same thing",
    "order": "read what each call needs first and make the calls that provide it before it",
    "tool": "compare the request with each tool's description before choosing one",
    "hallucination": "state only facts that a tool returned or the user said",
    "incomplete": "finish every part of the request before the final reply",
}


def sim_reflection(mistakes: Sequence[Mapping[str, Any]]) -> str:
    """A short critique written from recorded mistakes, with no model: the `sim` extractor.

    Each mistake has `category`, `step`, `intended` and `made` (a call as
    {name, arguments}, or text). The same mistakes always give the same text.
    """
    if not mistakes:
        return (
            "The run failed but no specific mistake was recorded. Re-read the request "
            "and check every condition and argument before acting."
        )
    ordered = sorted(mistakes, key=lambda m: (int(m.get("step", 0)), str(m.get("category", ""))))
    sentences = [_mistake_sentence(m) for m in ordered]
    lessons = dict.fromkeys(_LESSONS.get(_category(m), "") for m in ordered)
    lesson_text = "; ".join(lesson for lesson in lessons if lesson)
    if lesson_text:
        sentences.append(f"Next time, {lesson_text}.")
    return " ".join(sentences)


def _category(mistake: Mapping[str, Any]) -> str:
    raw = str(mistake.get("category", "")).strip().lower().replace("-", "_").replace(" ", "_")
    return _CATEGORY_ALIASES.get(raw, raw)


def _mistake_sentence(mistake: Mapping[str, Any]) -> str:
    step = mistake.get("step", "?")
    made = _describe(mistake.get("made"))
    intended = _describe(mistake.get("intended"))
    match _category(mistake):
        case "arguments":
            return f"At step {step} the call {made} had wrong arguments; it should have been {intended}."
        case "missing":
            return f"At step {step} a call was missing: the agent never made {intended}."
        case "redundant":
            return f"At step {step} the call {made} was not needed and should have been left out."
        case "order":
            return f"At step {step} the calls came in the wrong order: {made} was made where {intended} belonged."
        case "tool":
            return f"At step {step} the agent chose the wrong tool: {made} instead of {intended}."
        case "hallucination":
            return (
                f"At step {step} the agent stated {made}, which no tool or user message supports;"
                f" the facts were {intended}."
            )
        case "incomplete":
            return f"At step {step} the agent stopped early; it still had to do {intended}."
        case other:
            label = other or "mistake"
            return f"At step {step} ({label.replace('_', ' ')}) the agent did {made}; expected {intended}."


def _describe(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        return f"{value['name']}({json_text(value.get('arguments', {}))})"
    if value is None or value == "":
        return "nothing"
    return value if isinstance(value, str) else json_text(value)
