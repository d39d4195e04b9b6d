"""The public surface of faultline.services.memory; adding or dropping a name must be deliberate."""

from __future__ import annotations

import faultline.services.memory as memory

EXPECTED = {
    "MEMORY_AGENT",
    "MEMORY_SERVICE",
    "MIN_ZERO_RATINGS",
    "SYNC_SERVICE",
    "Cut",
    "CutReason",
    "Dynamic",
    "Embedder",
    "EpisodeFacts",
    "ExtractionInput",
    "HashingEmbedder",
    "HashingSettings",
    "IndexKind",
    "IndexSettings",
    "MemoryEntry",
    "MemoryService",
    "MemoryServiceSettings",
    "MemorySettings",
    "MemoryStats",
    "MemoryStore",
    "MemorySync",
    "PartitionStats",
    "PromptSettings",
    "RebuildReport",
    "Retrieval",
    "RetrievalMode",
    "RetrievalReply",
    "RetrievalRequest",
    "ScoredEntry",
    "ToolCallRecord",
    "ToolExchange",
    "TopK",
    "choose_n",
    "derivative_estimate",
    "entry_from_episode",
    "entry_from_facts",
    "episode_facts",
    "extractor_backend",
    "extractor_request",
    "filter_tools",
    "format_entries",
    "format_examples",
    "hidden_tools",
    "make_embedder",
    "memory_examples",
    "open_memory",
    "read_episode",
    "rebuild",
    "retrieval_body",
    "retrieval_mode",
    "serve_memory",
    "sim_preferences",
    "sim_reflection",
    "tool_name",
    "tool_ratings",
    "wait_for_memory",
}


def test_all_is_pinned() -> None:
    assert set(memory.__all__) == EXPECTED
    assert len(memory.__all__) == len(EXPECTED)


def test_every_exported_name_exists() -> None:
    for name in memory.__all__:
        assert getattr(memory, name) is not None
