"""A worker restarted after another reset its agent's consumer and went before its next delivery.

A reset numbers a consumer's deliveries from 0 again and clears what waited for acknowledgement, so such a
consumer looked never read: the worker after it took it for fresh, rebuilt no instance, and answered its episodes'
next inputs from empty ones (the tool agent's user turn with nothing). `Bus.own_consumer` tells the two apart by
what the stream holds on the consumer's filters; here a real worker meets that consumer on a real nats-server.
"""

from __future__ import annotations

import anyio

from faultline.bus import Bus, Message
from faultline.core import Agent, Context, Envelope, Note, Notice, decode_envelope
from faultline.runtime import Worker
from faultline.runtime._worker import consumer_name
from tests.runtime.toy import EchoBackend

WAIT_S = 20.0
POLL_S = 0.02
EPISODE = "ep"
CONSUMER = consumer_name("tally", 0, 1)


class Tally(Agent):
    """Says how many inputs of its episode it has seen: an instance that starts over says 1 again."""

    name = "tally"

    def __init__(self) -> None:
        self.seen = 0

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        self.seen += 1
        ctx.emit(Notice(text="seen", data={"seen": self.seen}))


def note(i: int) -> Envelope:
    return Envelope(id=f"n{i}", episode=EPISODE, sender="feeder", recipient=Tally.name, body=Note(text=str(i)))


class Said:
    """The counts the episode's instances said, in order, and a way to wait for the n-th."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._changed = anyio.Event()

    async def on_notice(self, msg: Message) -> None:
        body = decode_envelope(msg.data).body
        assert isinstance(body, Notice)
        self.counts.append(int(body.data["seen"]))
        self._changed.set()

    async def until(self, n: int) -> None:
        with anyio.fail_after(WAIT_S):
            while len(self.counts) < n:
                await self._changed.wait()
                self._changed = anyio.Event()


def worker(bus: Bus) -> Worker:
    return Worker(bus, [Tally], backends=lambda role: EchoBackend())


async def acknowledged(bus: Bus) -> None:
    """Until the consumer has taken in the acknowledgements the stopped worker sent: its server reads them a moment
    after they come, and only the consumer's state tells when."""
    with anyio.fail_after(WAIT_S):
        while await bus.unacknowledged(CONSUMER):
            await anyio.sleep(POLL_S)


async def test_a_worker_after_one_that_reset_its_consumer_and_went_rebuilds_the_episode_from_the_stream(
    bus: Bus,
) -> None:
    said = Said()
    await bus.subscribe(bus.subjects.event("notice", EPISODE), said.on_notice)

    first = worker(bus)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await first.wait_ready()
        await bus.publish_all([note(0), note(1)])
        await said.until(2)
        first.stop()
    await acknowledged(bus)

    # The worker after it takes over a consumer that delivered, so it resets it to its acknowledgement floor, and
    # is gone before anything more is delivered: killed, or stopped as here.
    gone = worker(bus)
    async with anyio.create_task_group() as tg:
        tg.start_soon(gone.run)
        await gone.wait_ready()
        gone.stop()
    info = await bus.js.consumer_info(bus.subjects.stream, CONSUMER)
    assert info.delivered is not None and info.ack_floor is not None
    looks_unread = (info.delivered.consumer_seq, info.num_ack_pending, info.num_pending)
    assert looks_unread == (0, 0, 0) and info.ack_floor.stream_seq == info.delivered.stream_seq, info

    restarted = worker(bus)
    async with anyio.create_task_group() as tg:
        tg.start_soon(restarted.run)
        await restarted.wait_ready()
        await bus.publish(note(2))
        await said.until(3)
        restarted.stop()
    assert said.counts == [1, 2, 3], "the third input met an instance rebuilt from the two before it"
