"""Model backends: `openai` (any OpenAI-compatible endpoint), `sim` (offline, deterministic) and
`scripted` (answers a test chooses, from a rules file or a function)."""

from faultline.runtime.models._openai import (
    DEFAULT_MAX_TOKENS,
    OpenAIBackend,
    OpenAIEmbedder,
    OpenAISettings,
    parse_tool_arguments,
)
from faultline.runtime.models._scripted import Rule, ScriptedBackend, load_script, read_rules
from faultline.runtime.models._sim import SimBackend, sim_metadata

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "OpenAIBackend",
    "OpenAIEmbedder",
    "OpenAISettings",
    "Rule",
    "ScriptedBackend",
    "SimBackend",
    "load_script",
    "parse_tool_arguments",
    "read_rules",
    "sim_metadata",
]
