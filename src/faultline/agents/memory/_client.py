"""The memory from the callers' side: the tool agent's examples and hidden tools, and waiting for the memory.

`memory_examples` goes through `ctx.request`, so the reply is recorded on
`fl.rec` and an exact replay sees the same examples without a memory service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from faultline._errors import BusError, ConfigError, MemoryStoreError, NoResponderError, ReplyTimeoutError
from faultline.agents.memory._prompts import format_examples
from faultline.agents.memory._protocol import (
    MEMORY_SERVICE,
    SYNC_SERVICE,
    MemorySync,
    RetrievalReply,
    RetrievalRequest,
    SyncRequest,
)
from faultline.agents.memory._retrieval import Dynamic, RetrievalMode, TopK
from faultline.bus import Bus
from faultline.core import Context, encode

WAIT_TIMEOUT_S = 90.0
"""How long `wait_for_memory` waits for the service's answer (the service itself gives up after 60 s)."""

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


async def wait_for_memory(bus: Bus, *, timeout_s: float = WAIT_TIMEOUT_S) -> MemorySync:
    """Block until the memory service has handled every completed event the stream holds now.

    Call it between a run that fills the memory and a run that reads it.
    `caught_up` is False when an entry keeps failing (see `last_error`).
    """
    until = (await bus.stream_state()).last_seq
    subject = bus.subjects.svc(SYNC_SERVICE)
    try:
        reply = await bus.request(subject, encode(SyncRequest(until=until)), timeout_s)
    except NoResponderError:
        raise NoResponderError(
            f"no memory service answers on {subject}: start one (`faultline memory serve`)"
        ) from None
    except ReplyTimeoutError:
        raise ReplyTimeoutError(
            f"the memory service did not answer within {timeout_s:g}s: it may still be taking in episodes (see its log)"
        ) from None
    try:
        return msgspec.msgpack.decode(reply, type=MemorySync)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BusError(f"the memory service answered {subject} with something else: {exc}") from None
