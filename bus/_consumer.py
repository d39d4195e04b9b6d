"""Reading the stream: a JetStream push consumer, handing out batches of deliveries.

A consumer hands out whatever has arrived as one batch, which keeps latency low
when traffic is light and batches large when it is heavy. Deliveries are
acknowledged one by one, or all up to one with an ack-all consumer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from faultline._errors import BusError, DeliveriesLostError
from faultline.bus._messaging import Subscription, nats_failure
from faultline.core import Envelope, check_delivered, decode_envelope

if TYPE_CHECKING:
    from faultline.bus._transport import Bus


@dataclass(slots=True)
class Delivery:
    """One message handed out by a consumer, not yet acknowledged."""

    subject: str
    data: bytes
    reply: str
    stream_seq: int
    delivered: int
    pending: int = 0
    consumer_seq: int = 0
    """The consumer's count of deliveries so far, this one included: 1 is the first it ever sent."""

    def envelope(self) -> Envelope:
        """The envelope, checked against the subject it came on; DecodeError if it is refused."""
        return check_delivered(decode_envelope(self.data), self.subject)


def _parse_ack_subject(reply: str) -> tuple[int, int, int, int]:
    """(stream sequence, delivery count, messages still pending, consumer sequence) from a JetStream ack subject."""
    tokens = reply.split(".")
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or the
    # longer form with domain and account hash before the stream name.
    offset = 2 if len(tokens) == 9 else 4
    return int(tokens[offset + 3]), int(tokens[offset + 2]), int(tokens[offset + 6]), int(tokens[offset + 4])


class Consumer:
    """A JetStream push consumer read as batches of deliveries."""

    def __init__(self, bus: Bus, name: str, deliver_subject: str, durable: bool, delivered: int = 0) -> None:
        self.bus = bus
        self.name = name
        self.durable = durable
        self.delivered = delivered
        """The consumer sequence of the last delivery `serve` handed over (of the consumer's last, when reopened)."""
        self._deliver_subject = deliver_subject
        self._queue: deque[Delivery] = deque()
        self._arrived = asyncio.Event()
        self._sub: Subscription | None = None
        self._handler: Callable[[Delivery], Awaitable[None]] | None = None
        self._failed: asyncio.Future[None] | None = None

    async def _start(self) -> None:
        with nats_failure(f"subscribing to consumer {self.name}"):
            sub = await self.bus.nc.subscribe(
                self._deliver_subject,
                cb=self._on_msg,
                pending_msgs_limit=self.bus.settings.pending_msgs_limit,
                pending_bytes_limit=-1,
            )
        self._sub = Subscription(sub, self.bus.nc)

    async def _on_msg(self, msg: Msg) -> None:
        if not msg.reply:
            return  # flow-control or heartbeat status message
        seq, delivered, pending, consumer_seq = _parse_ack_subject(msg.reply)
        delivery = Delivery(msg.subject, msg.data, msg.reply, seq, delivered, pending, consumer_seq)
        handler = self._handler
        if handler is None:
            self._queue.append(delivery)
            self._arrived.set()
            return
        try:
            await self._hand(handler, delivery)
        except Exception as exc:  # noqa: BLE001 - not lost in the client's error callback: `serve` raises it
            self._handler = None
            if self._failed is not None and not self._failed.done():
                self._failed.set_exception(exc)

    async def serve(self, handler: Callable[[Delivery], Awaitable[None]]) -> None:
        """Hand every delivery to `handler`, one at a time and in order, until cancelled.

        After those already arrived, `handler` runs in the NATS client's own reading task as each
        delivery comes: one task switch fewer per message than `batch`. It should hand long work
        to a task of its own. When it raises, deliveries stop and `serve` raises that exception.

        Deliveries travel over core NATS, which drops those on their way when a server or route
        is lost; the consumer then goes on with the next ones. A delivery whose consumer sequence
        skips ahead proves that: it is not handed over, and `serve` raises DeliveriesLostError
        (reopen the consumer from its acknowledgement floor to read the lost ones in order).
        """
        while self._queue:
            await self._hand(handler, self._queue.popleft())
        self._failed = asyncio.get_running_loop().create_future()
        self._handler = handler
        try:
            await self._failed
        finally:
            self._handler = None

    async def _hand(self, handler: Callable[[Delivery], Awaitable[None]], delivery: Delivery) -> None:
        if delivery.consumer_seq > self.delivered + 1:
            raise DeliveriesLostError(
                f"consumer {self.name}: deliveries {self.delivered + 1} to {delivery.consumer_seq - 1} were sent"
                f" but never arrived (a server or route was lost); stream sequence {delivery.stream_seq} came next"
            )
        self.delivered = delivery.consumer_seq
        await handler(delivery)

    async def batch(self, limit: int = 1000) -> list[Delivery]:
        """Wait for at least one delivery, then return all that have arrived (at most `limit`)."""
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        n = min(limit, len(self._queue))
        return [self._queue.popleft() for _ in range(n)]

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        while True:
            for delivery in await self.batch():
                yield delivery

    async def backlog(self, timeout_s: float) -> list[Delivery]:
        """Every message stored for this consumer when called, in stream order.

        Each delivery says how many are still pending after it, so the read ends at
        the first one that says none, without waiting for a quiet period.
        """
        info = await self._info()
        if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
            return []
        got: list[Delivery] = []
        try:
            with anyio.fail_after(timeout_s):
                while not got or got[-1].pending:
                    got.extend(await self.batch())
        except TimeoutError:
            raise BusError(f"reading the stream through {self.name} took over {timeout_s:g}s") from None
        return got

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge; with an ack-all consumer this also acknowledges everything before it."""
        await self._tell(delivery, b"+ACK")

    async def nak(self, delivery: Delivery, delay_s: float | None = None) -> None:
        payload = b"-NAK" if delay_s is None else f'-NAK {{"delay": {int(delay_s * 1e9)}}}'.encode()
        await self._tell(delivery, payload)

    async def in_progress(self, delivery: Delivery) -> None:
        """Say the delivery is still being worked on, so that it is not delivered again after the ack wait."""
        await self._tell(delivery, b"+WPI")

    async def _tell(self, delivery: Delivery, verdict: bytes) -> None:
        try:  # a plain try, not `nats_failure`: this runs once a message, and a context manager costs 2.5 us
            await self.bus.nc.publish(delivery.reply, verdict)
        except nats.errors.Error as exc:
            raise BusError(
                f"{verdict!r} for stream sequence {delivery.stream_seq} on {self.name} failed: {exc}"
            ) from None

    async def settled(self) -> bool:
        """True when the consumer has nothing left to deliver and nothing delivered is unacknowledged."""
        info = await self._info()
        return info.num_pending == 0 and info.num_ack_pending == 0

    async def _info(self) -> api.ConsumerInfo:
        with nats_failure(f"asking for the state of consumer {self.name}"):
            info: api.ConsumerInfo = await self.bus.js.consumer_info(self.bus.subjects.stream, self.name)
        return info

    async def close(self, *, delete: bool = False) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if delete or not self.durable:
            with nats_failure(f"deleting consumer {self.name}"):
                try:
                    await self.bus.js.delete_consumer(self.bus.subjects.stream, self.name)
                except nats.js.errors.NotFoundError:
                    pass
