"""A system: the agents of an episode, where it begins, who may finish it, and how it is graded.

A system is the user's own: any topology of agents that talk through messages. Faultline needs
four facts of it to run episodes: its agents, the entry (the agent the runner hands the start
message, built from one input record), the finishers (the agents whose `Finished` ends an
episode) and the scorer (a function of the input record and the final output). The runtime's
own agent `scorer` receives every `Finished`, grades it and completes the episode, so no agent
of the user's needs the right to complete episodes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from faultline._errors import ConfigError
from faultline.core._agent import Agent
from faultline.core._context import Recipients
from faultline.core._messages import SCORER, Start
from faultline.core._plugins import load_plugin, plugin_error

BUILTIN_SYSTEM = "tool-use"
"""The registered name of the built-in system: the tool-use domains."""


class Grade(msgspec.Struct, frozen=True):
    """What a scorer says of an episode: its reward (1.0 or more is a success) and, short of that, why."""

    reward: float
    cause: str = ""

    @property
    def success(self) -> bool:
        return self.reward >= 1.0


class InputRecord(msgspec.Struct, frozen=True):
    """One input of a system: its id (unique in its file) and the record's fields."""

    id: str
    data: dict[str, Any]


class System:
    """Subclass and set the class attributes; override `start` and `score`.

        class Research(System):
            name = "research"
            agents = (Planner, Researcher, Writer, Reviewer)
            entry = "planner"
            finishers = ("reviewer",)
            needs = ("question",)

            def score(self, record, output):
                return Grade(1.0) if record.data["answer"] in output else Grade(0.0, "answer missing")

    `needs` are the fields every input record must have; a record without one is refused,
    naming its file and line, before any episode starts. `start` builds the entry agent's
    first message from a record (by default `Start(data=record.data)`). `score` runs once per
    episode, in the scorer agent, on the output of the first `Finished` a finisher sent; an
    exception it raises completes the episode as `error` with that cause. Both must be pure
    functions of their arguments: replay runs them again.
    """

    name: ClassVar[str] = "system"
    agents: ClassVar[tuple[type[Agent], ...]] = ()
    entry: ClassVar[str] = ""
    finishers: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    sends: ClassVar[frozenset[str]] = frozenset({"start", "note", "finished"})
    """The body kinds its agents send (`Note` is "note"): a fault type that rewrites none of them is
    refused for its runs, naming why, instead of never applying."""
    completer: ClassVar[str] = SCORER
    """The agent that completes episodes: the runtime's scorer, which grades with `score`. The built-in
    tool-use system's environment completes its own (it scores the database it holds)."""

    def start(self, record: InputRecord) -> Start:
        return Start(data=record.data)

    def score(self, record: InputRecord, output: Any) -> Grade:
        raise NotImplementedError(f"{type(self).__name__}.score")


@dataclass(frozen=True)
class SystemRef:
    """A system as episodes name it: the import path of its class (or registered name), and its checked form."""

    path: str
    system: System

    @property
    def agent_names(self) -> tuple[str, ...]:
        """Its agents', and the scorer when it grades the system's episodes."""
        names = tuple(cls.name for cls in self.system.agents)
        return (*names, SCORER) if self.system.completer == SCORER else names

    @property
    def is_user_system(self) -> bool:
        """Whether its episodes begin from input records and end graded by the scorer (not a built-in domain system)."""
        return self.system.completer == SCORER

    def agent(self, name: str) -> type[Agent] | None:
        return next((cls for cls in self.system.agents if cls.name == name), None)

    def recipients(self, agent: str) -> Recipients | None:
        """Whom agent `agent` may send direct messages to in this system's episodes: on a system of one's own, its
        agents and the scorer; None (anyone) for an agent that is not one of them, and on the built-in tool-use
        system, whose helpers join by roster and which agents of one's configuration may join (README).

        The system's code decides, which a worker and a replay of its episodes load alike, so the answer is the
        same live and in replay."""
        if not self.is_user_system or self.agent(agent) is None:
            return None
        return _recipients(self)


@functools.cache
def _recipients(ref: SystemRef) -> Recipients:
    named = ref.system.name != System.name  # a system that sets no name goes by its class's
    return Recipients(ref.system.name if named else type(ref.system).__qualname__, frozenset(ref.agent_names))


def system_path(system: str | type[System]) -> str:
    """`system` as `load_system` takes it and a journal names it: a class by its module and name, a path as it is."""
    return system if isinstance(system, str) else f"{system.__module__}:{system.__qualname__}"


@functools.cache
def load_system(path: str) -> SystemRef:
    """The system class at `package.module:Class` (or registered under `faultline.systems`), checked.

    Every mistake is one PluginError line: a class that is not a System, an agent class twice or
    named `scorer`, an entry or a finisher that is not one of its agents, no finisher at all. Loaded
    once per process: the runner asks for it at every episode's start, each scorer at its first.
    """
    found = load_plugin("system", path)
    if not (isinstance(found, type) and issubclass(found, System)):
        raise plugin_error("system", path, f"{_describe(found)} is not a faultline System subclass")
    try:
        system = found()
    except Exception as exc:  # noqa: BLE001 - whatever a plugin's constructor raises, the answer is one line
        raise plugin_error("system", path, f"building it raised {type(exc).__name__}: {exc}") from None
    problem = _problem(system)
    if problem:
        raise plugin_error("system", path, problem)
    return SystemRef(path, system)


def _problem(system: System) -> str:
    agents = system.agents
    for cls in agents:
        if problem := _agent_problem(cls):
            return problem
    names = [cls.name for cls in agents]
    if not names:
        return "it names no agents: set agents = (MyAgent, ...)"
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice:
        return f"two of its agents are named {twice!r}"
    if system.completer == SCORER and SCORER in names:
        return f"{SCORER!r} is the runtime's own agent, which grades episodes: name yours otherwise"
    if system.completer != SCORER and system.completer not in names:
        return f"its completer {system.completer!r} is not one of its agents ({', '.join(names)})"
    if system.entry not in names:
        return f"its entry {system.entry!r} is not one of its agents ({', '.join(names)})"
    if not system.finishers:
        return "no agent can finish its episodes: set finishers = ('agent-name', ...), the agents that send Finished"
    stray = [name for name in system.finishers if name not in names]
    if stray:
        return f"its finisher {stray[0]!r} is not one of its agents ({', '.join(names)})"
    return ""


def _agent_problem(cls: object) -> str:
    """What keeps `cls` from being one of a system's agents, "" if nothing (a user's system is not type-checked)."""
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        return f"its agents must be Agent subclasses with a name, not {cls!r}"
    if not getattr(cls, "name", None):
        return f"its agent {cls.__qualname__} has no name: set name = '...' on the class"
    return ""


def _describe(found: object) -> str:
    return f"class {found.__name__}" if isinstance(found, type) else f"a {type(found).__name__}"


def read_inputs(path: Path, needs: Sequence[str] = ()) -> list[InputRecord]:
    """The input records of a JSON-lines file: one object a line, with an optional `id` (else its line number).

    A line that is not a JSON object, an id given twice or a record without a field of `needs`
    is one ConfigError naming the file and line. Blank lines are skipped.
    """
    records: list[InputRecord] = []
    seen: dict[str, int] = {}
    for number, line in numbered_lines(path, missing="no such inputs file", unreadable="cannot read the inputs"):
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not a JSON object ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: each line must be a JSON object, not a {type(data).__name__}")
        record = record_of(data, number)
        if record.id in seen:
            raise ConfigError(f"{where}: id {record.id!r} is also on line {seen[record.id]}: ids must differ")
        seen[record.id] = number
        missing = [name for name in needs if name not in data]
        if missing:
            raise ConfigError(f"{where}: the record has no {missing[0]!r}, which the system needs")
        records.append(record)
    if not records:
        raise ConfigError(f"{path}: no input records (one JSON object a line)")
    return records


def numbered_lines(
    path: Path, *, missing: str = "no such file", unreadable: str = "cannot read the file", label: str = ""
) -> list[tuple[int, str]]:
    """The lines of a text file that are not blank, with their numbers (from 1), for readers of JSON lines.

    A file that is not there, or cannot be read as UTF-8, is one ConfigError: `<label><path>: <missing>`,
    or `<label><path>: <unreadable> (why)`.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{label}{path}: {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}{path}: {unreadable} ({exc})") from None
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def record_of(data: Mapping[str, Any], position: int = 1) -> InputRecord:
    """An input record from its fields: its id is its `id`, else its position (from 1), as in an inputs file."""
    return InputRecord(str(data.get("id", position)), dict(data))
