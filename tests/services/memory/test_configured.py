"""The memory as faultline.toml describes it: defaults, embedders, the store file, the extractor."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline._errors import ConfigError, MemoryStoreError, ModelError
from faultline.bus import free_port
from faultline.runtime import MemoryConfig, ModelConfig, load_config, parse_config
from faultline.runtime.models import OpenAIBackend, OpenAIEmbedder, OpenAISettings
from faultline.services.memory import (
    Dynamic,
    HashingEmbedder,
    IndexSettings,
    MemoryEntry,
    TopK,
    extractor_backend,
    make_embedder,
    open_memory,
    retrieval_mode,
)
from tests.openai_server import OpenAIServer


def test_the_config_defaults_are_the_librarys() -> None:
    config = MemoryConfig()
    assert config.mode == "off" and config.embedder == "local"
    assert retrieval_mode(MemoryConfig(mode="topk")) == TopK()
    assert retrieval_mode(MemoryConfig(mode="dynamic")) == Dynamic()
    assert config.hnsw_threshold == IndexSettings().hnsw_threshold


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"at \$\.memory\.openai\.model"):
        parse_config({"memory": {"embedder": "openai"}})
    with pytest.raises(ConfigError, match=r"\$\.memory\.mode"):
        parse_config({"memory": {"mode": "always"}})
    path = tmp_path / "conf" / "faultline.toml"
    path.parent.mkdir()
    path.write_text('[memory]\nstore = "mem/m.sqlite"\n')
    assert load_config(path).memory.store == str(tmp_path / "conf" / "mem" / "m.sqlite")


async def test_the_openai_embedder_learns_its_size_from_the_store_or_the_endpoint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    config = MemoryConfig(embedder="openai", openai=openai_server.settings())
    store = tmp_path / "m.sqlite"
    async with open_memory(config, store) as memory:
        assert memory.embedder.dim == openai_server.embedding_dim
        await memory.add(MemoryEntry(id="e", episode="e", domain="d", query="cancel order", feedback=1))
    assert len(openai_server.embedding_requests) == 2, "one probe, one entry"
    down = MemoryConfig(
        embedder="openai",
        openai=OpenAISettings(
            base_url=f"http://127.0.0.1:{free_port()}/v1", api_key_env="", model="test-model", max_retries=0
        ),
    )
    async with open_memory(down, store, must_exist=True) as memory:
        assert len(memory) == 1, "the size comes from the store: no probe, no network"
    with pytest.raises(ModelError, match="cannot connect"):
        await make_embedder(down, store_path=tmp_path / "new.sqlite")
    embedder = await make_embedder(MemoryConfig(embedder="openai", embedding_dim=8, openai=openai_server.settings()))
    assert isinstance(embedder, OpenAIEmbedder) and embedder.dim == 8
    await embedder.aclose()


async def test_a_missing_store_is_not_created_when_it_must_exist(tmp_path: Path) -> None:
    with pytest.raises(MemoryStoreError, match="no memory store here"):
        async with open_memory(MemoryConfig(), tmp_path / "none.sqlite", must_exist=True):
            pass
    assert not (tmp_path / "none.sqlite").exists()
    assert isinstance(await make_embedder(MemoryConfig()), HashingEmbedder)


async def test_the_extractor_is_offline_unless_its_role_has_a_model(openai_server: OpenAIServer) -> None:
    assert extractor_backend(parse_config({})) is None
    model = {"backend": "openai", "base_url": openai_server.url, "api_key_env": "", "model": "critic"}
    backend = extractor_backend(parse_config({"models": {"memory_extractor": model}}))
    assert isinstance(backend, OpenAIBackend) and backend.settings.model == "critic"
    await backend.aclose()
    renamed = parse_config({"memory": {"extractor_role": "critic"}, "models": {"critic": model}})
    assert renamed.model("memory_extractor") == ModelConfig()
    backend = extractor_backend(renamed)
    assert isinstance(backend, OpenAIBackend)
    await backend.aclose()
