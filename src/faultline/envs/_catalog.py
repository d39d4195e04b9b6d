"""An episode's tools and ground-truth calls, looked up from the Start data that names its domain and task."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from faultline._errors import FaultlineError
from faultline.envs._loader import load_domain


class DomainCatalog:
    """Tools, ground-truth calls and instruction of an episode's task, from Start data naming `domain` and `task`.

    The tool-call faults need both wherever they are applied: on a worker's bus and in a fork.
    """

    def tools(self, start: Mapping[str, Any]) -> list[str]:
        return list(_tools(str(start.get("domain", ""))))

    def plan(self, start: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(name, dict(args)) for name, args in _plan(str(start.get("domain", "")), str(start.get("task", "")))]

    def instruction(self, start: Mapping[str, Any]) -> str:
        return _instruction(str(start.get("domain", "")), str(start.get("task", "")))


@lru_cache(maxsize=64)
def _tools(domain: str) -> tuple[str, ...]:
    try:
        return tuple(spec.name for spec in load_domain(domain).tools())
    except FaultlineError:
        return ()


@lru_cache(maxsize=4096)
def _plan(domain: str, task: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    try:
        return tuple((a.name, dict(a.arguments)) for a in load_domain(domain).task(task).actions)
    except FaultlineError:
        return ()


@lru_cache(maxsize=4096)
def _instruction(domain: str, task: str) -> str:
    try:
        return load_domain(domain).task(task).instruction
    except FaultlineError:
        return ""
