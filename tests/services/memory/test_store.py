"""MemoryStore: idempotent adds, exact-to-HNSW switch, reopening from SQLite, domains, embedders."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio
import faiss
import numpy as np
import pytest

from faultline._errors import MemoryStoreError
from faultline.services.memory import (
    Dynamic,
    Embedder,
    HashingEmbedder,
    HashingSettings,
    IndexSettings,
    MemoryEntry,
    MemorySettings,
    MemoryStore,
    ToolCallRecord,
    TopK,
)

TOPICS = [
    "cancel order {n} and refund the original card",
    "book a flight from city {n} to the coast next friday",
    "change the shipping address of parcel {n} to the new flat",
    "delete every email from colleague {n} sent last week",
    "schedule a meeting with engineer {n} tomorrow morning",
]


def make_entries(count: int, domain: str = "retail", start: int = 0) -> list[MemoryEntry]:
    return [
        MemoryEntry(
            id=f"{domain}-{i}",
            episode=f"ep-{domain}-{i}",
            domain=domain,
            query=TOPICS[i % len(TOPICS)].format(n=f"n{i}"),
            feedback=1 if i % 2 else 0,
            calls=[ToolCallRecord(name=f"tool_{i % len(TOPICS)}", arguments={"n": i})],
            reflection="" if i % 2 else f"wrong argument in step {i % 3}",
        )
        for i in range(start, start + count)
    ]


OpenStore = Callable[..., MemoryStore]


@pytest.fixture
def open_store() -> Iterator[OpenStore]:
    """Opens in-memory stores and closes them after the test."""
    opened: list[MemoryStore] = []

    def factory(embedder: Embedder | None = None, settings: MemorySettings | None = None) -> MemoryStore:
        store = MemoryStore(":memory:", embedder or HashingEmbedder(), settings)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def small_hnsw(threshold: int = 40, embed_batch: int = 16) -> MemorySettings:
    return MemorySettings(index=IndexSettings(hnsw_threshold=threshold), embed_batch=embed_batch)


async def test_add_is_idempotent_by_entry_id(open_store: OpenStore) -> None:
    store = open_store()
    entries = make_entries(10)
    assert await store.add_many(entries + entries[:3]) == 10
    assert await store.add(entries[4]) is False
    assert len(store) == 10
    assert "retail-4" in store and "retail-99" not in store
    assert store.get("retail-4") == entries[4]
    assert store.get("retail-99") is None


async def test_search_ranks_the_entry_with_the_same_query_first(open_store: OpenStore) -> None:
    store = open_store()
    entries = make_entries(50)
    await store.add_many(entries)
    for entry in entries[::7]:
        found = await store.search(entry.query, 3)
        assert found[0].entry == entry
        assert found[0].score == pytest.approx(1.0, abs=1e-5)
        assert found[0].score >= found[1].score >= found[2].score
        assert found[1].entry.query.split()[:2] == entry.query.split()[:2]


async def test_switch_to_hnsw_keeps_every_entry(open_store: OpenStore) -> None:
    store = open_store(settings=small_hnsw(threshold=40, embed_batch=16))
    entries = make_entries(120)
    await store.add_many(entries[:30])
    assert store.stats().partitions[0].index == "flat"
    await store.add_many(entries[30:])
    (partition,) = store.stats().partitions
    assert (partition.index, partition.entries, len(store)) == ("hnsw", 120, 120)
    for entry in entries:
        found = await store.search(entry.query, 1)
        assert found[0].entry.id == entry.id


async def test_hnsw_results_agree_with_exact_search(open_store: OpenStore) -> None:
    exact = open_store(settings=small_hnsw(threshold=10_000))
    graph = open_store(settings=small_hnsw(threshold=40))
    entries = make_entries(300)
    await exact.add_many(entries)
    await graph.add_many(entries)
    assert graph.stats().partitions[0].index == "hnsw"
    assert exact.stats().partitions[0].index == "flat"
    overlap = []
    for query in ["refund the card for order n7", "meeting with engineer tomorrow", "email from colleague n3"]:
        want = {s.entry.id for s in await exact.search(query, 10)}
        got = {s.entry.id for s in await graph.search(query, 10)}
        overlap.append(len(want & got) / 10)
    assert min(overlap) >= 0.9


async def test_reopening_gives_the_same_results(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    queries = ["cancel order n12 refund", "flight to the coast", "new shipping address", "unrelated words"]
    for settings in (small_hnsw(threshold=10_000), small_hnsw(threshold=40)):
        path.unlink(missing_ok=True)
        with MemoryStore(path, HashingEmbedder(), settings) as store:
            await store.add_many(make_entries(100))
            await store.add_many(make_entries(20, domain="airline"))
            before = [await store.retrieve(q, TopK(k=8)) for q in queries]
            stats = store.stats()
        with MemoryStore(path, HashingEmbedder(), settings) as reopened:
            after = [await reopened.retrieve(q, TopK(k=8)) for q in queries]
            assert reopened.stats() == stats
            assert [[s.entry.id for s in r.entries] for r in after] == [[s.entry.id for s in r.entries] for r in before]
            # A reopened HNSW graph is rebuilt, and faiss may sum the same float32 products in another
            # order: scores agree to float32 precision, not bit for bit.
            for got, want in zip(after, before, strict=True):
                assert [s.score for s in got.entries] == pytest.approx([s.score for s in want.entries], rel=1e-5)
            assert await reopened.add_many(make_entries(100)) == 0
            assert await reopened.add_many(make_entries(5, start=100)) == 5
            assert len(reopened) == 125


async def test_domains_are_searched_apart(open_store: OpenStore) -> None:
    store = open_store()
    await store.add_many(make_entries(20, domain="retail") + make_entries(20, domain="airline"))
    assert store.domains() == ["airline", "retail"]
    found = await store.search("cancel order n5 refund", 10, domain="airline")
    assert {s.entry.domain for s in found} == {"airline"}
    both = await store.search("cancel order n5 refund", 40)
    assert {s.entry.domain for s in both} == {"airline", "retail"}
    assert await store.search("anything", 5, domain="unknown") == []
    assert [e.id for e in store.entries(domain="airline")][:2] == ["airline-0", "airline-1"]


async def test_dynamic_retrieval_keeps_the_similar_cluster(open_store: OpenStore) -> None:
    store = open_store()
    near = [
        MemoryEntry(
            id=f"near-{i}",
            episode=f"n{i}",
            domain="retail",
            query=f"return the broken headphones from order {1000 + i} and refund the card",
            feedback=1,
        )
        for i in range(15)
    ]
    far = make_entries(60)
    await store.add_many(near + far)
    result = await store.retrieve("return the broken headphones from order 999 and refund", Dynamic(radius=5))
    assert (result.reason, result.n) == ("peak", 15)
    assert {s.entry.id for s in result.entries} == {e.id for e in near}
    assert result.candidates == 75
    fixed = await store.retrieve("return the broken headphones from order 999", TopK(k=3))
    assert (fixed.n, fixed.reason, len(fixed.entries)) == (3, "top_k", 3)


class KeywordEmbedder:
    """A stand-in embedder: one dimension per keyword, to show any `Embedder` works."""

    name = "keywords"
    words = ("order", "flight", "email", "meeting", "address", "refund")

    @property
    def dim(self) -> int:
        return len(self.words)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([[float(w in t) + 1e-3 for w in self.words] for t in texts], dtype=np.float32)


async def test_any_embedder_with_the_protocol_works(open_store: OpenStore) -> None:
    store = open_store(KeywordEmbedder())
    await store.add_many(make_entries(10))
    found = await store.search("which flight", 2)
    assert all("flight" in s.entry.query for s in found)
    assert found[0].score <= 1.0 + 1e-6


async def test_a_store_refuses_a_different_embedder(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, HashingEmbedder()) as store:
        await store.add_many(make_entries(3))
    with pytest.raises(MemoryStoreError, match="hashing-v1"):
        MemoryStore(path, KeywordEmbedder())
    with pytest.raises(MemoryStoreError, match="dim 384"):
        MemoryStore(path, HashingEmbedder(HashingSettings(dim=128)))


class BrokenEmbedder(KeywordEmbedder):
    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts) + 1, self.dim), dtype=np.float32)


async def test_an_embedder_returning_the_wrong_shape_is_an_error(open_store: OpenStore) -> None:
    store = open_store(BrokenEmbedder())
    with pytest.raises(MemoryStoreError, match="shape"):
        await store.add(make_entries(1)[0])
    assert len(store) == 0


async def test_unreadable_file_is_a_memory_store_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(MemoryStoreError, match="cannot open"):
        MemoryStore(path, HashingEmbedder())


async def test_faiss_thread_count_is_restored_after_search_and_build(open_store: OpenStore) -> None:
    before = faiss.omp_get_max_threads()
    store = open_store(settings=small_hnsw(threshold=20))
    await store.add_many(make_entries(30))
    await store.search("cancel order", 5)
    assert store.stats().partitions[0].index == "hnsw"
    assert faiss.omp_get_max_threads() == before


class YieldingEmbedder(HashingEmbedder):
    """Gives the event loop a turn before embedding, as a network embedder would."""

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        await anyio.lowlevel.checkpoint()
        return await super().embed(texts)


async def test_concurrent_adds_of_the_same_entries_store_each_once(open_store: OpenStore) -> None:
    store = open_store(YieldingEmbedder())
    entries = make_entries(20)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(store.add_many, entries)
    assert len(store) == 20
    assert len(list(store.entries())) == 20
    assert len(await store.search("cancel order", 50)) == 20
