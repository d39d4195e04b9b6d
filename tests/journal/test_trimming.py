"""The journal trims the stream of what it holds of settled episodes, against a real nats-server and SQLite file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline._errors import JournalStorageError
from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.core import CONTROL_EPISODE, Control, DeadLetter, Envelope, Note, Subjects, episode_shard
from faultline.journal import Incoming, Journal, JournalReader, shard_path, verify
from faultline.runtime._journal_service import JournalService, consumer_name
from faultline.runtime._trimming import EpisodesKept
from tests.journal.test_service import started


def message(episode: str, i: int) -> Envelope:
    return Envelope(id=f"{episode}-{i}", episode=episode, sender="a", recipient="b", body=Note(text="x" * 100))


def control(i: int) -> Envelope:
    return Envelope(id=f"ctl-{i}", episode=CONTROL_EPISODE, sender="operator", body=Control(name="faults"))


async def held(bus: Bus, episode: str) -> list[str]:
    """The ids of the messages of `episode` the stream still holds."""
    return [env.id for _, env in await bus.read_envelopes([bus.subjects.direct(episode, "*")], 10.0)]


async def until(condition: Callable[[], object], timeout_s: float = 20.0) -> None:
    """Wait for an async `condition` to hold, looking again every 20 ms."""
    with anyio.fail_after(timeout_s):
        while not await condition():  # type: ignore[misc]
            await anyio.sleep(0.02)


async def looked_twice_more(looks: Callable[[], int]) -> None:
    """Wait until the trim has looked twice more than `looks()` says now: once to decide, once after it did."""
    since = looks()

    async def looked_twice_since() -> bool:
        return looks() >= since + 2

    await until(looked_twice_since)


def test_an_episode_is_kept_from_its_first_message_until_it_has_been_silent_for_the_keep() -> None:
    kept = EpisodesKept(keep_s=10.0)
    kept.seen([("a", 1), ("b", 2), ("a", 3)], now=0.0)
    kept.seen([("b", 4)], now=5.0)
    assert kept.floor(now=9.0, written=4) == 1  # a sent its last 9 s ago
    assert kept.floor(now=9.0, written=0) == 1  # never past what the journal holds
    assert kept.floor(now=11.0, written=4) == 2  # a settled; b holds from its first message
    assert kept.floor(now=11.0, written=1) == 2
    assert kept.floor(now=16.0, written=4) == 5  # both settled: everything journaled may go
    assert len(kept) == 0


def test_one_long_episode_holds_back_the_settled_ones_after_it() -> None:
    kept = EpisodesKept(keep_s=10.0)
    kept.seen([("long", 1), ("short", 2)], now=0.0)
    kept.seen([("long", 3)], now=8.0)
    assert kept.floor(now=12.0, written=3) == 1
    assert len(kept) == 2
    kept.seen([("late", 4)], now=20.0)  # a message after its episode settled starts it again
    assert kept.floor(now=21.0, written=4) == 4


def test_a_shards_trim_names_its_partitions_and_never_a_control_or_a_dead_letter() -> None:
    assert Subjects().shard_episodes(0, 1) == ["fl.ep.>", "fl.tp.>", "fl.rec.>", "fl.ev.>"]
    assert Subjects(partitions=4).shard_episodes(1, 2) == ["fl.1of4.>", "fl.3of4.>"]
    assert Subjects(partitions=4).shard_episodes(0, 1) == ["fl.0of4.>", "fl.1of4.>", "fl.2of4.>", "fl.3of4.>"]


async def test_a_settled_episode_is_trimmed_and_an_active_one_the_controls_and_the_journal_are_kept(
    bus: Bus, tmp_path: Path
) -> None:
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path, trim_after_s=2.0, trim_every_s=0.05)  # the beats have 2 s to come
    beats = 0

    async def keep_active() -> None:
        nonlocal beats
        while True:
            beats += 1
            await bus.publish(message("active", beats))
            await anyio.sleep(0.05)

    async with started(service) as tg:
        await bus.publish_all([*(message("settled", i) for i in range(20)), control(0)])
        await service.wait_for(21)
        tg.start_soon(keep_active)

        async def settled_gone() -> bool:  # a trim is done once every filter was trimmed: then it says so
            return service.trimmed_below > 21 and not await held(bus, "settled")

        await until(settled_gone)
        tg.cancel_scope.cancel()
    assert await held(bus, "active") == [f"active-{i}" for i in range(1, beats + 1)]
    assert [env.id for _, env in await bus.read_envelopes([bus.subjects.ctl("faults")], 10.0)] == ["ctl-0"]
    with JournalReader(path) as reader:
        ids = [row.id for row in reader.rows()]
    assert ids[:21] == [*(f"settled-{i}" for i in range(20)), "ctl-0"]
    assert verify(path).ok


async def test_a_journal_started_again_keeps_what_it_finds_in_the_stream_for_the_whole_keep(
    bus: Bus, tmp_path: Path
) -> None:
    """It cannot tell which episodes of its rows are settled: trimming them at once would take an episode in flight
    from under the worker that rebuilds it."""
    path = tmp_path / "j.sqlite"
    first = JournalService(bus, path)
    async with started(first):
        await bus.publish_all(message("in-flight", i) for i in range(5))
        await first.wait_for(5)
        first.stop()
    keep_s = 2.0
    again = JournalService(bus, path, trim_after_s=keep_s, trim_every_s=0.05)
    restarted = time.monotonic()
    async with started(again):

        async def trimmed() -> bool:
            return not await held(bus, "in-flight")

        await until(trimmed)
        again.stop()
    assert time.monotonic() - restarted >= keep_s
    with JournalReader(path) as reader:
        assert [row.id for row in reader.rows()] == [f"in-flight-{i}" for i in range(5)]


async def test_an_episode_whose_first_batch_a_full_disk_held_is_kept_from_its_first_message(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the file refused is written again later, by another way than the batches that follow: its episodes
    must be seen there too, or the journal takes an episode in flight for one it never saw and trims it at once."""
    append = Journal.append
    refused = False

    def full_once(journal: Journal, rows: Iterable[Incoming], **kwargs: Any) -> int:
        nonlocal refused
        rows = list(rows)
        if not refused and any(row.envelope.episode == "held" for row in rows):
            refused = True
            raise JournalStorageError("database or disk is full")
        return append(journal, rows, **kwargs)

    monkeypatch.setattr(Journal, "append", full_once)
    keep_s = 2.0
    service = JournalService(bus, tmp_path / "j.sqlite", trim_after_s=keep_s, trim_every_s=0.05)
    async with started(service):
        await bus.publish_all(message("held", i) for i in range(3))
        await service.wait_for(3)
        written = time.monotonic()

        async def trimmed() -> bool:
            return not await held(bus, "held")

        await until(trimmed)
        service.stop()
    assert refused
    assert time.monotonic() - written >= keep_s - 0.5  # it was last seen as the held batch came in


async def test_a_shard_trims_only_the_episodes_of_its_own_partitions(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    bus = await Bus.connect(nats_server.url, settings=BusSettings(partitions=2))
    await bus.ensure_stream()
    episodes = [f"e{i}" for i in range(8)]
    mine = [e for e in episodes if episode_shard(e, 2) == 0]
    assert mine and len(mine) < len(episodes)
    trimming = JournalService(bus, tmp_path / "set", shard=0, shards=2, trim_after_s=0.2, trim_every_s=0.05)
    keeping = JournalService(bus, tmp_path / "set", shard=1, shards=2)
    try:
        async with started(trimming), started(keeping):
            await bus.publish_all(message(e, i) for e in episodes for i in range(3))

            async def mine_gone() -> bool:
                return not any([await held(bus, e) for e in mine])

            await until(mine_gone)
            trimming.stop()
            keeping.stop()
        for episode in episodes:
            assert await held(bus, episode) == ([] if episode in mine else [f"{episode}-{i}" for i in range(3)])
    finally:
        await bus.close()
    with JournalReader(tmp_path / "set") as reader:
        assert len(list(reader.rows())) == 3 * len(episodes)


def forged_letter(episode: str, i: int) -> Envelope:
    """A well-formed dead letter as any credential may publish one: it names the episode it likes."""
    body = DeadLetter(reason="forged", subject="fl.nowhere", data=b"x" * 200, stream_seq=i)
    return Envelope(id=f"forged-{episode}-{i}", episode=episode, sender="dlq", body=body)


async def letters_held(bus: Bus) -> int:
    """How many dead letters the stream holds."""
    info = await bus.js.stream_info(bus.subjects.stream, subjects_filter=bus.subjects.dlq)
    return sum((info.state.subjects or {}).values())


async def test_dead_letters_leave_the_stream_once_journaled_and_the_episodes_and_controls_stay(
    bus: Bus, tmp_path: Path
) -> None:
    """Nothing reads a dead letter from the stream but the journal: a flood of them must not grow the store for the
    whole keep. Garbage, the journal's letter of it, and forged letters all go; an episode within the keep and the
    controls stay."""
    path = tmp_path / "j.sqlite"
    service = JournalService(bus, path, trim_after_s=3600.0, trim_every_s=0.05)
    async with started(service):
        await bus.publish_all([message("active", 0), control(0)])
        garbage = [await bus.publish_raw(bus.subjects.dlq, b"\xc1garbage %d" % i) for i in range(50)]
        await bus.publish_all(forged_letter("active", i) for i in range(10))

        async def letters_gone() -> bool:
            return await letters_held(bus) == 0 and service.letters_trimmed_below > garbage[-1]

        await until(letters_gone)
        service.stop()
    assert await held(bus, "active") == ["active-0"]
    assert [env.id for _, env in await bus.read_envelopes([bus.subjects.ctl("faults")], 10.0)] == ["ctl-0"]
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    letters = [body for row in rows if isinstance(body := row.decoded_body(), DeadLetter)]
    assert sorted(letter.stream_seq for letter in letters if letter.reason != "forged") == garbage
    assert [row.id for row in rows if row.id.startswith("forged-")] == [f"forged-active-{i}" for i in range(10)]
    assert verify(path).ok


async def test_a_journal_killed_before_the_letter_of_what_it_refused_is_written_finds_no_gap_after(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal reading the whole stream starts again after its file's last row. Garbage it dead-lettered lies
    before its letter; trimmed while the letter waited for the disk, it would read as deleted after a kill there."""
    path = tmp_path / "j.sqlite"
    append = Journal.append

    def full_for_letters(journal: Journal, rows: Iterable[Incoming], **kwargs: Any) -> int:
        rows = list(rows)
        if any(isinstance(row.envelope.body, DeadLetter) for row in rows):
            raise JournalStorageError("database or disk is full")
        return append(journal, rows, **kwargs)

    looks = 0
    floor = EpisodesKept.floor

    def counted(kept: EpisodesKept, now: float, written: int) -> int:
        nonlocal looks
        looks += 1
        return floor(kept, now, written)

    monkeypatch.setattr(Journal, "append", full_for_letters)
    monkeypatch.setattr(EpisodesKept, "floor", counted)
    service = JournalService(bus, path, trim_after_s=3600.0, trim_every_s=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await service.wait_ready()
        await bus.publish(message("e", 0))
        refused = await bus.publish_raw(bus.subjects.dlq, b"\xc1garbage")

        async def stuck() -> bool:
            return bool(service.stuck)

        await until(stuck)
        await looked_twice_more(lambda: looks)
        tg.cancel_scope.cancel()  # killed: the file never got the letter
    assert await letters_held(bus) == 2  # the garbage and its letter
    monkeypatch.setattr(Journal, "append", append)
    again = JournalService(bus, path, trim_after_s=3600.0, trim_every_s=0.05)
    async with started(again):

        async def letters_gone() -> bool:
            return await letters_held(bus) == 0

        await until(letters_gone)
        again.stop()
    assert "no longer holds" not in caplog.text
    with JournalReader(path) as reader:
        letters = [body for row in reader.rows() if isinstance(body := row.decoded_body(), DeadLetter)]
    assert [letter.stream_seq for letter in letters] == [refused]


async def test_a_dead_letter_leaves_the_stream_only_once_every_shard_has_journaled_it(
    nats_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each dead letter goes to the shard of the episode it names (a forger names any; bytes no shard can read get
    a letter that names `dlq`), but one trim of the subject takes every shard's: shard 0 trims only below what
    every shard acknowledged. Shard 1 stopped holds the letters back; started again, it journals every one, and
    then they go."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(partitions=2))
    await bus.ensure_stream()
    theirs = next(f"e{i}" for i in range(20) if episode_shard(f"e{i}", 2) == 1)
    assert episode_shard("dlq", 2) == 1  # the letters of what no shard can read are shard 1's too
    looks = 0
    ack_floor = bus.ack_floor

    async def counted(name: str) -> int | None:
        nonlocal looks
        looks += 1
        return await ack_floor(name)

    monkeypatch.setattr(bus, "ack_floor", counted)
    folder = tmp_path / "set"
    trimming = JournalService(bus, folder, shard=0, shards=2, trim_after_s=3600.0, trim_every_s=0.05)
    try:
        async with started(trimming):
            first = JournalService(bus, folder, shard=1, shards=2)
            async with started(first):
                await bus.publish_all(forged_letter(theirs, i) for i in range(5))
                await first.wait_for(5)
                first.stop()
            floor = 5

            async def first_letters_gone() -> bool:  # its acknowledgement is counted a moment after it is sent
                return await ack_floor(consumer_name(1, 2)) == floor and await letters_held(bus) == 0

            await until(first_letters_gone)
            await bus.publish_all(forged_letter(theirs, i) for i in range(5, 10))
            garbage = [await bus.publish_raw(bus.subjects.dlq, b"\xc1garbage %d" % i) for i in range(5)]
            last = (await bus.stream_state()).last_seq
            await trimming.wait_for(last)
            await looked_twice_more(lambda: looks)
            held_back = 5 + 2 * len(garbage)  # the forged letters, the garbage and shard 0's letters of it
            assert await letters_held(bus) == held_back
            assert trimming.letters_trimmed_below == floor + 1
            again = JournalService(bus, folder, shard=1, shards=2)
            async with started(again):

                async def all_gone() -> bool:
                    return await letters_held(bus) == 0

                await until(all_gone)
                again.stop()
            trimming.stop()
    finally:
        await bus.close()
    with JournalReader(shard_path(folder, 1)) as reader:
        rows = list(reader.rows())
    assert [row.id for row in rows if row.id.startswith("forged-")] == [f"forged-{theirs}-{i}" for i in range(10)]
    letters = [body for row in rows if isinstance(body := row.decoded_body(), DeadLetter) and body.reason != "forged"]
    assert sorted(letter.stream_seq for letter in letters) == garbage
    assert verify(folder).ok


async def test_a_set_whose_subjects_are_not_partitioned_is_never_trimmed(
    nats_server: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every shard's episodes then share the subjects a trim names: shard 0 would take shard 1's, journaled or not."""
    bus = await Bus.connect(nats_server.url)
    await bus.ensure_stream()
    episodes = [f"e{i}" for i in range(8)]
    assert {episode_shard(e, 2) for e in episodes} == {0, 1}
    shards = [
        JournalService(bus, tmp_path / "set", shard=k, shards=2, trim_after_s=0.01, trim_every_s=0.01) for k in (0, 1)
    ]
    assert "the stream is not trimmed (trim_after_s 0.01)" in caplog.text
    try:
        async with started(shards[0]), started(shards[1]):
            await bus.publish_all(message(e, i) for e in episodes for i in range(3))
            for shard in shards:
                await shard.wait_for(3 * len(episodes))
            shards[0].stop()
            shards[1].stop()
        for episode in episodes:
            assert await held(bus, episode) == [f"{episode}-{i}" for i in range(3)]
        assert [s.trimmed_below for s in shards] == [0, 0]
    finally:
        await bus.close()
