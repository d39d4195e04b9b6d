"""The public surface of faultline.agents.memory; adding or dropping a name must be deliberate."""

from __future__ import annotations

import faultline.agents.memory as memory

EXPECTED = {
    "MIN_ZERO_RATINGS",
    "Cut",
    "CutReason",
    "Dynamic",
    "Embedder",
    "ExtractionInput",
    "HashingEmbedder",
    "HashingSettings",
    "IndexKind",
    "IndexSettings",
    "MemoryEntry",
    "MemorySettings",
    "MemoryStats",
    "MemoryStore",
    "PartitionStats",
    "PromptSettings",
    "Retrieval",
    "RetrievalMode",
    "ScoredEntry",
    "ToolCallRecord",
    "ToolExchange",
    "TopK",
    "choose_n",
    "derivative_estimate",
    "extractor_request",
    "filter_tools",
    "format_entries",
    "format_examples",
    "hidden_tools",
    "sim_reflection",
    "tool_name",
    "tool_ratings",
}


def test_all_is_pinned() -> None:
    assert set(memory.__all__) == EXPECTED
    assert len(memory.__all__) == len(EXPECTED)


def test_every_exported_name_exists() -> None:
    for name in memory.__all__:
        assert getattr(memory, name) is not None
