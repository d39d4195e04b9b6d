"""Asking again, with backoff, for what the stream refuses for now; never for what it refuses for good."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from faultline._errors import AccessError, BusError, PublishRefusedError

T = TypeVar("T")

RETRY_S = 0.5
"""First wait before asking again; it doubles up to RETRY_MAX_S."""
RETRY_MAX_S = 5.0
RETRY_BACKOFF_S = 0.1
"""First wait before sending unconfirmed publishes, or opening a lost reader, again: what has only just failed may
well succeed at once. It doubles up to RETRY_BACKOFF_MAX_S."""
RETRY_BACKOFF_MAX_S = 2.0
FINAL = (PublishRefusedError, AccessError)
"""Refusals of this process's credential: asking again cannot help, so they are raised at once."""

log = logging.getLogger(__name__)


async def asked_again(
    ask: Callable[[], Awaitable[T]],
    *,
    first_s: float = RETRY_S,
    max_s: float = RETRY_MAX_S,
    retried: type[Exception] | tuple[type[Exception], ...] = BusError,
    failed: Callable[[Exception], Awaitable[None]] | None = None,
    wait_first: bool = False,
) -> T:
    """What `ask` returns, asked for again while it raises `retried`, after `first_s`, doubling up to `max_s`
    (`wait_first`: the first time too, for an ask that has just failed).

    Right after a node comes back or the stream's leader is lost, the cluster may answer "JetStream system
    temporarily unavailable", or nothing, while it elects leaders; the stream keeps everything meanwhile, so
    waiting loses nothing, and giving up would end the process. A credential refused (`FINAL`) is refused every
    time: that is raised. Each failure is logged as a warning, or handed to `failed` instead.
    """
    delay = first_s
    if wait_first:
        await anyio.sleep(delay)
    while True:
        try:
            return await ask()
        except FINAL:
            raise
        except retried as exc:
            if failed is None:
                log.warning("%s; asking again in %gs", exc, delay)
            else:
                await failed(exc)
        await anyio.sleep(delay)
        delay = min(2 * delay, max_s)
