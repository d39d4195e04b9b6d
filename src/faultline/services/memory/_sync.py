"""Waiting for the memory: between a run that fills it and a run that reads it."""

from __future__ import annotations

import msgspec

from faultline._errors import BusError, NoResponderError, ReplyTimeoutError
from faultline.agents.memory import SYNC_SERVICE, MemorySync, SyncRequest
from faultline.bus import Bus
from faultline.core import encode

WAIT_TIMEOUT_S = 90.0
"""How long `wait_for_memory` waits for the service's answer (the service itself gives up after 60 s)."""


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
