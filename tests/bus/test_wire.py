"""What any publisher can write on the NATS wire reaches the bus's readers as a message, and the next one after it.

nats-server passes on a subject, a reply subject and a header block as their publisher wrote them. Each case
here, written over a plain socket, stopped the NATS client's reading for good or had it reconnect, so that the
process went deaf while it seemed to run (and a consumer delivered the same message again after every reconnect).
"""

from __future__ import annotations

import anyio
import pytest

from faultline.bus import Bus, Delivery, EmbeddedServer, Message
from faultline.core import DeadLetter, Envelope, Note, decode_envelope
from tests.wire import hpub, pub, publish_stored, send

UNREADABLE = "\N{REPLACEMENT CHARACTER}"
INBOX = b"_INBOX.wire"

STORED = {
    "a-subject-that-is-not-utf-8": (pub(b"fl.ep.e\xff.b.a", b"\xc1", INBOX), f"fl.ep.e{UNREADABLE}.b.a"),
    "a-subject-with-a-vertical-tab": (pub(b"fl.ep.e\x0b.b.a", b"\xc1", INBOX), f"fl.ep.e{UNREADABLE}.b.a"),
    "a-subject-with-a-form-feed": (pub(b"fl.ep.\x0ce.b.a", b"\xc1", INBOX), f"fl.ep.{UNREADABLE}e.b.a"),
    "headers-without-their-first-line": (hpub(b"fl.ep.e1.b.a", b"\r\n\r\n", b"\xc1", INBOX), "fl.ep.e1.b.a"),
}


def note(i: int) -> Envelope:
    return Envelope(id=f"m{i}", episode="e1", sender="a", recipient="b", body=Note(text=str(i)))


async def arrived(bus: Bus, count: int) -> list[Delivery]:
    """The first `count` messages of the stream, as a reader of all of it is delivered them."""
    consumer = await bus.consumer(None, bus.subjects.journaled)
    got: list[Delivery] = []
    with anyio.fail_after(10):
        while len(got) < count:
            got.extend(await consumer.batch())
    await consumer.close()
    return got


@pytest.mark.parametrize("case", STORED)
async def test_a_stored_message_the_client_could_not_read_is_dead_lettered_and_the_next_one_delivered(
    case: str, bus: Bus, nats_server: EmbeddedServer
) -> None:
    operation, shown = STORED[case]
    seq = await publish_stored(nats_server.url, operation, INBOX)
    await bus.publish(note(1))
    first, second = await arrived(bus, 2)
    assert (first.stream_seq, first.subject) == (seq, shown)
    assert await bus.decode_or_dead_letter(first) is None
    assert await bus.decode_or_dead_letter(second) == note(1)
    letter = (await arrived(bus, 3))[2]
    body = decode_envelope(letter.data).body
    assert isinstance(body, DeadLetter) and (body.stream_seq, body.subject, body.data) == (seq, shown, b"\xc1")
    assert body.reason.startswith("not msgpack")


CORE = {
    "a-reply-that-is-not-utf-8": (pub(b"fl.svc.echo", b"bad", b"\xff\xfe"), "fl.svc.echo"),
    "a-reply-with-a-vertical-tab": (pub(b"fl.svc.echo", b"bad", b"a\x0bb"), "fl.svc.echo"),
    "a-status-that-is-not-utf-8": (hpub(b"fl.svc.echo", b"NATS/1.0 \xff\xff\xff\r\n\r\n", b"bad"), "fl.svc.echo"),
    "headers-without-their-first-line": (hpub(b"fl.svc.echo", b"\r\n\r\n", b"bad"), "fl.svc.echo"),
    "a-subject-that-is-not-utf-8": (pub(b"fl.svc.echo.\xff", b"bad"), f"fl.svc.echo.{UNREADABLE}"),
}


@pytest.mark.parametrize("case", CORE)
async def test_a_request_the_client_could_not_read_gets_no_answer_and_the_next_one_its_answer(
    case: str, bus: Bus, nats_server: EmbeddedServer
) -> None:
    """A reply subject that cannot be read asks for no answer (nobody can be waiting there)."""
    operation, shown = CORE[case]
    heard: list[tuple[str, bytes, str]] = []

    async def echo(msg: Message) -> None:
        heard.append((msg.subject, msg.data, msg.reply))
        await msg.respond(msg.data)

    subs = [await bus.subscribe("fl.svc.echo", echo), await bus.subscribe("fl.svc.echo.*", echo)]
    await send(nats_server.url, operation)
    assert await bus.request("fl.svc.echo", b"good", timeout_s=10) == b"good"
    assert heard[0] == (shown, b"bad", "") and heard[1][:2] == ("fl.svc.echo", b"good")
    for sub in subs:
        await sub.unsubscribe()
