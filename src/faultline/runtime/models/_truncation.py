"""Fitting a chat request into a model's context when the endpoint refuses it as too long.

OpenAI-compatible servers say so in different words: llama.cpp answers with
`exceed_context_size_error` and both counts as fields, OpenAI with
`context_length_exceeded` and the counts in its message, vLLM with the same
sentence. `overflow` reads any of them. `fit` then drops whole turns, oldest first,
from the middle of the conversation: the system messages and the opening request
stay, and so does the last turn, so that the model still knows what it is asked and
what just happened. A turn begins at an assistant message and takes the tool
results and user messages after it, so no tool result loses the call it answers and
the roles still alternate. Tokens are estimated from the server's own count in
proportion to each message's encoded length: no tokenizer of the model is needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

_CONTEXT = re.compile(r"(?:maximum context length is|available context size \(|context window of) ?(\d+)")
_PROMPT = re.compile(
    r"(?:(\d+) in the messages|resulted in (\d+) tokens|has (\d+) input tokens|request \((\d+) tokens\))"
)
_MARKERS = ("context_length_exceeded", "exceed_context_size_error", "maximum context length", "available context size")
MARGIN = 0.95
"""The share of the room a fitted prompt is estimated to fill: the estimate is proportional, not exact."""


class Overflow(msgspec.Struct, frozen=True):
    """What the server said about a prompt too long for its model: both counts in tokens, 0 where it did not say."""

    prompt_tokens: int = 0
    context_tokens: int = 0


class Fitted(msgspec.Struct, frozen=True):
    """The messages that fit, and how many were dropped to get there."""

    messages: list[dict[str, Any]]
    dropped: int


def overflow(body: object) -> Overflow | None:
    """The `Overflow` an HTTP 400 error body describes, or None when it refuses the request for anything else."""
    if not isinstance(body, Mapping):
        return None
    message = body.get("message")
    text = message if isinstance(message, str) else ""
    said = " ".join(str(body.get(key, "")) for key in ("type", "code")) + " " + text
    if not any(marker in said for marker in _MARKERS):
        return None
    prompt, context = body.get("n_prompt_tokens"), body.get("n_ctx")
    if not isinstance(prompt, int):
        prompt = _first_number(_PROMPT, text)
    if not isinstance(context, int):
        context = _first_number(_CONTEXT, text)
    return Overflow(prompt_tokens=prompt, context_tokens=context)


def fit(messages: Sequence[dict[str, Any]], tools: object, overflow: Overflow, answer_tokens: int) -> Fitted | None:
    """`messages` less their oldest middle turns, estimated to leave `answer_tokens` of the context for the answer;
    None when dropping every middle turn would not be enough.

    When the server gave no counts, half the middle turns' length goes.
    """
    keep_head = _head(messages)
    turns = _turns(messages, keep_head)
    if len(turns) < 2:
        return None
    sizes = [len(msgspec.json.encode(message)) for message in messages]
    middle = sum(sizes[keep_head : turns[-1]])
    total = sum(sizes) + (len(msgspec.json.encode(tools)) if tools else 0)
    if overflow.prompt_tokens > 0 and overflow.context_tokens > 0:
        room = overflow.context_tokens - (answer_tokens if answer_tokens < overflow.context_tokens // 2 else 0)
        tokens_per_byte = overflow.prompt_tokens / total
        excess = total - room * MARGIN / tokens_per_byte
    else:
        excess = middle / 2
    if excess > middle:
        return None
    dropped_bytes = 0
    cut = keep_head
    for start, end in zip(turns, turns[1:], strict=False):
        if dropped_bytes >= excess:
            break
        dropped_bytes += sum(sizes[start:end])
        cut = end
    return Fitted(messages=[*messages[:keep_head], *messages[cut:]], dropped=cut - keep_head)


def _head(messages: Sequence[dict[str, Any]]) -> int:
    """How many messages open the conversation: everything before the first assistant message."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return index
    return len(messages)


def _turns(messages: Sequence[dict[str, Any]], start: int) -> list[int]:
    """Where each turn after the head begins: at every assistant message."""
    return [index for index in range(start, len(messages)) if messages[index].get("role") == "assistant"]


def _first_number(pattern: re.Pattern[str], text: str) -> int:
    match = pattern.search(text)
    return int(next(group for group in match.groups() if group)) if match else 0
