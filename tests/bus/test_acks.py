"""How the answers JetStream gives a publish are read: stored, refused for good, or worth sending again."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from faultline._errors import BusError
from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.bus._acks import Confirmations, Publish, Round
from faultline.core import Envelope, Note


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        ({"code": 409, "err_code": 10158, "description": "duplicate message id is in process"}, True),
        ({"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}, True),
        ({"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}, False),
    ],
)
async def test_a_refusal_is_sent_again_only_when_it_may_pass(
    bus: Bus, error: dict[str, object], transient: bool
) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode({"error": error}))

    await bus.nc.subscribe("fake.stream", cb=answer)
    publish, round_ = Publish("fake.stream", b"x", "m1"), Round()
    await Confirmations(bus.nc, 10).send(publish, round_)
    round_.seal()
    with anyio.fail_after(10):
        await round_.done
    assert publish.answered
    assert publish.failure == f"{error['description']} (code {error['code']})"
    assert publish.transient is transient
    assert publish.held is (error["err_code"] == 10071)  # a subject taken (`Publish.first`): an answer to act on


def note(i: int) -> Envelope:
    return Envelope(id=f"m{i}", episode="e1", sender="a", recipient="b", body=Note(text=str(i)))


async def test_an_answer_read_after_the_publish_was_sent_again_still_confirms_it(nats_server: EmbeddedServer) -> None:
    """A busy process reads the answer to a publish's first copy after its own timer sent a second: that
    late answer confirms the publish, though the second copy's answer never comes."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_timeout_s=0.05, publish_retry_s=1.0))
    await bus.ensure_stream()
    held: list[Msg] = []
    second_copy_answered = anyio.Event()
    read = bus._acks._on_answer

    async def read_later(msg: Msg) -> None:
        held.append(msg)
        if len(held) == 2:
            second_copy_answered.set()

    bus._acks._on_answer = read_later  # type: ignore[method-assign]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.publish, note(1))
            with anyio.fail_after(10):
                await second_copy_answered.wait()
            await read(held[0])  # the first copy's answer, read at last; the second's is never read
        assert (await bus.stream_state()).messages == 1
    finally:
        await bus.close()


async def test_a_publish_no_stream_confirms_fails_after_the_retry_time(nats_server: EmbeddedServer) -> None:
    """Nothing read late here: no stream answers at all, so the publish fails once `publish_retry_s` is over."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_timeout_s=0.05, publish_retry_s=0.3))
    try:
        with anyio.fail_after(10), pytest.raises(BusError, match="did not confirm 1 publish"):
            await bus.publish(note(1))
    finally:
        await bus.close()


async def test_a_publish_overtaken_by_later_confirmed_ones_is_sent_again(nats_server: EmbeddedServer) -> None:
    """Publishes sent after it were confirmed and it was not: its copy was lost, so it is sent again, though
    this process reads confirmations."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_timeout_s=0.1, publish_retry_s=5.0))
    await bus.ensure_stream()
    dropped = False
    read = bus._acks._on_answer

    async def lose_first(msg: Msg) -> None:
        nonlocal dropped
        if not dropped:
            dropped = True  # the first answer never arrives
            return
        await read(msg)

    bus._acks._on_answer = lose_first  # type: ignore[method-assign]
    try:
        with anyio.fail_after(10):
            await bus.publish_all([note(1), note(2), note(3)])
        assert (await bus.stream_state()).messages == 3
    finally:
        await bus.close()
