"""FAISS indexes over unit vectors: exact inner product while small, HNSW beyond a size."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import faiss
import msgspec
import numpy as np

IndexKind = Literal["flat", "hnsw"]


class IndexSettings(msgspec.Struct, frozen=True, kw_only=True):
    """When to leave exact search, and how to build and search the HNSW graph.

    The HNSW defaults give recall@10 above 0.99 against exact search on the
    100k-entry benchmark (`bench/memory_retrieval.py`); a search asks for at
    least `k` candidates, so `ef_search` is raised to `k` when `k` is larger.

    FAISS's OpenMP threads help to build a graph but slow a one-query search
    down (waking them costs more than the search on a busy machine), so
    searches run on `search_threads` and builds on `build_threads` (0: every
    core). FAISS's thread count is per process; it is restored after each call.
    """

    hnsw_threshold: int = 20_000
    hnsw_m: int = 32
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 64
    search_threads: int = 1
    build_threads: int = 0


class VectorIndex:
    """One FAISS index whose ids are the store's row ids; cosine = inner product on unit vectors.

    Starts exact (`IndexFlatIP`). `rebuild` replaces it with the kind its size
    calls for, from vectors the caller reads back from storage, so switching
    to HNSW loses nothing.
    """

    def __init__(self, dim: int, settings: IndexSettings) -> None:
        self.dim = dim
        self.settings = settings
        self.kind: IndexKind = "flat"
        self._index = self._new("flat")

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def kind_for(self, size: int) -> IndexKind:
        return "hnsw" if size > self.settings.hnsw_threshold else "flat"

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        if len(ids):
            with _omp_threads(self.settings.build_threads):
                self._index.add_with_ids(vectors, ids.astype(np.int64, copy=False))

    def rebuild(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Replace the index by a fresh one, of the kind the number of vectors calls for."""
        kind = self.kind_for(len(ids))
        fresh = self._new(kind)
        if len(ids):
            with _omp_threads(self.settings.build_threads):
                fresh.add_with_ids(vectors, ids.astype(np.int64, copy=False))
        self._index, self.kind = fresh, kind

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Scores and ids of the `k` nearest rows per query, best first (HNSW may pad with id -1)."""
        k = min(k, len(self))
        if k == 0:
            return np.zeros((len(vectors), 0), np.float32), np.zeros((len(vectors), 0), np.int64)
        params = None
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(self.settings.hnsw_ef_search, k))  # type: ignore[attr-defined]
        with _omp_threads(self.settings.search_threads):
            return self._index.search(vectors, k, params=params)

    def _new(self, kind: IndexKind) -> faiss.IndexIDMap:
        if kind == "flat":
            return faiss.IndexIDMap(faiss.IndexFlatIP(self.dim))
        graph = faiss.IndexHNSWFlat(self.dim, self.settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = self.settings.hnsw_ef_construction
        return faiss.IndexIDMap(graph)


_ALL_CORES = faiss.omp_get_max_threads()


@contextmanager
def _omp_threads(count: int) -> Iterator[None]:
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(count or _ALL_CORES)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)
