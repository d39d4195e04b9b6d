"""Faultline: an event-sourced runtime for LLM multi-agent systems that use tools."""

from faultline._errors import FaultlineError

__all__ = ["FaultlineError"]
__version__ = "0.1.0"
