"""Model backends: `openai` (any OpenAI-compatible endpoint) and `sim` (offline, deterministic)."""

from faultline.runtime.models._openai import (
    OpenAIBackend,
    OpenAIEmbedder,
    OpenAISettings,
    parse_tool_arguments,
)
from faultline.runtime.models._sim import SimBackend, sim_metadata
from faultline.runtime.models._types import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    ModelBackend,
    Usage,
)

__all__ = [
    "ChatMessage",
    "LlmRequest",
    "LlmResponse",
    "LlmToolCall",
    "ModelBackend",
    "OpenAIBackend",
    "OpenAIEmbedder",
    "OpenAISettings",
    "SimBackend",
    "Usage",
    "parse_tool_arguments",
    "sim_metadata",
]
