"""The memory as `faultline.toml` describes it: embedder, store file and the extractor's model."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from faultline._errors import MemoryStoreError
from faultline.core import ModelBackend
from faultline.runtime import Config, MemoryConfig, make_backend
from faultline.runtime.models import OpenAIEmbedder
from faultline.services.memory._embed import Embedder, HashingEmbedder
from faultline.services.memory._index import IndexSettings
from faultline.services.memory._store import MemorySettings, MemoryStore


async def make_embedder(config: MemoryConfig, *, store_path: str | Path | None = None) -> Embedder:
    """The configured embedder. For `openai` the vector size is `embedding_dim`, else the size an
    existing store at `store_path` was built with, else one probe of the endpoint (ModelError if it is down).
    """
    if config.embedder == "local":
        return HashingEmbedder()
    name = f"openai:{config.openai.model}"
    dim = config.embedding_dim or (_stored_dim(Path(store_path), name) if store_path else 0)
    embedder = OpenAIEmbedder(config.openai, dim=dim or None)
    if not dim:
        try:
            await embedder.probe()
        except BaseException:
            await embedder.aclose()
            raise
    return embedder


@asynccontextmanager
async def open_memory(
    config: MemoryConfig, path: str | Path | None = None, *, must_exist: bool = False
) -> AsyncIterator[MemoryStore]:
    """The memory store at `path` (default `config.store`) with the configured embedder, closed on exit.

    With `must_exist`, a missing file is an error instead of a new, empty store.
    """
    where = Path(path or config.store)
    if must_exist and not where.is_file():
        raise MemoryStoreError(
            f"{where}: no memory store here; fill one with `faultline memory rebuild JOURNAL --out {where}`"
        )
    where.parent.mkdir(parents=True, exist_ok=True)
    embedder = await make_embedder(config, store_path=where)
    try:
        settings = MemorySettings(index=IndexSettings(hnsw_threshold=config.hnsw_threshold))
        with MemoryStore(where, embedder, settings) as store:
            yield store
    finally:
        if isinstance(embedder, OpenAIEmbedder):
            await embedder.aclose()


def extractor_backend(config: Config) -> ModelBackend | None:
    """The model that writes reflections on failures; None for the offline `sim` extractor."""
    role = config.memory.extractor_role
    if config.model(role).backend == "sim":
        return None
    return make_backend(config, role)


def _stored_dim(path: Path, embedder_name: str) -> int:
    """The vector size a store file records for `embedder_name`; 0 if there is none to read."""
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
    return int(meta.get("dim", 0)) if meta.get("embedder") == embedder_name else 0
