"""The journal service: copies the stream into the SQLite journal, batch by batch.

It reads through one ack-all consumer and acknowledges a batch only after the
batch is committed, so the file never runs ahead of the stream's record of what
was journaled. On start it resumes right after the last sequence in the file
(not after the consumer's ack floor), so a kill -9 at any point leaves neither a
gap nor a duplicate. Bytes that are not an envelope go to the dead-letter
subject, and come back through the stream to be journaled there.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
from nats.aio.msg import Msg

from faultline.bus import Bus, Consumer
from faultline.bus._messages import body_bytes
from faultline.journal._rows import Incoming
from faultline.journal._writer import Journal

CONSUMER = "journal"
BATCH_LIMIT = 5_000
MAX_ACK_PENDING = 100_000


class JournalService:
    """Runs until `stop()`, then journals what the stream holds up to that moment."""

    def __init__(self, bus: Bus, path: str | Path, *, batch_limit: int = BATCH_LIMIT) -> None:
        self.bus = bus
        self.path = Path(path)
        self.batch_limit = batch_limit
        self.last_seq = 0
        self.rows_written = 0
        self._ready = anyio.Event()
        self._stopping = anyio.Event()
        self._progress = anyio.Event()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        journal = Journal.open(self.path)
        try:
            stream = await self.bus.stream_incarnation()
            self.last_seq = journal.last_seq(stream)
            # No subject filter: the stream holds only journaled subjects, and a filter of
            # several subjects costs nats-server several times the work per message.
            consumer = await self.bus.consumer(
                CONSUMER,
                (),
                start=self.last_seq + 1,
                ack_all=True,
                max_ack_pending=MAX_ACK_PENDING,
                replace=True,
            )
            sub = await self.bus.nc.subscribe(self.bus.subjects.svc("journal"), cb=self._on_wait)
            self._ready.set()
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._copy, journal, stream, consumer)
                    await self._stopping.wait()
                    await self._catch_up()
                    tg.cancel_scope.cancel()
            finally:
                await sub.unsubscribe()
                await consumer.close()
        finally:
            journal.close()

    async def _copy(self, journal: Journal, stream: str, consumer: Consumer) -> None:
        while True:
            batch = await consumer.batch(self.batch_limit)
            rows: list[Incoming] = []
            for delivery in batch:
                env = await self.bus.decode_or_dead_letter(delivery)
                if env is not None:
                    rows.append((stream, delivery.stream_seq, delivery.subject, env, body_bytes(delivery.data)))
            self.rows_written += await anyio.to_thread.run_sync(journal.append, rows)
            await consumer.ack(batch[-1])
            self.last_seq = batch[-1].stream_seq
            self._progress.set()
            self._progress = anyio.Event()

    async def _catch_up(self) -> None:
        """Wait until everything the stream held when asked to stop is in the file."""
        info = await self.bus.js.stream_info(self.bus.subjects.stream)
        await self.wait_for(info.state.last_seq)

    async def wait_for(self, seq: int) -> None:
        while self.last_seq < seq:
            await self._progress.wait()

    async def _on_wait(self, msg: Msg) -> None:
        """Answer `{"until": seq}` once the journal holds everything up to `seq`."""
        until = int(msgspec.json.decode(msg.data or b"{}").get("until", 0))
        if self.last_seq < until:
            with anyio.move_on_after(60):
                await self.wait_for(until)
        await msg.respond(msgspec.json.encode({"last_seq": self.last_seq, "rows": self.rows_written}))
