"""The memory store: entries and their vectors in SQLite, one FAISS index per domain in RAM."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
import numpy as np
import sqlite_utils

from faultline._errors import MemoryStoreError
from faultline.agents.memory import Dynamic, MemoryEntry, RetrievalMode, ScoredEntry, TopK
from faultline.services.memory._embed import Embedder
from faultline.services.memory._index import IndexKind, IndexSettings, VectorIndex
from faultline.services.memory._retrieval import Retrieval, choose_n

SCHEMA_VERSION = 1


class MemorySettings(msgspec.Struct, frozen=True, kw_only=True):
    """Limits of a `MemoryStore`.

    `index` decides exact vs HNSW search per domain; `embed_batch` is how many
    queries go to the embedder (and to SQLite) at once in `add_many`;
    `sql_batch` bounds the number of parameters in one SQL statement.
    `tie_headroom` extra neighbours are fetched and cut by (score, row id), so
    entries with equal scores at the k-th place are chosen the same way
    whatever order the index returns them in.
    """

    index: IndexSettings = IndexSettings()
    embed_batch: int = 1024
    sql_batch: int = 500
    tie_headroom: int = 8


class PartitionStats(msgspec.Struct, frozen=True, kw_only=True):
    domain: str
    entries: int
    index: IndexKind


class MemoryStats(msgspec.Struct, frozen=True, kw_only=True):
    """What `MemoryStore.stats()` reports: sizes, index kinds and the embedder in use."""

    path: str
    entries: int
    dim: int
    embedder: str
    partitions: list[PartitionStats]
    settings: MemorySettings


_encoder = msgspec.msgpack.Encoder(order="deterministic")
_entry_decoder = msgspec.msgpack.Decoder(MemoryEntry)


class MemoryStore:
    """MemToolAgent's memory: add entries, search them by query similarity, retrieve top-k or dynamic n.

    `path` is a SQLite file or ":memory:". Rows (entry and vector) are the
    durable part; the FAISS indexes are rebuilt from them when the store is
    opened. Each domain has its own index, so a search in one domain never
    ranks another's entries; a search with `domain=None` merges all of them.

    Usage::

        store = MemoryStore("memory.db", HashingEmbedder())
        await store.add(entry)
        found = await store.retrieve("cancel my order", Dynamic(), domain="retail")

    Adding is idempotent by `entry.id`, so replaying a journal into a store
    that already holds part of it adds only what is missing. Not safe for use
    from several threads; one service owns one store.
    """

    def __init__(
        self,
        path: str | Path,
        embedder: Embedder,
        settings: MemorySettings | None = None,
    ) -> None:
        self.path = str(path)
        self.embedder = embedder
        self.settings = settings or MemorySettings()
        self._embedder_name = str(getattr(embedder, "name", type(embedder).__name__))
        try:
            self._db = (
                sqlite_utils.Database(memory=True) if self.path == ":memory:" else sqlite_utils.Database(self.path)
            )
        except Exception as exc:
            raise MemoryStoreError(f"cannot open memory store {self.path}: {exc}") from exc
        self._indexes: dict[str, VectorIndex] = {}
        self._next_id = 1
        self._count = 0
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------

    async def add(self, entry: MemoryEntry) -> bool:
        """Store one entry; False if an entry with its id is already stored."""
        return await self.add_many([entry]) == 1

    async def add_many(self, entries: Iterable[MemoryEntry]) -> int:
        """Store entries not stored yet (by id, first copy wins); returns how many were new."""
        added = 0
        batch: list[MemoryEntry] = []
        for entry in entries:
            batch.append(entry)
            if len(batch) >= self.settings.embed_batch:
                added += await self._add_batch(batch)
                batch = []
        if batch:
            added += await self._add_batch(batch)
        return added

    async def _add_batch(self, batch: list[MemoryEntry]) -> int:
        new = self._unknown(batch)
        if not new:
            return 0
        vectors = await self._embed([e.query for e in new])
        # Another add may have stored some of these while the embedder ran.
        keep = {e.id for e in self._unknown(new)}
        if len(keep) < len(new):
            mask = np.array([e.id in keep for e in new])
            new, vectors = [e for e in new if e.id in keep], vectors[mask]
        if not new:
            return 0
        ids = np.arange(self._next_id, self._next_id + len(new), dtype=np.int64)
        rows = [
            {
                "id": int(row_id),
                "entry_id": e.id,
                "episode": e.episode,
                "domain": e.domain,
                "user": e.user,
                "feedback": e.feedback,
                "query": e.query,
                "body": _encoder.encode(e),
                "vector": vector.tobytes(),
            }
            for row_id, e, vector in zip(ids, new, vectors, strict=True)
        ]
        try:
            with self._db.conn:
                self._db.table("entries").insert_all(rows, batch_size=self.settings.sql_batch)
        except Exception as exc:
            raise MemoryStoreError(f"cannot write to memory store {self.path}: {exc}") from exc
        self._next_id += len(new)
        self._count += len(new)
        domains = np.array([e.domain for e in new])
        for domain in dict.fromkeys(e.domain for e in new):
            mask = domains == domain
            self._index_rows(domain, vectors[mask], ids[mask])
        return len(new)

    def _unknown(self, entries: list[MemoryEntry]) -> list[MemoryEntry]:
        """Entries whose id is neither stored nor earlier in `entries`."""
        known = self._existing_ids([e.id for e in entries])
        fresh: dict[str, MemoryEntry] = {}
        for entry in entries:
            if entry.id not in known and entry.id not in fresh:
                fresh[entry.id] = entry
        return list(fresh.values())

    def _index_rows(self, domain: str, vectors: np.ndarray, ids: np.ndarray) -> None:
        index = self._indexes.get(domain)
        if index is None:
            index = self._indexes[domain] = VectorIndex(self.embedder.dim, self.settings.index)
        if index.kind_for(len(index) + len(ids)) == index.kind:
            index.add(vectors, ids)
        else:
            index.rebuild(*self._stored_vectors(domain))

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and bool(self._existing_ids([entry_id]))

    def get(self, entry_id: str) -> MemoryEntry | None:
        row = self._db.execute("SELECT body FROM entries WHERE entry_id = ?", [entry_id]).fetchone()
        return None if row is None else _entry_decoder.decode(row[0])

    def entries(self, *, domain: str | None = None, user: str | None = None) -> Iterator[MemoryEntry]:
        """Stored entries in insertion order, optionally of one domain and/or user."""
        where, params = [], []
        for column, value in (("domain", domain), ("user", user)):
            if value is not None:
                where.append(f"[{column}] = ?")
                params.append(value)
        sql = "SELECT body FROM entries" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        for (body,) in self._db.execute(sql, params):
            yield _entry_decoder.decode(body)

    def domains(self) -> list[str]:
        return sorted(self._indexes)

    def stats(self) -> MemoryStats:
        return MemoryStats(
            path=self.path,
            entries=self._count,
            dim=self.embedder.dim,
            embedder=self._embedder_name,
            partitions=[
                PartitionStats(domain=d, entries=len(self._indexes[d]), index=self._indexes[d].kind)
                for d in self.domains()
            ],
            settings=self.settings,
        )

    # -- search and retrieval ---------------------------------------------------------------

    async def search(self, query: str, k: int, *, domain: str | None = None) -> list[ScoredEntry]:
        """The `k` entries whose queries are most similar to `query`, best first."""
        vector = (await self._embed([query]))[0]
        scores, ids = self.nearest(vector, k, domain=domain)
        return self._scored(scores, ids)

    async def retrieve(self, query: str, mode: RetrievalMode | None = None, *, domain: str | None = None) -> Retrieval:
        """Entries for `query` under `mode` (default `TopK()`), with how many were chosen and why."""
        vector = (await self._embed([query]))[0]
        return self.retrieve_vector(query, vector, mode, domain=domain)

    def retrieve_vector(
        self,
        query: str,
        vector: np.ndarray,
        mode: RetrievalMode | None = None,
        *,
        domain: str | None = None,
    ) -> Retrieval:
        """`retrieve` for a caller that already holds the query's unit vector."""
        mode = mode or TopK()
        width = mode.k if isinstance(mode, TopK) else max(mode.candidates, mode.fallback_k)
        scores, ids = self.nearest(vector, width, domain=domain)
        cut = choose_n(scores, mode)
        return Retrieval(
            query=query,
            mode=mode,
            entries=self._scored(scores[: cut.n], ids[: cut.n]),
            n=cut.n,
            reason=cut.reason,
            peaks=cut.peaks,
            candidates=len(scores) if isinstance(mode, Dynamic) else 0,
        )

    def nearest(self, vector: np.ndarray, k: int, *, domain: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Scores (descending) and row ids of the `k` nearest stored vectors; no SQLite access.

        Equal scores are ordered by row id, i.e. by insertion.
        """
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if domain is not None:
            indexes = [self._indexes[domain]] if domain in self._indexes else []
        else:
            indexes = list(self._indexes.values())
        found_scores, found_ids = [], []
        for index in indexes:
            scores, ids = index.search(query, k + self.settings.tie_headroom)
            keep = ids[0] >= 0
            found_scores.append(scores[0][keep])
            found_ids.append(ids[0][keep])
        if not found_scores:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores, ids = np.concatenate(found_scores), np.concatenate(found_ids)
        order = np.lexsort((ids, -scores))[:k]
        return scores[order], ids[order]

    # -- internals --------------------------------------------------------------------------

    def _scored(self, scores: np.ndarray, ids: np.ndarray) -> list[ScoredEntry]:
        bodies = self._bodies([int(i) for i in ids])
        return [ScoredEntry(entry=bodies[int(i)], score=float(s)) for s, i in zip(scores, ids, strict=True)]

    def _bodies(self, ids: Sequence[int]) -> dict[int, MemoryEntry]:
        out: dict[int, MemoryEntry] = {}
        for chunk in _chunks(list(ids), self.settings.sql_batch):
            marks = ",".join("?" * len(chunk))
            for row_id, body in self._db.execute(f"SELECT id, body FROM entries WHERE id IN ({marks})", chunk):
                out[row_id] = _entry_decoder.decode(body)
        return out

    def _existing_ids(self, entry_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(list(entry_ids), self.settings.sql_batch):
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT entry_id FROM entries WHERE entry_id IN ({marks})"
            found.update(row[0] for row in self._db.execute(sql, chunk))
        return found

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(await self.embedder.embed(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self.embedder.dim):
            raise MemoryStoreError(
                f"embedder {self._embedder_name} returned shape {vectors.shape} for {len(texts)} texts;"
                f" expected ({len(texts)}, {self.embedder.dim})"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.ascontiguousarray(vectors / np.where(norms == 0.0, 1.0, norms), dtype=np.float32)

    def _stored_vectors(self, domain: str) -> tuple[np.ndarray, np.ndarray]:
        rows = self._db.execute("SELECT id, vector FROM entries WHERE domain = ? ORDER BY id", [domain]).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        flat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return flat.reshape(len(rows), self.embedder.dim), ids

    def _open(self) -> None:
        try:
            if self.path != ":memory:":
                self._db.enable_wal()
            self._create_schema()
        except Exception as exc:
            raise MemoryStoreError(f"cannot open memory store {self.path}: {exc}") from exc
        self._check_embedder()
        self._load()

    def _create_schema(self) -> None:
        if "entries" not in self._db.table_names():
            self._db.table("entries").create(
                {
                    "id": int,
                    "entry_id": str,
                    "episode": str,
                    "domain": str,
                    "user": str,
                    "feedback": int,
                    "query": str,
                    "body": bytes,
                    "vector": bytes,
                },
                pk="id",
                not_null={"entry_id", "domain", "body", "vector"},
            )
            self._db.table("entries").create_index(["entry_id"], unique=True)
            self._db.table("entries").create_index(["domain", "id"])
        if "meta" not in self._db.table_names():
            self._db.table("meta").create({"key": str, "value": str}, pk="key")

    def _check_embedder(self) -> None:
        meta: dict[str, Any] = {k: v for k, v in self._db.execute("SELECT key, value FROM meta")}
        wanted = {"schema": str(SCHEMA_VERSION), "embedder": self._embedder_name, "dim": str(self.embedder.dim)}
        if not meta:
            with self._db.conn:
                self._db.table("meta").insert_all([{"key": k, "value": v} for k, v in wanted.items()])
            return
        if meta.get("schema") != wanted["schema"]:
            raise MemoryStoreError(
                f"memory store {self.path} has schema {meta.get('schema')}, this version reads {SCHEMA_VERSION}"
            )
        if (meta.get("embedder"), meta.get("dim")) != (wanted["embedder"], wanted["dim"]):
            raise MemoryStoreError(
                f"memory store {self.path} was embedded with {meta.get('embedder')} (dim {meta.get('dim')}),"
                f" not {wanted['embedder']} (dim {wanted['dim']}); open it with that embedder"
                " or rebuild the memory from the journal into a new file"
            )

    def _load(self) -> None:
        row = self._db.execute("SELECT COALESCE(MAX(id), 0), COUNT(*) FROM entries").fetchone()
        self._next_id, self._count = int(row[0]) + 1, int(row[1])
        for (domain,) in self._db.execute("SELECT DISTINCT domain FROM entries ORDER BY domain").fetchall():
            index = self._indexes[domain] = VectorIndex(self.embedder.dim, self.settings.index)
            index.rebuild(*self._stored_vectors(domain))


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
