"""The memory service as agents see it: what a retrieval asks and gets back, and how the tool agent uses it.

The service itself (store, index, extractor, `fl.svc.memory`) is `faultline.services.memory`; an agent
asks it through `memory_examples(ctx, ...)`, which records the reply so that replay needs no service.
"""

from faultline.agents.memory._client import memory_examples, retrieval_body, retrieval_mode, tool_name
from faultline.agents.memory._entry import MemoryEntry, ScoredEntry, ToolCallRecord
from faultline.agents.memory._examples import call_data, format_entries, format_examples, json_text, verdict
from faultline.agents.memory._modes import (
    DEFAULT_CANDIDATES,
    DEFAULT_PROMINENCE,
    DEFAULT_RADIUS,
    DEFAULT_TOP_K,
    CutReason,
    Dynamic,
    RetrievalMode,
    TopK,
)
from faultline.agents.memory._protocol import (
    MEMORY_SERVICE,
    SYNC_SERVICE,
    MemorySync,
    RetrievalReply,
    RetrievalRequest,
    SyncRequest,
)

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_PROMINENCE",
    "DEFAULT_RADIUS",
    "DEFAULT_TOP_K",
    "MEMORY_SERVICE",
    "SYNC_SERVICE",
    "CutReason",
    "Dynamic",
    "MemoryEntry",
    "MemorySync",
    "RetrievalMode",
    "RetrievalReply",
    "RetrievalRequest",
    "ScoredEntry",
    "SyncRequest",
    "ToolCallRecord",
    "TopK",
    "call_data",
    "format_entries",
    "format_examples",
    "json_text",
    "memory_examples",
    "retrieval_body",
    "retrieval_mode",
    "tool_name",
    "verdict",
]
