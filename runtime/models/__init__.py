"""Model backends: `openai` (any OpenAI-compatible endpoint) and `sim` (offline, deterministic)."""

from faultline.runtime.models._types import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    ModelBackend,
    Usage,
)

__all__ = ["ChatMessage", "LlmRequest", "LlmResponse", "LlmToolCall", "ModelBackend", "Usage"]
