"""Reading the stream: a JetStream push consumer, handing out batches of deliveries.

A consumer hands out whatever has arrived as one batch, which keeps latency low
when traffic is light and batches large when it is heavy. Deliveries are
acknowledged one by one, or all up to one with an ack-all consumer.

A consumer with idle heartbeats hears from the server after every quiet interval,
with the consumer sequence of the last delivery it sent: a delivery lost on the
way just before a quiet period is so found at the next heartbeat, not at the
ack wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from faultline._errors import BusError, DecodeError, DeliveriesLostError
from faultline.bus._messaging import Subscription, nats_failure
from faultline.core import Envelope, check_delivered, decode_envelope


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


def envelopes_of(deliveries: Iterable[Delivery]) -> list[tuple[Delivery, Envelope]]:
    """Each delivery with its envelope, passing over those that are none: they were dead-lettered when they
    first arrived, and a reader of what is stored has nothing more to do with them."""
    decoded: list[tuple[Delivery, Envelope]] = []
    for delivery in deliveries:
        try:
            decoded.append((delivery, delivery.envelope()))
        except DecodeError:
            continue
    return decoded


KEEP_ALIVE_PER_ACK_WAIT = 3
"""How many times per ack wait `Consumer.keep_alive` says a delivery is in progress."""
LAST_CONSUMER_HEADER = "Nats-Last-Consumer"
"""On an idle heartbeat: the consumer sequence of the last delivery the server sent."""
BACKLOG_LOOK_S = 1.0
"""How long a read of what the stream holds waits for a delivery before it asks whether any is left to come."""


def _parse_ack_subject(reply: str) -> tuple[int, int, int, int]:
    """(stream sequence, delivery count, messages still pending, consumer sequence) from a JetStream ack subject."""
    tokens = reply.split(".")
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or the
    # longer form with domain and account hash before the stream name.
    offset = 2 if len(tokens) == 9 else 4
    return int(tokens[offset + 3]), int(tokens[offset + 2]), int(tokens[offset + 6]), int(tokens[offset + 4])


class Consumer:
    """A JetStream push consumer read as batches of deliveries.

    Made by `Bus` (`Bus.consumer`, `Bus.own_consumer`); it holds only the connection and the stream it reads.
    """

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext,
        stream: str,
        name: str,
        deliver_subject: str,
        durable: bool,
        info: api.ConsumerInfo | None = None,
        *,
        pending_msgs_limit: int,
    ) -> None:
        self._nc = nc
        self._js = js
        self._stream = stream
        self._pending_msgs_limit = pending_msgs_limit
        self.name = name
        self.durable = durable
        self.delivered = (info.delivered.consumer_seq or 0) if info and info.delivered else 0
        """The consumer sequence of the last delivery `serve` handed over (of the consumer's last, when reopened)."""
        self._opened = info
        """The consumer's state when it was opened."""
        self._acks = info is None or info.config.ack_policy != api.AckPolicy.NONE
        self._deliver_subject = deliver_subject
        self._arrived_seq = self.delivered
        """The consumer sequence of the last delivery that arrived here (handed over or queued)."""
        self._lost: DeliveriesLostError | None = None
        """Deliveries an idle heartbeat proved lost, raised once those that arrived are handed over."""
        self._idle_after: int | None = None
        """The last delivery an idle heartbeat named, while nothing has arrived since: the server had nothing more
        to send this consumer then, and had sent up to it."""
        self._queue: deque[Delivery] = deque()
        self._arrived = asyncio.Event()
        self._sub: Subscription | None = None
        self.heard_at = time.monotonic()
        """When a delivery or an idle heartbeat of this consumer last arrived (`time.monotonic()`: set for every
        delivery, where `anyio.current_time()` costs 1.4 us against 0.1)."""
        self._handler: Callable[[Delivery], Awaitable[None]] | None = None
        self._failed: asyncio.Future[None] | None = None

    @property
    def pending_when_opened(self) -> int:
        """How many messages on its filters the stream held for it to deliver when it was opened."""
        return (self._opened.num_pending or 0) if self._opened is not None else 0

    async def _start(self) -> None:
        with nats_failure(f"subscribing to consumer {self.name}"):
            sub = await self._nc.subscribe(
                self._deliver_subject,
                cb=self._on_msg,
                pending_msgs_limit=self._pending_msgs_limit,
                pending_bytes_limit=-1,
            )
        self._sub = Subscription(sub, self._nc)

    async def _on_msg(self, msg: Msg) -> None:
        self.heard_at = time.monotonic()
        if not msg.reply:
            self._on_status(msg)
            return
        seq, delivered, pending, consumer_seq = _parse_ack_subject(msg.reply)
        self._arrived_seq = max(self._arrived_seq, consumer_seq)
        self._idle_after = None
        delivery = Delivery(msg.subject, msg.data, msg.reply, seq, delivered, pending, consumer_seq)
        handler = self._handler
        if handler is None:
            self._queue.append(delivery)
            self._arrived.set()
            return
        try:
            await self._hand(handler, delivery)
        except Exception as exc:  # noqa: BLE001 - not lost in the client's error callback: `serve` raises it
            self._fail(exc)

    def _on_status(self, msg: Msg) -> None:
        """An idle heartbeat: the server had nothing to deliver, and names the last delivery it sent. Later than the
        last that arrived, it proves those after lost on the way."""
        last = int((msg.headers or {}).get(LAST_CONSUMER_HEADER, 0) or 0)
        self._idle_after = last
        if last <= self._arrived_seq or self._lost is not None:
            return
        lost = self._lost_between(self._arrived_seq + 1, last, "an idle heartbeat said so")
        if self._handler is not None:
            self._fail(lost)
            return
        self._lost = lost
        self._arrived.set()

    def _lost_between(self, first: int, last: int, how: str) -> DeliveriesLostError:
        return DeliveriesLostError(
            f"consumer {self.name}: deliveries {first} to {last} were sent but never arrived"
            f" (a server or route was lost); {how}"
        )

    def _fail(self, exc: Exception) -> None:
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
        (reopen the consumer from its acknowledgement floor to read the lost ones in order). So
        does an idle heartbeat that names a later delivery than the last that arrived.
        """
        while self._queue:
            await self._hand(handler, self._queue.popleft())
        self._raise_lost()
        self._failed = asyncio.get_running_loop().create_future()
        self._handler = handler
        try:
            await self._failed
        finally:
            self._handler = None

    async def _hand(self, handler: Callable[[Delivery], Awaitable[None]], delivery: Delivery) -> None:
        if delivery.consumer_seq > self.delivered + 1:
            raise self._lost_between(
                self.delivered + 1, delivery.consumer_seq - 1, f"stream sequence {delivery.stream_seq} came next"
            )
        self.delivered = delivery.consumer_seq
        await handler(delivery)

    async def batch(self, limit: int = 1000, gather_s: float = 0.0, hurry: anyio.Event | None = None) -> list[Delivery]:
        """Wait for at least one delivery, then return all that have arrived (at most `limit`).

        With `gather_s`, a batch short of `limit` waits that long for later deliveries to join
        it, or until `hurry` is set: a reader that pays per batch (a database transaction) then
        pays for fewer, and one that someone waits on stops gathering.
        DeliveriesLostError once those are handed out, when an idle heartbeat proved some lost.
        """
        while not self._queue:
            self._raise_lost()
            self._arrived.clear()
            await self._arrived.wait()
        if gather_s > 0 and len(self._queue) < limit and not (hurry is not None and hurry.is_set()):
            with anyio.move_on_after(gather_s):
                await (hurry or anyio.Event()).wait()
        n = min(limit, len(self._queue))
        return [self._queue.popleft() for _ in range(n)]

    def _raise_lost(self) -> None:
        lost, self._lost = self._lost, None
        if lost is not None:
            raise lost

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        while True:
            for delivery in await self.batch():
                yield delivery

    async def backlog(self, timeout_s: float) -> list[Delivery]:
        """Every message stored for this consumer when it was opened and still stored, in stream order.

        Each delivery says how many are still pending after it, so the read ends at the first one that says none,
        without waiting for a quiet period. Messages removed from the stream after the consumer was opened (the
        journal trims the stream) are never delivered: while nothing arrives for `BACKLOG_LOOK_S`, the read ends
        once the consumer has sent everything it holds. A consumer with idle heartbeats says so itself (a heartbeat
        naming the last delivery that arrived), which any reader hears; one without is asked for its state, which
        only an identity that may ask for it can (`_sent_all`).
        """
        info = self._opened or await self._info()
        if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
            return []
        got: list[Delivery] = []
        try:
            with anyio.fail_after(timeout_s):
                while not got or got[-1].pending:
                    with anyio.move_on_after(BACKLOG_LOOK_S) as quiet:
                        got.extend(await self.batch())
                    if quiet.cancelled_caught and await self._sent_all(got):
                        break
        except TimeoutError:
            raise BusError(f"reading the stream through {self.name} took over {timeout_s:g}s") from None
        return got

    async def _sent_all(self, got: list[Delivery]) -> bool:
        """Whether nothing is left to deliver and the last delivery sent is the last one taken (none is on its way).

        An idle heartbeat is sent only when the server finds nothing to deliver: one that names the last delivery
        taken, with nothing arrived after it, says both. A consumer without heartbeats is asked for its state.
        """
        taken = got[-1].consumer_seq if got else 0
        if self._opened is not None and self._opened.config.idle_heartbeat:
            return self._idle_after == taken and not self._queue
        info = await self._info()
        sent = info.delivered.consumer_seq if info.delivered else 0
        return not info.num_pending and sent == taken

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge; with an ack-all consumer this also acknowledges everything before it."""
        await self._tell(delivery, b"+ACK")

    async def in_progress(self, delivery: Delivery) -> None:
        """Say the delivery is still being worked on, so that it is not delivered again after the ack wait."""
        await self._tell(delivery, b"+WPI")

    @asynccontextmanager
    async def keep_alive(self, delivery: Delivery) -> AsyncIterator[None]:
        """Say the delivery is in progress several times per ack wait while the block runs: work on it that
        may take longer than that (a slow model, forks to run) would otherwise have it delivered again."""
        ack_wait_s = self._opened.config.ack_wait if self._opened is not None else None
        if not self._acks or not ack_wait_s:
            yield
            return

        async def keep_telling() -> None:
            while True:
                await anyio.sleep(ack_wait_s / KEEP_ALIVE_PER_ACK_WAIT)
                await self.in_progress(delivery)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_telling)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def _tell(self, delivery: Delivery, verdict: bytes) -> None:
        if not self._acks:
            return  # a consumer for reading: nothing to acknowledge
        try:  # a plain try, not `nats_failure`: this runs once a message, and a context manager costs 2.5 us
            await self._nc.publish(delivery.reply, verdict)
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
            info: api.ConsumerInfo = await self._js.consumer_info(self._stream, self.name)
        return info

    async def close(self, *, delete: bool = False) -> None:
        """Stop reading; `delete` a durable consumer too. One made for reading the server removes by itself."""
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if delete and self.durable:
            with nats_failure(f"deleting consumer {self.name}"):
                try:
                    await self._js.delete_consumer(self._stream, self.name)
                except nats.js.errors.NotFoundError:
                    pass
