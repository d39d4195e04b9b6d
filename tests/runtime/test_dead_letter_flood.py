"""A flood of dead letters from a worker's credential leaves the stream once journaled, on a live system.

Anyone may publish on the dead-letter subject, since every process dead-letters what it refuses. A plain
NATS client with a worker's credential publishes garbage there, bytes that are no envelope and letters it
forges, as fast as the server takes them. Every one is journaled (garbage as the journal's letter of it), the
stream keeps none of them once the journal shards hold them, and an episode in flight meanwhile runs to its
end as it would have. The system has two journal shards, each holding the letters of its own episodes, and
the one that trims the letters asks how far the other is with its own credential's permissions.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import AsyncIterator, Callable

import anyio
import msgspec
import pytest
import pytest_asyncio

from faultline._errors import NoResponderError, ReplyTimeoutError
from faultline.api import RunPlan, plan_episodes, start_envelopes
from faultline.bus import Bus
from faultline.core import DeadLetter, Envelope, EpisodeCompleted, EpisodeStarted, encode, episode_shard
from faultline.journal import JournalRow, verify
from faultline.runtime import (
    Completions,
    ask_journal,
    worker_identity,
)
from tests.runtime.live import (
    EPISODE_TIMEOUT_S,
    JOURNAL_TIMEOUT_S,
    Running,
    configured_system,
    held,
    raw_client,
    retail,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SHARDS = 2
KEEP_S = 120.0
"""The stream's keep of a settled episode: far longer than a case, so that nothing of an episode leaves meanwhile."""
TRIM_EVERY_S = 0.2
FLOOD = 1_000
ASK_S = 1.0
"""How long one question to the journal shards waits: a shard started again subscribes on its own schedule."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """`faultline up` with two journal shards that trim the stream, and the worker group `main` on the sim model."""
    folder = tmp_path_factory.mktemp("flood")
    toml = f"[journal]\nshards = {SHARDS}\ntrim_after_s = {KEEP_S}\ntrim_every_s = {TRIM_EVERY_S}\n"
    journal = folder / "journal"
    supervisor = configured_system(
        folder, toml, journal_path=journal, journal_shards=SHARDS, journal_trim_after_s=KEEP_S
    )
    async with held(supervisor.running()) as up:
        yield Running(up, journal)
    assert verify(journal).ok


def garbage(i: int) -> bytes:
    """The i-th message of the flood: bytes that are no envelope, msgpack that is none, a letter too large to be
    one (the runtime's keep 4,096 bytes of what they refuse), or a well-formed letter naming an episode of its
    choosing; in any size up to 10 KB."""
    rng = random.Random(i)
    kind = i % 4
    if kind == 0:
        return b"\xc1" + rng.randbytes(rng.randrange(1, 10_000))
    if kind == 1:
        return msgspec.msgpack.encode({"flood": i, "pad": "x" * rng.randrange(0, 2_000)})
    size = rng.randrange(4_097, 10_000) if kind == 2 else rng.randrange(0, 4_096)
    letter = DeadLetter(reason="forged", subject="fl.nowhere", data=rng.randbytes(size))
    return encode(Envelope(id=f"flood-{i}", episode=f"e{i}", sender="dlq", body=letter))


def forged(i: int) -> bool:
    """Whether the i-th message of the flood is a letter the journal takes as it is."""
    return i % 4 == 3


async def flood(running: Running, count: int) -> list[int]:
    """Publish `count` messages of garbage on the dead letters with the worker group's credential, each stored
    before the next; their stream sequences."""
    raw = await raw_client(running.supervisor, worker_identity("main"))
    try:
        js = raw.jetstream()
        return [(await js.publish(running.bus.subjects.dlq, garbage(i))).seq for i in range(count)]
    finally:
        await raw.close()


async def letters_held(bus: Bus) -> int:
    """How many dead letters the stream holds."""
    info = await bus.js.stream_info(bus.subjects.stream, subjects_filter=bus.subjects.dlq)
    return sum((info.state.subjects or {}).values())


async def until(condition: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Wait for an async `condition` to hold, looking again every 50 ms."""
    with anyio.fail_after(timeout_s):
        while not await condition():  # type: ignore[misc]
            await anyio.sleep(0.05)


async def journal_everything(bus: Bus) -> None:
    """Wait until every journal shard holds the stream, the letters the journal publishes on the way included (a
    second round takes them in). A shard started again answers once it subscribed: it is asked until it does."""
    for _ in range(2):
        last = (await bus.stream_state()).last_seq
        with anyio.fail_after(JOURNAL_TIMEOUT_S):
            while True:
                try:
                    state = await ask_journal(bus, ASK_S, until=last)
                except (NoResponderError, ReplyTimeoutError):
                    continue
                assert not state.stuck and state.shards == SHARDS, state
                break


def check_journaled(rows: list[JournalRow], flooded: list[int], dlq: str) -> None:
    """Every message of the flood is in the journal: a forged letter as it came, anything else as a letter of it
    that names its sequence, keeps its first 4,096 bytes and tells its size."""
    letters = {
        body.stream_seq: body
        for row in rows
        if row.id.startswith("dlq-") and isinstance(body := row.decoded_body(), DeadLetter)
    }
    ids = {row.id for row in rows}
    for i, seq in enumerate(flooded):
        if forged(i):
            assert f"flood-{i}" in ids, i
            continue
        letter = letters[seq]
        sent = garbage(i)
        assert (letter.subject, letter.size, letter.data) == (dlq, len(sent), sent[:4_096]), i


async def test_a_flood_of_dead_letters_from_a_workers_credential_is_journaled_and_leaves_the_stream(
    running: Running,
) -> None:
    bus = running.bus
    plan = RunPlan(tasks=1, run_id="flooded")
    (planned,) = plan_episodes(plan, retail())
    starts = start_envelopes(plan, planned)
    since = (await bus.stream_state()).last_seq
    async with Completions(bus) as completions:
        await bus.publish_all(starts[:1])  # the episode is in flight: started, its first turn held back
        before = await bus.stream_state()
        flooded = await flood(running, FLOOD)  # the journal journals and trims them meanwhile
        await journal_everything(bus)

        async def letters_gone() -> bool:
            return await letters_held(bus) == 0

        await until(letters_gone)
        after = await bus.stream_state()
        started = await bus.read_envelopes([bus.subjects.event("started", planned.episode)], 10.0)
        assert [env.body for _, env in started] == [starts[0].body]  # the episode in flight keeps its messages
        await bus.publish_all(starts[1:])
        with anyio.fail_after(EPISODE_TIMEOUT_S):
            done = await completions.wait([planned.episode])
    assert (done[planned.episode].outcome, done[planned.episode].cause) == ("success", "")
    flood_bytes = sum(len(garbage(i)) for i in range(FLOOD))
    assert after.bytes - before.bytes < flood_bytes // 20, (flood_bytes, before, after)  # the flood's bytes are gone
    await journal_everything(bus)
    rows = running.rows_after(since)
    check_journaled(rows, flooded, bus.subjects.dlq)
    episode = [row.decoded_body() for row in rows if row.episode == planned.episode]
    assert isinstance(episode[0], EpisodeStarted)
    assert [body.outcome for body in episode if isinstance(body, EpisodeCompleted)] == ["success"]
    assert {episode_shard(f"e{i}", SHARDS) for i in range(FLOOD) if forged(i)} == set(range(SHARDS))
    assert verify(running.journal).ok


async def test_journals_started_again_before_trimming_journal_every_dead_letter_and_trim_after(
    running: Running,
) -> None:
    """Both shards are stopped before they could journal or trim the flood, and killed: the supervisor starts
    them again, and they take up the stream where their files end."""
    bus, supervisor = running.bus, running.supervisor
    since = (await bus.stream_state()).last_seq
    journals = {name: supervisor.pid(name) for name in supervisor.journal_names}
    for pid in journals.values():
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
    flooded = await flood(running, FLOOD // 4)
    assert await letters_held(bus) == len(flooded)  # nobody journaled them: the stream keeps every one
    for pid in journals.values():
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    async def started_again() -> bool:
        status = {row["name"]: row for row in supervisor.status()}
        return all(status[name]["ready"] and status[name]["pid"] != pid for name, pid in journals.items())

    await until(started_again)
    await journal_everything(bus)

    async def letters_gone() -> bool:
        return await letters_held(bus) == 0

    await until(letters_gone)
    check_journaled(running.rows_after(since), flooded, bus.subjects.dlq)
    assert verify(running.journal).ok
