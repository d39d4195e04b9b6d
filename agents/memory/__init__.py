"""MemToolAgent memory: entries of past episodes, similarity search on FAISS, dynamic-n retrieval.

The store is a projection of the journal: one `MemoryEntry` per completed
episode, written with `MemoryStore.add` (idempotent by entry id), searched with
`MemoryStore.retrieve(query, TopK(k) | Dynamic(...))`. Failures get a
reflection from the memory extractor (`extractor_request`, or `sim_reflection`
offline); the tool agent sees retrieved entries through `format_examples` and
a tool list pruned by `filter_tools` (hard preference guiding).
"""

from faultline.agents.memory._embed import Embedder, HashingEmbedder, HashingSettings
from faultline.agents.memory._entry import MemoryEntry, ScoredEntry, ToolCallRecord
from faultline.agents.memory._index import IndexKind, IndexSettings
from faultline.agents.memory._preference import (
    MIN_ZERO_RATINGS,
    filter_tools,
    hidden_tools,
    tool_name,
    tool_ratings,
)
from faultline.agents.memory._prompts import (
    ExtractionInput,
    PromptSettings,
    ToolExchange,
    extractor_request,
    format_entries,
    format_examples,
    sim_reflection,
)
from faultline.agents.memory._retrieval import (
    Cut,
    CutReason,
    Dynamic,
    Retrieval,
    RetrievalMode,
    TopK,
    choose_n,
    derivative_estimate,
)
from faultline.agents.memory._store import MemorySettings, MemoryStats, MemoryStore, PartitionStats

__all__ = [
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
]
