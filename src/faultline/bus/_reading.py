"""Reading the stream through consumers made for it: what it holds now, and what it stores from now on.

A follower finds deliveries lost on their way (`Bus.follow` says how) and reads the subject again after the last
message it took, so that it misses none and takes none twice.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio

from faultline._errors import DeliveriesLostError
from faultline.bus._consumer import BACKLOG_LOOK_S, Consumer, Delivery
from faultline.bus._consumers import Consumers
from faultline.bus._refusals import Refusals
from faultline.bus._retry import RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S, asked_again
from faultline.bus._settings import BusSettings

log = logging.getLogger(__name__)

SILENT_HEARTBEATS = 3
"""After how many idle heartbeats' time without a word from its server `Bus.follow` takes a consumer for lost."""


class Reader:
    """This connection's reads of the stream (`Bus.read_stored`, `Bus.follow`)."""

    def __init__(self, consumers: Consumers, settings: BusSettings, refusals: Refusals) -> None:
        self._consumers = consumers
        self._settings = settings
        self._refusals = refusals

    async def read_stored(self, filter_subjects: Sequence[str], timeout_s: float, *, after: int) -> list[Delivery]:
        got: list[Delivery] = []
        for subject in filter_subjects:
            # its idle heartbeats tell when it has sent all it holds, which a worker may not ask it (`backlog`)
            consumer = await self._consumers.open(
                None, [subject], start=after + 1 if after else "all", heartbeat_s=BACKLOG_LOOK_S
            )
            try:
                got.extend(await consumer.backlog(timeout_s))
            finally:
                await consumer.close()
        return sorted(got, key=lambda delivery: delivery.stream_seq) if len(filter_subjects) > 1 else got

    async def follow(
        self, subject: str, take: Callable[[Delivery], Awaitable[None]], *, after: int, opened: Consumer | None
    ) -> None:
        last = after

        async def handle(delivery: Delivery) -> None:
            nonlocal last
            last = delivery.stream_seq
            await take(delivery)

        consumer = opened
        try:
            while True:
                reconnected = self._refusals.reconnected
                if consumer is None:
                    consumer = await self._reading_after(subject, last)
                await self._serve_until_lost(subject, consumer, handle, reconnected)
                await consumer.close()
                consumer = None
        finally:
            if consumer is not None:
                await consumer.close()

    async def _reading_after(self, subject: str, last: int) -> Consumer:
        """A consumer of `subject` from stream sequence `last` + 1, asked for again while the stream cannot
        be reached (no leader yet); a credential that may not read it is refused at once."""
        return await asked_again(
            functools.partial(
                self._consumers.open, None, [subject], start=last + 1, heartbeat_s=self._settings.idle_heartbeat_s
            ),
            first_s=RETRY_BACKOFF_S,
            max_s=RETRY_BACKOFF_MAX_S,
        )

    async def _serve_until_lost(
        self,
        subject: str,
        consumer: Consumer,
        handle: Callable[[Delivery], Awaitable[None]],
        reconnected: anyio.Event,
    ) -> None:
        """Serve `consumer` until deliveries are known or likely lost (see `Bus.follow`)."""
        silent_s = SILENT_HEARTBEATS * self._settings.idle_heartbeat_s
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while not reconnected.is_set():
                    quiet_s = time.monotonic() - consumer.heard_at
                    if quiet_s >= silent_s:
                        log.warning(
                            "consumer %s of %s fell silent for %.0fs; reading it again", consumer.name, subject, quiet_s
                        )
                        break
                    with anyio.move_on_after(silent_s - quiet_s):
                        await reconnected.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                await consumer.serve(handle)
            except DeliveriesLostError as exc:
                log.warning("%s; reading %s again", exc, subject)
            tg.cancel_scope.cancel()
