"""Model backends: `openai` (any OpenAI-compatible endpoint), `sim` (offline, deterministic, at
the emulated speed of a slow model when a role asks for one) and `scripted` (answers a test
chooses, from a rules file or a function)."""

from faultline.runtime.models._openai import (
    DEFAULT_MAX_TOKENS,
    OpenAIBackend,
    OpenAIEmbedder,
    OpenAISettings,
    parse_tool_arguments,
)
from faultline.runtime.models._scripted import Rule, ScriptedBackend, load_script, read_rules
from faultline.runtime.models._sim import SimBackend, sim_metadata
from faultline.runtime.models._sim_latency import SimLatency

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "OpenAIBackend",
    "OpenAIEmbedder",
    "OpenAISettings",
    "Rule",
    "ScriptedBackend",
    "SimBackend",
    "SimLatency",
    "load_script",
    "parse_tool_arguments",
    "read_rules",
    "sim_metadata",
]
