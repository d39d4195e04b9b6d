"""Faultline: an event-sourced runtime for LLM multi-agent systems that use tools.

The pieces live in subpackages (`faultline.bus`, `faultline.journal`, `faultline.runtime`,
`faultline.agents`, `faultline.replay`, `faultline.envs`); the error tree is here.
"""

from faultline._errors import (
    AccessError,
    BusError,
    ChainError,
    ConfigError,
    DecodeError,
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
    "BusError",
    "ChainError",
    "ConfigError",
    "DecodeError",
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
    "PublishRefusedError",
    "ReplyTimeoutError",
    "RunError",
    "ServerError",
    "SubjectError",
    "ToolError",
    "UsageError",
]
__version__ = "0.1.0"
