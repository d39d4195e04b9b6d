"""The FAMA helper agents (DCE, TSA, TOR, Planner, Verifier, Memory) that answer the tool agent's
context requests; which of them take part is the episode's roster (`faultline.runtime.parse_roster`)."""

from faultline.agents.helpers._agents import (
    HELPER_CLASSES,
    ConstraintsExtractor,
    Helper,
    OutputReformulator,
    Planner,
    ToolSuggester,
    UserContext,
    Verifier,
)

__all__ = [
    "HELPER_CLASSES",
    "ConstraintsExtractor",
    "Helper",
    "OutputReformulator",
    "Planner",
    "ToolSuggester",
    "UserContext",
    "Verifier",
]
