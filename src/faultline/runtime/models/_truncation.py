"""Fitting a chat request into a model's context when the endpoint refuses it as too long.

OpenAI-compatible servers say so in different words: llama.cpp answers with
`exceed_context_size_error` and both counts as fields, OpenAI with
`context_length_exceeded` and the counts in its message, vLLM with the same
sentence. llama.cpp also fails a request it has begun to answer with HTTP 500
"Context size has been exceeded." when its cache, which the requests it serves at
once share, fills up: no counts, and the same request sent again fails again while
they last. `overflow` reads any of them, whatever the status. `fit` then drops whole turns, oldest first,
from the middle of the conversation: the system messages and the opening request
stay, and so does the last turn, so that the model still knows what it is asked and
what just happened. A turn begins at an assistant message and takes the tool
results and user messages after it, so no tool result loses the call it answers and
the roles still alternate. Tokens are estimated from the server's own count in
proportion to each message's encoded length: no tokenizer of the model is needed.

A cut goes well below the limit (`CUT_TO`), and `Cuts` keeps it for the
conversation's later requests, which the agent sends whole again: they then begin
as the request that fitted did, and a server that keeps the prompt it last read
(llama.cpp does, per slot) reads only what is new, until the conversation fills
the context again. A conversation cut afresh each time would be read whole each
time: with a small model on 2 cores, about 200 s a call against 10 to 30.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import msgspec

_CONTEXT = re.compile(r"(?:maximum context length is|available context size \(|context window of) ?(\d+)")
_PROMPT = re.compile(
    r"(?:(\d+) in the messages|resulted in (\d+) tokens|has (\d+) input tokens|request \((\d+) tokens\))"
)
_MARKERS = (
    "context_length_exceeded",
    "exceed_context_size_error",
    "maximum context length",
    "available context size",
    "context size has been exceeded",
)
MARGIN = 0.95
"""The share of the room a fitted prompt may fill at most: the estimate is proportional, not exact."""
CUT_TO = 0.6
"""The share of the room a cut aims to leave filled, so that the turns after it fit before the next cut."""
REMEMBERED_CUTS = 1024
"""Conversations whose cut a backend keeps; the oldest is forgotten first (its next request is refused once)."""


class Overflow(msgspec.Struct, frozen=True):
    """What the server said about a prompt too long for its model: both counts in tokens, 0 where it did not say."""

    prompt_tokens: int = 0
    context_tokens: int = 0


class Fitted(msgspec.Struct, frozen=True):
    """The messages that fit, and how many were dropped to get there: those right after the first `head`."""

    messages: list[dict[str, Any]]
    dropped: int
    head: int


def overflow(body: object) -> Overflow | None:
    """The `Overflow` an HTTP error body describes, or None when it fails the request for anything else."""
    if not isinstance(body, Mapping):
        return None
    message = body.get("message")
    text = message if isinstance(message, str) else ""
    said = (" ".join(str(body.get(key, "")) for key in ("type", "code")) + " " + text).lower()
    if not any(marker in said for marker in _MARKERS):
        return None
    prompt, context = body.get("n_prompt_tokens"), body.get("n_ctx")
    if not isinstance(prompt, int):
        prompt = _first_number(_PROMPT, text)
    if not isinstance(context, int):
        context = _first_number(_CONTEXT, text)
    return Overflow(prompt_tokens=prompt, context_tokens=context)


def fit(messages: Sequence[dict[str, Any]], tools: object, overflow: Overflow, answer_tokens: int) -> Fitted | None:
    """`messages` less their oldest middle turns, estimated to fill `CUT_TO` of the context that `answer_tokens`
    leave, or as much more, up to `MARGIN`, as the last turn needs; None when dropping every middle turn would not be
    enough.

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
        bytes_per_token = total / overflow.prompt_tokens
        needed, wanted = (total - room * share * bytes_per_token for share in (MARGIN, CUT_TO))
    else:
        needed = wanted = middle / 2
    if needed > middle:
        return None
    excess = min(wanted, middle)
    dropped_bytes = 0
    cut = keep_head
    for start, end in zip(turns, turns[1:], strict=False):
        if dropped_bytes >= excess:
            break
        dropped_bytes += sum(sizes[start:end])
        cut = end
    return Fitted(messages=[*messages[:keep_head], *messages[cut:]], dropped=cut - keep_head, head=keep_head)


class _Cut(msgspec.Struct, frozen=True):
    """Messages `head` to `end` of a conversation were left out; `prefix` is the digest of its first `end`."""

    head: int
    end: int
    prefix: str


class Cuts:
    """The cut each conversation was last sent with, by a key of the caller's (an episode's agent)."""

    def __init__(self) -> None:
        self._cuts: dict[Hashable, _Cut] = {}

    def apply(self, key: Hashable, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """`messages` as the conversation's last cut leaves them, and how many that drops (0: sent whole).

        A conversation that no longer begins as it did when it was cut is sent whole.
        """
        cut = self._cuts.get(key)
        if cut is None or len(messages) <= cut.end or _prefix(messages, cut.end) != cut.prefix:
            return messages, 0
        return [*messages[: cut.head], *messages[cut.end :]], cut.end - cut.head

    def remember(self, key: Hashable, messages: list[dict[str, Any]], head: int, end: int) -> None:
        """Keep the cut of `messages` (the whole conversation) that leaves out `head` to `end`."""
        self._cuts.pop(key, None)
        self._cuts[key] = _Cut(head=head, end=end, prefix=_prefix(messages, end))
        if len(self._cuts) > REMEMBERED_CUTS:
            del self._cuts[next(iter(self._cuts))]


def _prefix(messages: Sequence[dict[str, Any]], end: int) -> str:
    return hashlib.blake2b(msgspec.json.encode(messages[:end]), digest_size=16).hexdigest()


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
