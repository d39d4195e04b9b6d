"""The runtime: the Agent and Context API, workers, the supervisor, model backends, configuration, CLI."""

from faultline.runtime._config import (
    ALL_AGENTS,
    ALL_ROLES,
    DEFAULT_CONFIG_FILE,
    AgentConfig,
    Config,
    JournalConfig,
    MemoryConfig,
    ModelConfig,
    NatsConfig,
    RunDefaults,
    RuntimeConfig,
    WorkerConfig,
    load_config,
    make_backend,
    parse_config,
)
from faultline.runtime._episodes import (
    CallInFlight,
    Completions,
    check_journal,
    model_calls_in_flight,
    start_episode,
    started_envelope,
)
from faultline.runtime._faulting import (
    apply_defense_flags,
    follow_settings,
    make_rule,
    parse_duration,
    parse_fault_spec,
    rules_in_force,
    scoped_to_run,
)
from faultline.runtime._layout import check_system
from faultline.runtime._lock import hold_directories, state_dir
from faultline.runtime._services import agent_lookup, run_journal, run_worker, serve_until_signal
from faultline.runtime._supervisor import ProcessSpec, Supervisor
from faultline.runtime._worker import Worker, WorkerSettings, shard_of

__all__ = [
    "ALL_AGENTS",
    "ALL_ROLES",
    "AgentConfig",
    "CallInFlight",
    "Completions",
    "Config",
    "DEFAULT_CONFIG_FILE",
    "JournalConfig",
    "MemoryConfig",
    "ModelConfig",
    "NatsConfig",
    "ProcessSpec",
    "RunDefaults",
    "RuntimeConfig",
    "Supervisor",
    "Worker",
    "WorkerConfig",
    "WorkerSettings",
    "agent_lookup",
    "apply_defense_flags",
    "check_journal",
    "check_system",
    "follow_settings",
    "hold_directories",
    "load_config",
    "make_backend",
    "make_rule",
    "model_calls_in_flight",
    "parse_config",
    "parse_duration",
    "parse_fault_spec",
    "rules_in_force",
    "run_journal",
    "run_worker",
    "scoped_to_run",
    "serve_until_signal",
    "shard_of",
    "start_episode",
    "started_envelope",
    "state_dir",
]
