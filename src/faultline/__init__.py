"""Faultline: an event-sourced runtime for LLM multi-agent systems that use tools.

Two modules are public: `faultline.agent`, what authors of agents and domains import, and
`faultline.api` (`run`, `replay`, `attribute`), what the command line does, for programs. The error
tree is here.
"""

from typing import TYPE_CHECKING

from faultline._errors import (
    AccessError,
    AnswerFormatError,
    BusError,
    CampaignError,
    ChainError,
    ConfigError,
    ConsumerInUseError,
    DecodeError,
    DeliveriesLostError,
    DirectoryBusyError,
    DomainError,
    EpisodeHeldError,
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
    SubscribeRefusedError,
    ToolError,
    UnknownRecipientError,
    UsageError,
)

__all__ = [
    "AccessError",
    "AnswerFormatError",
    "BusError",
    "ChainError",
    "ConfigError",
    "ConsumerInUseError",
    "DecodeError",
    "DeliveriesLostError",
    "DirectoryBusyError",
    "DomainError",
    "EpisodeHeldError",
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
    "SubscribeRefusedError",
    "ToolError",
    "UnknownRecipientError",
    "UsageError",
]
if TYPE_CHECKING:
    __version__: str
    """The installed distribution's version, as `faultline --version` prints it."""
else:

    def __getattr__(name: str) -> str:
        """`__version__`, read from the installed distribution when first asked for: `importlib.metadata` and the
        lookup cost every program that imports faultline, and every command, about 80 ms."""
        if name != "__version__":
            raise AttributeError(f"module 'faultline' has no attribute {name!r}")
        import importlib.metadata

        version = importlib.metadata.version("faultline")
        globals()["__version__"] = version
        return version
