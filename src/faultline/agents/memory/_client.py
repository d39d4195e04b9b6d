"""The memory from an agent's side: the tool agent's examples and hidden tools.

`memory_examples` goes through `ctx.request`, so the reply is recorded on
`fl.rec` and an exact replay sees the same examples without a memory service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from faultline._errors import ConfigError, MemoryStoreError
from faultline.agents.memory._examples import format_examples
from faultline.agents.memory._modes import Dynamic, RetrievalMode, TopK
from faultline.agents.memory._protocol import MEMORY_SERVICE, RetrievalReply, RetrievalRequest
from faultline.core import Context

_DYNAMIC_KEYS = ("radius", "prominence", "peak", "fallback_k", "candidates")


def retrieval_mode(settings: Mapping[str, Any] | msgspec.Struct) -> RetrievalMode | None:
    """The retrieval a `[memory]` config (or its dict, as in an episode's spec) asks for; None when off."""
    raw: Mapping[str, Any] = msgspec.to_builtins(settings) if isinstance(settings, msgspec.Struct) else settings
    mode = raw.get("mode") or "off"
    try:
        if mode == "off":
            return None
        if mode == "topk":
            return msgspec.convert({"k": raw["k"]} if "k" in raw else {}, TopK)
        if mode == "dynamic":
            return msgspec.convert({key: raw[key] for key in _DYNAMIC_KEYS if key in raw}, Dynamic)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"memory settings: {exc}") from None
    raise ConfigError(f'memory mode must be "off", "topk" or "dynamic", got {mode!r}')


def retrieval_body(*, domain: str, query: str, mode: RetrievalMode, user: str = "") -> dict[str, Any]:
    """The plain-data request `memory_examples` sends (and the journal records)."""
    return msgspec.to_builtins(RetrievalRequest(query=query, domain=domain, mode=mode, user=user))  # type: ignore[no-any-return]


async def memory_examples(
    ctx: Context,
    *,
    domain: str,
    query: str,
    mode: RetrievalMode,
    user: str = "",
    split_by_feedback: bool = False,
) -> tuple[str, list[str]]:
    """(in-context examples for the system prompt, names of tools to hide) for the current request.

    The text lists the retrieved entries with the instruction to work out what
    went wrong in those marked unsuccessful (`format_examples`); it is "" when
    nothing was retrieved. Tools are hidden only for a named `user` (hard
    preference guiding). Raises MemoryStoreError when the service answers with
    an error, and BusError when no memory service answers: catch
    FaultlineError to carry on without memory.
    """
    raw = await ctx.request(MEMORY_SERVICE, retrieval_body(domain=domain, query=query, mode=mode, user=user))
    if isinstance(raw, Mapping) and "error" in raw:
        raise MemoryStoreError(f"memory service: {raw['error']}")
    try:
        reply = msgspec.convert(raw, RetrievalReply)
    except msgspec.ValidationError as exc:
        raise MemoryStoreError(f"memory service: unexpected reply: {exc}") from None
    return format_examples(reply.entries, split_by_feedback=split_by_feedback), list(reply.hidden_tools)


def tool_name(schema: Mapping[str, Any]) -> str:
    """The name in an OpenAI-style tool schema (`{"type": "function", "function": {...}}` or flat)."""
    function = schema.get("function")
    if isinstance(function, Mapping):
        return str(function.get("name", ""))
    return str(schema.get("name", ""))
