"""MemToolAgent memory: entries of past episodes, similarity search on FAISS, dynamic-n retrieval.

The store is a projection of the journal: one `MemoryEntry` per completed
episode, written with `MemoryStore.add` (idempotent by entry id), searched with
`MemoryStore.retrieve(query, TopK(k) | Dynamic(...))`. Failures get a
reflection from the memory extractor (`extractor_request`, or `sim_reflection`
offline); the tool agent sees retrieved entries through `format_examples` and
a tool list pruned by `filter_tools` (hard preference guiding).

What travels between the service and the agents that ask it (entries, retrieval modes, requests and
replies) is defined in `faultline.agents.memory` and re-exported here.

On the bus, `MemoryService` writes one entry per completed episode
(`entry_from_episode`, shared with `rebuild` from a journal file) and answers
retrieval requests on `fl.svc.memory`; the tool agent asks it through
`memory_examples(ctx, ...)`, which records the reply for replay.
"""

from faultline.agents.memory import (
    MEMORY_SERVICE,
    SYNC_SERVICE,
    CutReason,
    Dynamic,
    MemoryEntry,
    MemorySync,
    RetrievalMode,
    RetrievalReply,
    RetrievalRequest,
    ScoredEntry,
    ToolCallRecord,
    TopK,
    format_entries,
    format_examples,
    memory_examples,
    retrieval_body,
    retrieval_mode,
    tool_name,
)
from faultline.services.memory._configured import extractor_backend, make_embedder, open_memory
from faultline.services.memory._embed import Embedder, HashingEmbedder, HashingSettings
from faultline.services.memory._index import IndexKind, IndexSettings
from faultline.services.memory._preference import MIN_ZERO_RATINGS, filter_tools, hidden_tools, tool_ratings
from faultline.services.memory._projection import (
    MEMORY_AGENT,
    EpisodeFacts,
    entry_from_episode,
    entry_from_facts,
    episode_facts,
)
from faultline.services.memory._prompts import (
    ExtractionInput,
    PromptSettings,
    ToolExchange,
    extractor_request,
    sim_preferences,
    sim_reflection,
)
from faultline.services.memory._rebuild import RebuildReport, rebuild
from faultline.services.memory._retrieval import Cut, Retrieval, choose_n, derivative_estimate
from faultline.services.memory._service import MemoryService, MemoryServiceSettings, read_episode, serve_memory
from faultline.services.memory._store import MemorySettings, MemoryStats, MemoryStore, PartitionStats
from faultline.services.memory._sync import wait_for_memory

__all__ = [
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
]
