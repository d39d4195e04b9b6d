"""The durable consumers the services read completions and notices through."""

from __future__ import annotations

from typing import Literal

from faultline.bus import Bus, Consumer


async def resumed_consumer(bus: Bus, name: str, subject: str, *, ack_wait_s: float | None = None) -> Consumer:
    """Durable consumer `name` on `subject`, one event in flight, from right after the last event it acknowledged.

    An event in hand when the last run ended (stopped, or killed) so comes again at once, not after
    the ack wait. It is not `Bus.own_consumer`, a worker's, for three reasons: a service's first
    consumer reads every event the stream holds (the memory of every episode so far), not from the
    next one on; it hands out one event at a time, so events are handled in stream order; and the
    service makes its consumer itself, with an identity that may make, read and delete it but not
    reset it (`recorder_identity`), so it is made again after its floor rather than reset to it.
    """
    floor = await bus.ack_floor(name)
    start: int | Literal["all"] = "all" if floor is None else floor + 1
    return await bus.consumer(name, [subject], start=start, max_ack_pending=1, ack_wait_s=ack_wait_s, replace=True)
