"""Faultline: an event-sourced runtime for LLM multi-agent systems that use tools.

The pieces live in subpackages (`faultline.bus`, `faultline.journal`, `faultline.runtime`,
`faultline.agents`, `faultline.replay`, `faultline.envs`); the error tree is here.
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
