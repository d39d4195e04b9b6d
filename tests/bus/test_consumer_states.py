"""What the server says of the stream's consumers and of an episode's last message: what a runner proves an
episode stalled from (`runtime.StallWatch`)."""

from __future__ import annotations

import json

import anyio
import pytest
from nats.aio.msg import Msg

from faultline._errors import BusError
from faultline.bus import Bus, BusSettings, ConsumerState, EmbeddedServer
from faultline.core import Envelope, Note, Start, Subjects, Timer


@pytest.mark.parametrize(
    ("filters", "subject", "sent"),
    [
        ((), "fl.ep.e1.a.b", True),
        (("fl.ep.*.a.*",), "fl.ep.e1.a.b", True),
        (("fl.ep.*.a.*",), "fl.ep.e1.b.a", False),
        (("fl.ep.*.a.*",), "fl.ep.e1.a.b.c", False),
        (("fl.ep.*.a.*",), "fl.ep.e1.a", False),
        (("fl.tp.*.q.*", "fl.ep.*.a.*"), "fl.tp.e1.q.a", True),
        (("fl.>",), "fl.ep.e1.a.b", True),
        (("fl.ep.>",), "fl.ep", False),
        (("fl.1of2.ep.*.a.*",), "fl.0of2.ep.e1.a.b", False),
    ],
)
def test_a_consumer_is_sent_the_subjects_its_filters_match_as_nats_matches_them(
    filters: tuple[str, ...], subject: str, sent: bool
) -> None:
    assert ConsumerState("c", filters, 0).receives(subject) is sent


async def test_the_consumers_that_acknowledge_are_listed_with_their_filters_and_floors(bus: Bus) -> None:
    durable = await bus.consumer("agent-a-0of1", [bus.subjects.direct("*", "a")], start="all")
    reading = await bus.consumer(None, [bus.subjects.direct("*", "*")], start="all")
    try:
        first, second = (Envelope(id=f"n{i}", episode="e1", sender="b", recipient="a", body=Note()) for i in (1, 2))
        await bus.publish_all([first, second])
        with anyio.fail_after(10):
            got = await durable.batch()
            while len(got) < 2:
                got += await durable.batch()
        await durable.ack(got[0])
        await bus.flush()
        with anyio.fail_after(10):
            while (states := await bus.acknowledging())[0].ack_floor < got[0].stream_seq:
                await anyio.sleep(0.05)  # the server takes the acknowledgement in on its own time
        assert states == [ConsumerState("agent-a-0of1", ("fl.ep.*.a.*",), got[0].stream_seq)]
    finally:
        await durable.close()
        await reading.close()


async def test_an_episodes_last_message_is_looked_up_on_all_its_subjects(nats_server: EmbeddedServer) -> None:
    bus = await Bus.connect(nats_server.url, settings=BusSettings(partitions=2))
    try:
        await bus.ensure_stream()
        s: Subjects = bus.subjects
        assert await bus.last_stored(s.of_episode("e1")) == 0
        start = Envelope(id="s1", episode="e1", sender="runner", recipient="a", body=Start())
        timer = Envelope(id="t1", episode="e1", sender="a", body=Timer(after_s=5))
        other = Envelope(id="o1", episode="e2", sender="runner", recipient="a", body=Start())
        await bus.publish_all([start, timer, other])
        stream = await bus.stream_state()
        assert await bus.last_stored(s.of_episode("e1")) == stream.last_seq - 1  # its timer, not e2's start
        assert await bus.last_stored(s.of_episode("e2")) == stream.last_seq
    finally:
        await bus.close()


async def test_a_list_missing_a_consumer_whose_node_did_not_answer_is_refused(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's server lists a consumer whose leader does not answer as missing: judged without it, an episode
    whose messages it holds would look handled."""
    durable = await bus.consumer("agent-a-0of1", [bus.subjects.direct("*", "a")], start="all")
    request = bus.nc.request

    async def missing_one(subject: str, payload: bytes = b"", timeout: float = 0.5) -> Msg:
        answer = await request(subject, payload, timeout=timeout)
        page = json.loads(answer.data)
        page["missing"], page["consumers"] = [c["name"] for c in page["consumers"]], []
        answer.data = json.dumps(page).encode()
        return answer

    try:
        assert [state.name for state in await bus.acknowledging()] == ["agent-a-0of1"]
        monkeypatch.setattr(bus.nc, "request", missing_one)
        with pytest.raises(BusError, match="agent-a-0of1 did not answer"):
            await bus.acknowledging()
    finally:
        await durable.close()
