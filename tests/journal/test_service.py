"""The journal service against a real nats-server and a real SQLite file."""

from __future__ import annotations

import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from anyio.abc import TaskGroup
from nats.aio.msg import Msg

from faultline._errors import BusError, JournalError, ReplyTimeoutError
from faultline.bus import Bus, Consumer, EmbeddedServer
from faultline.core import DeadLetter, Envelope, Note, UserTurn, encode
from faultline.journal import Journal, JournalReader, verify
from faultline.runtime import ask_journal as runtime_ask_journal
from faultline.runtime._journal_service import MAX_WAITING, JournalService
from tests.disk import fill


def note(i: int) -> Envelope:
    return Envelope(id=f"m{i}", episode=f"e{i % 3}", sender="a", recipient="b", body=Note(text="x" * 150))


@asynccontextmanager
async def started(service: JournalService) -> AsyncIterator[TaskGroup]:
    """`service` running in a task group, once it serves; the group is the test's to start more in."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_ready()
        yield tg


async def test_every_published_message_is_journaled_in_stream_order(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path)
    async with started(service):
        await bus.publish_all(note(i) for i in range(2000))
        with anyio.fail_after(20):
            await service.wait_for(2000)
        service.stop()
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [r.id for r in rows] == [f"m{i}" for i in range(2000)]
    assert [r.stream_seq for r in rows] == list(range(1, 2001))
    assert [r.pos for r in rows] == list(range(1, 2001))
    assert rows[5].envelope() == note(5)
    assert verify(path).ok


async def test_batches_gather_while_nobody_waits_and_go_at_once_when_someone_does(bus: Bus, tmp_path: Path) -> None:
    """Gathering saves the journal transactions; whoever waits for a sequence, asking on the bus or in the process
    (a run's end, a stop), cuts it short."""
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path, batch_gather_s=3600)
    with anyio.fail_after(30):  # a gathering that nobody cut short would hold each step for an hour
        async with started(service):
            await bus.publish_all(note(i) for i in range(10))
            assert (await ask_journal(bus, until=10))["last_seq"] == 10
            await bus.publish_all(note(i) for i in range(10, 20))
            await service.wait_for(20)
            await bus.publish_all(note(i) for i in range(20, 25))
            service.stop()  # the task group's end waits for the stop's catching up
    assert service.last_seq == 25
    with JournalReader(path) as reader:
        assert [r.id for r in reader.rows()] == [f"m{i}" for i in range(25)]


async def test_a_flood_of_questions_for_a_sequence_never_reached_leaves_the_journal_journaling(
    bus: Bus, tmp_path: Path
) -> None:
    """Each question for a sequence the stream never reaches used to wait for ever, and cost a look at all the
    others: a credential that may ask (any) stalled the journal with a second of them. Past MAX_WAITING the
    oldest is answered at once with what the journal holds."""
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path)
    flood = 20 * MAX_WAITING
    answered, all_answered = anyio.Event(), anyio.Event()
    answers = 0

    async def count(_msg: Msg) -> None:
        nonlocal answers
        answers += 1
        if answers == flood - MAX_WAITING:
            answered.set()
        if answers == flood:
            all_answered.set()

    await bus.nc.subscribe("_INBOX.flood", cb=count)
    with anyio.fail_after(60):
        async with started(service):
            for _ in range(flood):
                await bus.nc.publish(bus.subjects.svc("journal"), b'{"until": 1000000000000}', reply="_INBOX.flood")
            await bus.publish_all(note(i) for i in range(10))
            assert (await ask_journal(bus, until=10))["last_seq"] == 10
            await answered.wait()
            service.stop()
        await all_answered.wait()  # the last MAX_WAITING, at the stop
    with JournalReader(path) as reader:
        assert [r.id for r in reader.rows()] == [f"m{i}" for i in range(10)]


async def test_deliveries_lost_on_the_way_are_read_again_not_acknowledged_unseen(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As when the service's server pauses: the consumer sent 3 to 5, they never arrived, 6 on did."""
    path = tmp_path / "j.sqlite"
    arrive = Consumer._on_msg
    dropped: list[str] = []

    async def lossy(self: Consumer, msg: Msg) -> None:
        if msg.reply and msg.reply.split(".")[5] in {"3", "4", "5"} and len(dropped) < 3:
            dropped.append(msg.reply)
            return
        await arrive(self, msg)

    monkeypatch.setattr(Consumer, "_on_msg", lossy)
    opened = bus.consumer
    opens = 0

    async def unavailable_once(*args: Any, **kwargs: Any) -> Consumer:
        """The first reopening meets a cluster still electing a leader."""
        nonlocal opens
        opens += 1
        if opens == 2:
            raise BusError("opening consumer journal failed: JetStream system temporarily unavailable")
        return await opened(*args, **kwargs)

    monkeypatch.setattr(bus, "consumer", unavailable_once)
    service = JournalService(bus, path)
    async with started(service):
        await bus.publish_all(note(i) for i in range(10))
        with anyio.fail_after(20):
            await service.wait_for(10)
        service.stop()
    assert len(dropped) == 3
    assert opens == 3
    with JournalReader(path) as reader:
        assert [r.stream_seq for r in reader.rows()] == list(range(1, 11))
    assert verify(path).ok
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("reading the stream again from 3" in m for m in said)
    assert any("temporarily unavailable; asking again" in m for m in said)


async def test_sequences_deleted_from_the_stream_are_logged_and_skipped(
    bus: Bus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.sqlite"
    await bus.publish_all(note(i) for i in range(5))
    await bus.js.delete_msg(bus.subjects.stream, 3)
    service = JournalService(bus, path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(20):
            await service.wait_for(5)
        service.stop()
    with JournalReader(path) as reader:
        assert [r.stream_seq for r in reader.rows()] == [1, 2, 4, 5]
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.levelname == "ERROR"] == [
        "the stream no longer holds sequences 3 to 3 (deleted); the journal goes on from 4"
    ]


async def test_malformed_messages_are_dead_lettered_and_journaled(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path)
    async with started(service):
        await bus.publish(note(0))
        await bus.publish_raw("fl.ep.e0.b.a", b"\xc1 not msgpack")
        await bus.publish_raw("fl.ep.e0.b.a", b"\x81\xa4body\x01")  # msgpack of the wrong shape
        await bus.publish(
            Envelope(id="after", episode="e0", sender="a", recipient="b", body=UserTurn(text="still here"))
        )
        with anyio.fail_after(20):
            await service.wait_for(6)  # 4 published + 2 dead letters
        service.stop()
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert sorted(r.kind for r in rows) == ["dead_letter", "dead_letter", "note", "user_turn"]
    assert [r.id for r in rows if r.kind != "dead_letter"] == ["m0", "after"]
    letters = [r.envelope().body for r in rows if r.kind == "dead_letter"]
    assert all(isinstance(b, DeadLetter) for b in letters)
    by_data = {b.data: b for b in letters}  # type: ignore[union-attr]
    assert by_data.keys() == {b"\xc1 not msgpack", b"\x81\xa4body\x01"}
    assert by_data[b"\xc1 not msgpack"].reason.startswith("not msgpack")
    assert "Object missing" in by_data[b"\x81\xa4body\x01"].reason or "$" in by_data[b"\x81\xa4body\x01"].reason
    journaled = {r.stream_seq for r in rows if r.kind != "dead_letter"}
    assert {b.stream_seq for b in letters}.isdisjoint(journaled)  # type: ignore[union-attr]
    assert verify(path).ok


def _serve(url: str, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "faultline.cli", "journal", "serve", str(path), "--nats", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _rows_at_least(path: Path, n: int) -> None:
    """Wait (polling the file another process writes) until it holds n rows."""
    while True:
        if path.exists():
            try:
                with JournalReader(path) as reader:
                    if reader.last_pos >= n:
                        return
            except Exception:  # noqa: BLE001 - the writer may not have created the schema yet
                pass
        await anyio.sleep(0.02)


@pytest.mark.slow
async def test_sigkill_mid_stream_leaves_no_gap_and_no_duplicate(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    path = tmp_path / "j.sqlite"
    total = 20_000
    process = _serve(nats_server.url, path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bus.publish_all, [note(i) for i in range(total)])
            with anyio.fail_after(30):
                await _rows_at_least(path, 2000)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        with JournalReader(path) as reader:
            assert 0 < reader.last_pos < total, "the kill must land mid-stream"
        process = _serve(nats_server.url, path)
        with anyio.fail_after(60):
            await _rows_at_least(path, total)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [r.stream_seq for r in rows] == list(range(1, total + 1))
    assert [r.id for r in rows] == [f"m{i}" for i in range(total)]
    assert verify(path).ok


async def test_envelopes_the_journal_cannot_take_are_dead_lettered_and_it_goes_on(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path)
    refused = {
        "fl.ep.e0.b.a": msgspec.structs.replace(note(0), ts=math.nan),
        "fl.ep.e1.b.a": msgspec.structs.replace(note(1), hops=2**63),
        "fl.ep.e0.c.a": note(3),  # addressed to b
    }
    async with started(service):
        for subject, env in refused.items():
            await bus.publish_raw(subject, encode(env), env.id)
        await bus.publish(note(4))
        with anyio.fail_after(20):
            await service.wait_for(7)  # 4 published + 3 dead letters
        service.stop()
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [r.id for r in rows if r.kind != "dead_letter"] == ["m4"]
    letters = [r.envelope().body for r in rows if r.kind == "dead_letter"]
    reasons = {letter.data: letter.reason for letter in letters if isinstance(letter, DeadLetter)}
    assert reasons.keys() == {encode(env) for env in refused.values()}
    assert reasons[encode(refused["fl.ep.e0.b.a"])].endswith("got nan - at `$.ts`")
    assert reasons[encode(refused["fl.ep.e1.b.a"])].endswith(f"got {2**63} - at `$.hops`")
    assert reasons[encode(refused["fl.ep.e0.c.a"])].endswith("got `fl.ep.e0.c.a` - at `$.recipient`")
    assert verify(path).ok


async def test_a_row_the_file_refuses_becomes_a_journaled_dead_letter(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    Journal.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON messages WHEN NEW.id = 'poison'"
            " BEGIN SELECT RAISE(ABORT, 'this row is poison'); END"
        )
    poison = Envelope(id="poison", episode="e1", sender="a", recipient="b", body=Note(text="x"))
    service = JournalService(bus, path)
    async with started(service):
        await bus.publish_all([note(0), poison, note(2)])
        with anyio.fail_after(20):
            await service.wait_for(4)  # 3 published + 1 dead letter
        service.stop()
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [(r.stream_seq, r.id) for r in rows] == [(1, "m0"), (3, "m2"), (4, "dlq-2")]
    letter = rows[-1].envelope().body
    assert isinstance(letter, DeadLetter) and letter.stream_seq == 2 and letter.data == encode(poison)
    assert letter.reason.startswith("the journal cannot store it: ") and "this row is poison" in letter.reason


async def ask_journal(bus: Bus, until: int = 0) -> dict[str, Any]:
    reply = await bus.nc.request(bus.subjects.svc("journal"), msgspec.json.encode({"until": until}), timeout=10)
    return msgspec.json.decode(reply.data)  # type: ignore[no-any-return]


async def test_an_early_answer_in_a_flood_is_not_taken_for_the_journal_having_caught_up(
    bus: Bus, tmp_path: Path
) -> None:
    """While others keep more than MAX_WAITING questions waiting, the journal answers the oldest early, with less
    than they asked for: `faultline run` took such an answer for the journal holding its episodes."""
    service = JournalService(bus, tmp_path / "j.sqlite")
    flooding = anyio.Event()

    async def flood() -> None:
        while True:
            for _ in range(MAX_WAITING):
                await bus.nc.publish(bus.subjects.svc("journal"), b'{"until": 1000000000000}', reply="_INBOX.flood")
            flooding.set()
            await bus.nc.flush()

    async with started(service) as tg:
        await bus.publish_all(note(i) for i in range(3))
        with anyio.fail_after(20):
            await service.wait_for(3)
        tg.start_soon(flood)
        await flooding.wait()
        with pytest.raises(ReplyTimeoutError, match="holds the stream up to sequence 3, not yet 5"):
            await runtime_ask_journal(bus, 2.0, until=5)
        await bus.publish_all(note(i) for i in range(3, 5))
        assert (await runtime_ask_journal(bus, 20.0, until=5)).last_seq >= 5
        tg.cancel_scope.cancel()


async def test_a_full_disk_holds_the_journal_loses_nothing_and_it_catches_up(bus: Bus, small_disk: Path) -> None:
    path = small_disk / "j.sqlite"
    service = JournalService(bus, path)
    first, total = 200, 3000
    async with started(service):
        await bus.publish_all(note(i) for i in range(first))
        with anyio.fail_after(20):
            await service.wait_for(first)
        filler = fill(small_disk)
        await bus.publish_all(note(i) for i in range(first, total))
        answer = await ask_journal(bus, until=total)  # answered when all are journaled, or when the file refuses
        assert "database or disk is full" in answer["stuck"] and answer["stuck"] == service.stuck
        assert first <= answer["last_seq"] < total
        consumer = await bus.js.consumer_info(bus.subjects.stream, "journal")
        assert consumer.ack_floor is not None and consumer.ack_floor.stream_seq <= answer["last_seq"]
        stream = await bus.js.stream_info(bus.subjects.stream)
        assert stream.state.messages == total
        filler.unlink()
        with anyio.fail_after(30):
            await service.wait_for(total)
        answer = await ask_journal(bus)
        assert answer == {"last_seq": total, "rows": total, "stuck": "", "shard": 0, "shards": 1, "journal": str(path)}
        service.stop()
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    assert [r.stream_seq for r in rows] == list(range(1, total + 1))
    assert [r.id for r in rows] == [f"m{i}" for i in range(total)]
    assert verify(path).ok


async def test_stopped_while_the_disk_is_full_it_says_so_and_the_next_start_catches_up(
    bus: Bus, small_disk: Path
) -> None:
    path = small_disk / "j.sqlite"
    first, total = 100, 600
    service = JournalService(bus, path)
    failure: list[JournalError] = []

    async def serve() -> None:
        try:
            await service.run()
        except JournalError as exc:
            failure.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        await service.wait_ready()
        await bus.publish_all(note(i) for i in range(first))
        with anyio.fail_after(20):
            await service.wait_for(first)
        filler = fill(small_disk)
        await bus.publish_all(note(i) for i in range(first, total))
        assert (await ask_journal(bus, until=total))["stuck"]
        service.stop()
    (error,) = failure
    behind = re.match(
        rf"stopped behind the stream, at sequence (\d+) of {total}: .*database or disk is full", str(error)
    )
    assert behind is not None and first <= int(behind[1]) < total, error
    filler.unlink()
    service = JournalService(bus, path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(20):
            await service.wait_for(total)
        service.stop()
    with JournalReader(path) as reader:
        assert [r.stream_seq for r in reader.rows()] == list(range(1, total + 1))
    assert verify(path).ok
