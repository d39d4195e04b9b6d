"""Which agent class each name stands for: the configured system's agents, `[agents.<name>]` classes,
registered ones and import paths. Replay resolves its agents here without loading the bus."""

from __future__ import annotations

from collections.abc import Callable

from faultline.core import (
    ALL_AGENTS,
    HELPERS,
    Agent,
    SystemRef,
    helper_agent,
    load_agent_class,
    load_system,
    registered,
)
from faultline.runtime._config import Config

HELPER_AGENTS = frozenset(map(helper_agent, HELPERS))
"""The helpers among them: they run where the roster asks for them (`helper_workers`), never in a `*` group."""
CONTROLLER_AGENT = "fama"
"""The FAMA controller: it runs in its own service process (`faultline fama serve`), never in a `*` group."""


def system_of(config: Config) -> SystemRef:
    """The system of the configuration's `[system] class` (the built-in tool-use one by default), checked."""
    return load_system(config.system.class_)


def agent_names(config: Config) -> list[str]:
    """Every agent a `*` in a worker's agent list stands for: the system's, and the configured ones but the
    helpers and the controller (a system's own agent may share a helper's name: a user's system has no helpers)."""
    return sorted({*system_of(config).agent_names, *(set(config.agents) - HELPER_AGENTS - {CONTROLLER_AGENT})})


def resolve_agents(names: list[str], config: Config) -> list[type[Agent]]:
    """Agent classes for names: configured (`[agents.<name>] class`), the system's, registered, or a path."""
    if ALL_AGENTS in names:
        names = agent_names(config)
    system = system_of(config)
    classes = []
    for name in names:
        configured = config.agents.get(name)
        if configured is not None and configured.class_:
            classes.append(load_agent_class(configured.class_))
        else:
            classes.append(system.agent(name) or load_agent_class(name))
    return classes


def agent_lookup(config: Config) -> Callable[[str], type[Agent] | None]:
    """Name to agent class for replay: None for participants that are not agents (the runner)."""
    cache: dict[str, type[Agent] | None] = {}

    def lookup(name: str) -> type[Agent] | None:
        if name not in cache:
            known = (
                name in registered("agent")
                or (name in config.agents and config.agents[name].class_)
                or system_of(config).agent(name) is not None
            )
            cache[name] = resolve_agents([name], config)[0] if known else None
        return cache[name]

    return lookup
