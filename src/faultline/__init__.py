"""Faultline: an event-sourced runtime for LLM multi-agent systems that use tools.

Two modules are public: `faultline.agent`, what authors of agents and domains import, and
`faultline.api` (`run`, `replay`, `attribute`), what the command line does, for programs. The error
tree is here.
"""

import importlib.metadata

from faultline._errors import (
    AccessError,
    AnswerFormatError,
    BusError,
    CampaignError,
    ChainError,
    ConfigError,
    DecodeError,
    DeliveriesLostError,
    DirectoryBusyError,
    DomainError,
    FaultlineError,
    FaultRuleError,
    HandlerTimeoutError,
    JournalError,
    JournalStorageError,
    MemoryStoreError,
    ModelError,
    NonDeterminismError,
    NoResponderError,
    PluginError,
    PublishRefusedError,
    ReplyTimeoutError,
    RunError,
    ServerError,
    SubjectError,
    ToolError,
    UsageError,
)

__all__ = [
    "AccessError",
    "AnswerFormatError",
    "BusError",
    "ChainError",
    "ConfigError",
    "DecodeError",
    "DeliveriesLostError",
    "DirectoryBusyError",
    "DomainError",
    "FaultRuleError",
    "FaultlineError",
    "HandlerTimeoutError",
    "JournalError",
    "JournalStorageError",
    "MemoryStoreError",
    "ModelError",
    "NoResponderError",
    "NonDeterminismError",
    "PluginError",
    "PublishRefusedError",
    "ReplyTimeoutError",
    "CampaignError",
    "RunError",
    "ServerError",
    "SubjectError",
    "ToolError",
    "UsageError",
]
__version__ = importlib.metadata.version("faultline")
"""The installed distribution's version, as `faultline --version` prints it."""
