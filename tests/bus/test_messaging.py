"""Core NATS through the bus against a real nats-server: requests and answers, notices, and the
stream and consumer state callers ask for; every failure is one of our errors, never the client's."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from faultline._errors import BusError, NoResponderError, ReplyTimeoutError
from faultline.bus import Bus, EmbeddedServer, Message, Subscription
from faultline.core import Envelope, Note


def note(i: int) -> Envelope:
    return Envelope(id=f"m{i}", episode="e1", sender="a", recipient="b", body=Note(text=str(i)))


async def test_a_handler_answers_a_request(bus: Bus) -> None:
    async def shout(msg: Message) -> None:
        await msg.respond(msg.subject.encode() + b":" + msg.data.upper())

    sub = await bus.subscribe("fl.svc.echo", shout)
    assert await bus.request("fl.svc.echo", b"ping", timeout_s=5) == b"fl.svc.echo:PING"
    await sub.unsubscribe()


async def test_a_handler_that_raises_is_logged_and_the_next_message_still_delivered(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    async def fussy(msg: Message) -> None:
        if msg.data == b"bad":
            raise ValueError("cannot take this one")
        await msg.respond(b"took " + msg.data)

    sub = await bus.subscribe("fl.svc.fussy", fussy)
    with caplog.at_level(logging.ERROR, logger="faultline.bus"):
        with pytest.raises(ReplyTimeoutError):
            await bus.request("fl.svc.fussy", b"bad", timeout_s=0.5)
        assert await bus.request("fl.svc.fussy", b"good", timeout_s=5) == b"took good"
    failed = [r for r in caplog.records if "fl.svc.fussy" in r.getMessage()]
    assert failed and failed[0].exc_info is not None and "cannot take this one" in str(failed[0].exc_info[1])
    await sub.unsubscribe()


async def test_a_subscription_without_handler_is_iterated_and_shared_in_a_queue(bus: Bus) -> None:
    first = await bus.subscribe("fl.svc.q", queue="q")
    second = await bus.subscribe("fl.svc.q", queue="q")
    await bus.notify("fl.svc.q", b"only once")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            got: list[bytes] = []

            async def read(sub: Subscription) -> None:
                async for msg in sub:
                    got.append(msg.data)
                    tg.cancel_scope.cancel()

            tg.start_soon(read, first)
            tg.start_soon(read, second)
    assert got == [b"only once"]
    for sub in (first, second):
        await sub.unsubscribe()


async def test_a_request_nobody_serves_is_a_no_responder_error_in_one_line(bus: Bus) -> None:
    with anyio.fail_after(5), pytest.raises(NoResponderError) as raised:
        await bus.request("fl.svc.nobody", b"{}", timeout_s=30)  # answered at once, not after the timeout
    message = str(raised.value)
    assert "\n" not in message and "fl.svc.nobody" in message and "start" in message


async def test_a_request_left_unanswered_is_a_reply_timeout_error(bus: Bus) -> None:
    sub = await bus.subscribe("fl.svc.mute")  # interest, but nobody reads or answers
    with pytest.raises(ReplyTimeoutError, match=r"no answer on fl\.svc\.mute within 0\.2s") as raised:
        await bus.request("fl.svc.mute", b"", timeout_s=0.2)
    assert isinstance(raised.value, BusError) and "\n" not in str(raised.value)
    await sub.unsubscribe()


async def test_request_all_gathers_every_answer_within_the_window(bus: Bus) -> None:
    def answering(name: bytes):  # type: ignore[no-untyped-def]
        async def answer(msg: Message) -> None:
            await msg.respond(name)

        return answer

    subs = [await bus.subscribe("fl.svc.status", answering(name)) for name in (b"w1", b"w2")]
    assert sorted(await bus.request_all("fl.svc.status", b"", window_s=0.5)) == [b"w1", b"w2"]
    assert await bus.request_all("fl.svc.none", b"", window_s=0.1) == []
    for sub in subs:
        await sub.unsubscribe()


async def test_a_notice_asks_for_no_answer(bus: Bus) -> None:
    sub = await bus.subscribe("fl.svc.state")
    await bus.notify("fl.svc.state", b"stuck")
    await bus.flush()
    with anyio.fail_after(5):
        msg = await anext(aiter(sub))
    assert (msg.subject, msg.data, msg.reply) == ("fl.svc.state", b"stuck", "")
    await msg.respond(b"nobody waits")  # nothing to send, and nothing to fail: a flood of such is no log of errors
    await sub.unsubscribe()
    await sub.unsubscribe()  # a second time is harmless
    with pytest.raises(NoResponderError):
        await bus.request("fl.svc.state", b"", timeout_s=5)


async def test_stream_state_counts_what_the_stream_stored(bus: Bus) -> None:
    assert (await bus.stream_state()).messages == 0
    await bus.publish_all([note(1), note(2), note(1)])  # the repeated id is stored once
    state = await bus.stream_state()
    assert (state.messages, state.last_seq) == (2, 2)


async def test_ack_floor_says_whether_a_durable_consumer_exists_and_how_far_it_acknowledged(bus: Bus) -> None:
    assert await bus.ack_floor("worker-x") is None
    consumer = await bus.consumer("worker-x", [bus.subjects.direct("*", "b")])
    assert await bus.ack_floor("worker-x") == 0
    await bus.publish_all(note(i) for i in range(3))
    got = []
    with anyio.fail_after(5):
        while len(got) < 3:
            got.extend(await consumer.batch())
    assert not await consumer.settled()  # delivered, not acknowledged
    for delivery in got:
        await consumer.ack(delivery)
    with anyio.fail_after(5):
        while not await consumer.settled():  # the server takes acks in on its own time: ask until it has
            pass
    assert await bus.ack_floor("worker-x") == 3
    await consumer.close(delete=True)
    assert await bus.ack_floor("worker-x") is None


async def test_a_closed_connection_fails_with_bus_errors(nats_server: EmbeddedServer) -> None:
    bus = await Bus.connect(nats_server.url)
    await bus.ensure_stream()
    sub = await bus.subscribe("fl.svc.late")
    await bus.close()
    await sub.unsubscribe()  # nothing left to remove
    calls = [
        bus.stream_state(),
        bus.ack_floor("any"),
        bus.request("fl.svc.late", b"", timeout_s=1),
        bus.notify("fl.svc.late", b""),
        bus.subscribe("fl.svc.late"),
        bus.consumer(None, bus.subjects.journaled[:1]),
    ]
    for call in calls:
        with pytest.raises(BusError):
            await call


async def test_a_server_gone_is_not_a_warning_per_reconnect_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose nats-server restarts tries again every 0.2 s: each failed attempt, handed to the error
    callback, was a warning, five lines a second in every process for as long as the server was away."""
    attempts = anyio.Event()
    seen: list[logging.LogRecord] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "NATS error" in record.getMessage():
                seen.append(record)
                if len(seen) >= 3:
                    attempts.set()

    counter, logger = Count(level=logging.DEBUG), logging.getLogger("faultline.bus")
    logger.addHandler(counter)
    server = EmbeddedServer(store_dir=tmp_path / "nats").start()
    try:
        with caplog.at_level(logging.DEBUG, logger="faultline.bus"):
            bus = await Bus.connect(server.url, name="patient")
            server.stop()
            with anyio.fail_after(10):
                await attempts.wait()
            await bus.nc.close()
    finally:
        logger.removeHandler(counter)
        server.stop()
    assert [r.getMessage() for r in seen if r.levelno >= logging.WARNING] == []


async def test_a_service_sent_notices_instead_of_questions_logs_no_error(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone who may publish on a service's subject may send it a message with no reply subject: its answer went
    nowhere with an error and a traceback in the log, one per message, a log that a flood could fill the disk with."""

    async def answer(msg: Message) -> None:
        await msg.respond(b"state")

    sub = await bus.subscribe("fl.svc.answering", answer)
    with caplog.at_level(logging.WARNING, logger="faultline"):
        for _ in range(3):
            await bus.notify("fl.svc.answering", b"no reply wanted")
        assert await bus.request("fl.svc.answering", b"", timeout_s=5) == b"state"  # after the notices, in order
    await sub.unsubscribe()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
