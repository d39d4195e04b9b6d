"""The memory rebuilt from a journal file equals the memory the live service wrote."""

from __future__ import annotations

from pathlib import Path

import anyio

from faultline.bus import Bus
from faultline.core import Envelope, EpisodeCompleted
from faultline.journal import JournalReader, verify
from faultline.runtime._journal_service import JournalService
from faultline.runtime.models import OpenAIBackend
from faultline.services.memory import (
    MEMORY_AGENT,
    Dynamic,
    HashingEmbedder,
    MemoryService,
    MemoryServiceSettings,
    MemoryStore,
    TopK,
    rebuild,
    wait_for_memory,
)
from tests.openai_server import OpenAIServer, Text
from tests.services.memory.episodes import episode, mistake, sample_episodes, write_journal

FAST = MemoryServiceSettings(retry_delay_s=0.01, retry_delay_max_s=0.05)

QUERIES = [
    ("retail", "cancel my order #W1"),
    ("retail", "change the address of my order"),
    ("phone", "suspend my line"),
    (None, "cancel the pending order"),
]
MODES = [TopK(k=3), TopK(k=20), Dynamic(radius=1, fallback_k=2)]


async def live_memory(bus: Bus, journal: Path, episodes: list[list[Envelope]], service: MemoryService) -> None:
    """Run the journal and memory services while `episodes` are published; return once both hold everything."""
    writer = JournalService(bus, journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        tg.start_soon(service.run)
        await writer.wait_ready()
        await service.wait_ready()
        for envelopes in episodes:
            await bus.publish_all(envelopes)
        with anyio.fail_after(30):
            state = await wait_for_memory(bus)
            await writer.wait_for((await bus.js.stream_info(bus.subjects.stream)).state.last_seq)
        assert state.caught_up
        service.stop()
        writer.stop()


async def assert_same_memory(live: MemoryStore, rebuilt: MemoryStore) -> None:
    assert list(rebuilt.entries()) == list(live.entries())
    for domain, query in QUERIES:
        for mode in MODES:
            assert await rebuilt.retrieve(query, mode, domain=domain) == await live.retrieve(query, mode, domain=domain)


async def test_rebuild_from_the_journal_equals_the_live_memory(bus: Bus, tmp_path: Path) -> None:
    live = MemoryStore(tmp_path / "live.sqlite", HashingEmbedder())
    episodes = sample_episodes()
    # the runner's late timeout for an episode that completed already, and a completed event out of nowhere
    episodes.append([Envelope(id="t1", episode="ep-3", sender="runner", body=EpisodeCompleted(outcome="timeout"))])
    episodes.append([Envelope(id="t2", episode="ghost", sender="runner", body=EpisodeCompleted(outcome="timeout"))])
    await live_memory(bus, tmp_path / "j.sqlite", episodes, MemoryService(bus, live, settings=FAST))
    assert verify(tmp_path / "j.sqlite").ok
    assert len(live) == 7
    rebuilt = MemoryStore(tmp_path / "rebuilt.sqlite", HashingEmbedder())
    with JournalReader(tmp_path / "j.sqlite") as reader:
        report = await rebuild(reader, rebuilt)
    assert (report.completed, report.added, report.present, report.skipped) == (9, 7, 0, 2)
    assert (report.recorded_reflections, report.offline_reflections) == (0, 4)
    await assert_same_memory(live, rebuilt)


async def test_a_journaled_model_reflection_is_rebuilt_without_a_model(
    bus: Bus, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.reply(Text("The agent cancelled #W1, not the order #W7 the user named."))
    failed = episode(
        "m",
        query="Please cancel order #W7",
        reward=0.0,
        mistakes=[mistake(0)],
        calls=[("cancel_pending_order", {"order_id": "#W1"}, "ok")],
    )
    live = MemoryStore(":memory:", HashingEmbedder())
    async with OpenAIBackend(openai_server.settings()) as model:
        service = MemoryService(bus, live, extractor=model, settings=FAST)
        await live_memory(bus, tmp_path / "j.sqlite", [*sample_episodes()[:3:2], failed], service)
    with JournalReader(tmp_path / "j.sqlite") as reader:
        [row] = [r for r in reader.episode_rows("m") if r.kind == "recording"]
        assert (row.sender, row.subject) == (MEMORY_AGENT, "fl.rec.m.memory")
        rebuilt = MemoryStore(":memory:", HashingEmbedder())
        report = await rebuild(reader, rebuilt)
    assert (report.recorded_reflections, report.offline_reflections) == (1, 0)
    entry = rebuilt.get("m")
    assert entry is not None and entry.reflection == "The agent cancelled #W1, not the order #W7 the user named."
    assert len(openai_server.chat_requests) == 1, "one for the failure, none during the rebuild"
    await assert_same_memory(live, rebuilt)


async def test_rebuild_adds_only_what_the_store_lacks(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    write_journal(journal, sample_episodes())
    store = MemoryStore(tmp_path / "m.sqlite", HashingEmbedder())
    with JournalReader(journal) as reader:
        first = await rebuild(reader, store, batch=2)
        again = await rebuild(reader, store)
    assert (first.completed, first.added, first.skipped) == (8, 7, 1)
    assert (again.added, again.present, again.skipped) == (0, 7, 1)
    assert [e.id for e in store.entries()] == ["ep-1", "ep-2", "ep-3", "ep-4", "ep-5", "ep-7", "ep-8"]
