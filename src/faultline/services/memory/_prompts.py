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
    (personalised tool use). It holds what the run shows and nothing a
    simulator recorded about its own mistakes: the offline critique
    (`sim_reflection`) reads these fields too.
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
        metadata={"purpose": "memory_extraction", "style": data.style, "domain": data.domain},
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


REFUSALS_SHOWN = 3
"""The offline critique quotes at most this many refused calls (the first ones)."""
REPLY_CHARS = 200
"""The offline critique quotes at most this much of the last reply."""


def sim_reflection(exchanges: Sequence[ToolExchange], reply: str) -> str:
    """A short critique of a failed run with no model: the `sim` extractor.

    It reads only what a model extractor is shown of the run (its calls, the environment's
    answers, the last reply), never what a simulator recorded about its own mistakes, and
    names what that shows: the calls the tools refused, or no call at all, and how the run
    ended. The same run always gives the same text.
    """
    refused = [ex for ex in exchanges if ex.error]
    sentences = [
        f"The run failed after {len(exchanges)} tool call{'' if len(exchanges) == 1 else 's'}."
        if exchanges
        else "The run failed without calling any tool."
    ]
    sentences += [
        f"The call {json_text(call_data(ex.call))} was refused: {ex.error.rstrip('.')}."
        for ex in refused[:REFUSALS_SHOWN]
    ]
    if reply.strip():
        said = reply.strip()
        said = said if len(said) <= REPLY_CHARS else said[:REPLY_CHARS] + "..."
        sentences.append(f'The last reply to the user was: "{said}"')
    lessons = ["check every condition of the request and every argument against what the user or a tool said"]
    if refused:
        lessons.append("read why a call was refused and correct that call before going on")
    if not exchanges:
        lessons.append("carry out the request with the tools before answering")
    lessons.append("finish every part of the request before the final reply")
    sentences.append(f"Next time, {'; '.join(lessons)}.")
    return " ".join(sentences)
