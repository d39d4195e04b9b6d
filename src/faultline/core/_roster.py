"""Helper rosters as episodes carry them: which FAMA helpers take part, in one canonical spelling.

A roster is a list of entries `name` or `name:K` (only `memory` takes K, the
number of user turns it keeps), written in one order, so two spellings of the
same roster start identical episodes. Pure functions, so that agents and replay
read rosters without loading the runtime.
"""

from __future__ import annotations

from faultline._errors import ConfigError

HELPERS: tuple[str, ...] = ("dce", "tsa", "tor", "planner", "memory", "verifier")
"""Every helper, in the order a roster lists them (the verifier last: it acts after the others)."""
AGENT_OF: dict[str, str] = {name: name for name in HELPERS} | {"memory": "user_context"}
"""The agent that plays each helper: `memory` is the paper's User Context Manager, named so that it
never mixes with the memory service, whose recordings travel as `memory`."""
DEFAULT_MEMORY_TURNS = 6
"""K of a bare `memory` entry: the paper's best for retail (airline: 2)."""


def helper_name(entry: str) -> str:
    """`memory:6` -> `memory`."""
    return entry.partition(":")[0]


def helper_agent(entry: str) -> str:
    """`memory:6` -> `user_context`: the agent name a roster entry stands for."""
    return AGENT_OF[helper_name(entry)]


def memory_turns(entry: str) -> int:
    """K of a `memory:K` entry."""
    _, _, k = entry.partition(":")
    return int(k) if k else DEFAULT_MEMORY_TURNS


def parse_roster(entries: str | list[str] | tuple[str, ...]) -> list[str]:
    """A roster in canonical form from `dce,tor,memory:6` or a list; ConfigError names a wrong entry."""
    items = [e.strip() for e in entries.split(",")] if isinstance(entries, str) else [e.strip() for e in entries]
    chosen: dict[str, str] = {}
    for item in items:
        if not item or item == "none":
            continue
        name, colon, arg = item.partition(":")
        if name not in HELPERS:
            raise ConfigError(f"unknown helper {name!r}: use {', '.join(HELPERS)} (memory as memory:K)")
        if colon and name != "memory":
            raise ConfigError(f"helper {item!r}: only memory takes a number, the user turns it keeps (memory:6)")
        if colon and (not arg.isdigit() or int(arg) < 1):
            raise ConfigError(f"helper {item!r}: memory keeps K user turns, K a whole number from 1 (memory:6)")
        if name in chosen:
            raise ConfigError(f"helper {name!r} is named twice")
        chosen[name] = f"memory:{memory_turns(item)}" if name == "memory" else name
    return [chosen[name] for name in HELPERS if name in chosen]
