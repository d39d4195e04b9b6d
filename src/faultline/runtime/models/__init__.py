"""Model backends: `openai` (any OpenAI-compatible endpoint) and `sim` (offline, deterministic)."""

from faultline.runtime.models._openai import (
    DEFAULT_MAX_TOKENS,
    OpenAIBackend,
    OpenAIEmbedder,
    OpenAISettings,
    parse_tool_arguments,
)
from faultline.runtime.models._sim import SimBackend, sim_metadata

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "OpenAIBackend",
    "OpenAIEmbedder",
    "OpenAISettings",
    "SimBackend",
    "parse_tool_arguments",
    "sim_metadata",
]
