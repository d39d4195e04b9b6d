"""Model backends: `openai` (any OpenAI-compatible endpoint), `sim` (offline, deterministic, at
the emulated speed of a slow model when a role asks for one) and `scripted` (answers a test
chooses, from a rules file or a function).

Each name is imported on first use: reading a config needs the settings, not the simulator."""

from typing import TYPE_CHECKING

from faultline._lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "faultline.runtime.models._openai": (
            "DEFAULT_MAX_TOKENS",
            "OpenAIBackend",
            "OpenAIEmbedder",
            "OpenAISettings",
            "parse_tool_arguments",
        ),
        "faultline.runtime.models._scripted": ("Rule", "ScriptedBackend", "load_script", "read_rules"),
        "faultline.runtime.models._sim": ("SimBackend", "sim_metadata"),
        "faultline.runtime.models._sim_latency": ("SimLatency",),
    },
)
