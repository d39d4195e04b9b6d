"""The runtime: the Agent and Context API, workers, the supervisor, model backends, configuration, CLI."""

from faultline.runtime._agent import Agent, load_agent_class
from faultline.runtime._config import (
    AgentConfig,
    Config,
    JournalConfig,
    MemoryConfig,
    ModelConfig,
    NatsConfig,
    RuntimeConfig,
    WorkerConfig,
    load_config,
    make_backend,
    parse_config,
)
from faultline.runtime._context import Context, Recorder
from faultline.runtime._episodes import Completions, start_episode
from faultline.runtime._handling import Handling
from faultline.runtime._harness import AgentHarness
from faultline.runtime._worker import Worker, WorkerSettings, shard_of

__all__ = [
    "Agent",
    "AgentHarness",
    "AgentConfig",
    "Completions",
    "Config",
    "Context",
    "Handling",
    "JournalConfig",
    "MemoryConfig",
    "ModelConfig",
    "NatsConfig",
    "Recorder",
    "RuntimeConfig",
    "Worker",
    "WorkerConfig",
    "WorkerSettings",
    "load_agent_class",
    "load_config",
    "make_backend",
    "parse_config",
    "shard_of",
    "start_episode",
]
