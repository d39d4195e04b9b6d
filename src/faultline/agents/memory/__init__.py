"""The memory service as agents see it: what a retrieval asks and gets back, and how the tool agent uses it.

The service itself (store, index, extractor, `fl.svc.memory`) is `faultline.services.memory`; an agent
asks it through `memory_examples(ctx, ...)`, which records the reply so that replay needs no service.
"""

from faultline.agents.memory._client import memory_examples, retrieval_body, retrieval_mode, tool_name
from faultline.agents.memory._entry import MemoryEntry, ScoredEntry, ToolCallRecord
from faultline.agents.memory._examples import (
    RATING_RANKER,
    call_data,
    format_entries,
    format_examples,
    json_text,
    verdict,
)
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
from faultline.agents.memory._user import PREFERENCE_TAG, is_preference_task, preference_ratings, task_user

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_PROMINENCE",
    "DEFAULT_RADIUS",
    "DEFAULT_TOP_K",
    "MEMORY_SERVICE",
    "PREFERENCE_TAG",
    "RATING_RANKER",
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
    "is_preference_task",
    "json_text",
    "memory_examples",
    "preference_ratings",
    "retrieval_body",
    "retrieval_mode",
    "task_user",
    "tool_name",
    "verdict",
]
