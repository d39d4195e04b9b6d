"""The domain plugin interface: seeded data, tools over it, a policy, tasks with ground truth.

A domain author writes tools as methods marked with `@tool`, fills a fresh
database in `seed_database`, and lists `tasks()`. The base class does the rest
the same way for every domain: argument checks, one transaction per call,
state hashing, expected states and decisive mistakes for the simulator.
"""

from __future__ import annotations

import copy
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, ClassVar, Literal, TypeVar

import msgspec

from faultline._errors import DomainError, ToolError
from faultline.core import Agent
from faultline.envs._mistakes import KeyIndex, derived_candidates, key_index
from faultline.envs._schema import arguments_schema, check_arguments, schema_problem
from faultline.envs._state import RowForm, state_digest, track_changes
from faultline.envs._types import EARLY_STOP, POLICY_VIOLATION, Action, Budgets, Score, Task, ToolOutcome, ToolSpec

_Method = TypeVar("_Method", bound=Callable[..., Any])
_TOOL_ATTR = "__faultline_tool__"

_templates: dict[tuple[type, Hashable], sqlite3.Connection] = {}
_templates_lock = threading.Lock()


def tool(
    description: str,
    /,
    *,
    writes: bool = False,
    terminal: bool = False,
    called: str = "",
    schema: dict[str, Any] | None = None,
    optional: tuple[str, ...] = (),
    **fields: tuple[str, str],
) -> Callable[[_Method], _Method]:
    """Mark a `Domain` method as a tool, named after the method unless `called` names it.

    The arguments are `schema`, a JSON Schema given whole (enums, nested
    objects, optional arrays: what the model is shown is what is checked), or
    `fields`, `name=(json_type, description)` pairs (see `arguments_schema`).
    The method is called as `method(db, **arguments)` once the arguments fit,
    and refuses by raising `ToolError`. A `terminal` tool ends the episode
    once it succeeded (a transfer to a human; `Domain.terminal_on_error` also when it failed):
    no tool runs after it.
    """

    def mark(method: _Method) -> _Method:
        if schema is not None and fields:
            raise DomainError(f"tool {method.__name__}: give a schema or fields, not both")
        spec = ToolSpec(
            name=called or method.__name__,
            description=description,
            parameters=schema if schema is not None else arguments_schema(optional, **fields),
            writes=writes,
            terminal=terminal,
        )
        problem = schema_problem(spec.parameters)
        if problem:
            raise DomainError(f"tool {spec.name}: {problem}")
        setattr(method, _TOOL_ATTR, spec)
        return method

    return mark


ToolFunction = Callable[..., Any]
"""A tool's code, called as `function(db, **arguments)`."""


@dataclass
class _Memo:
    """Per-instance caches; created lazily so subclasses need not call `super().__init__`."""

    tasks: dict[str, Task] | None = None
    tools: dict[str, tuple[ToolSpec, ToolFunction]] | None = None
    keys: KeyIndex | None = None
    expected: dict[tuple[str, bytes], str] = field(default_factory=dict)
    mistakes: dict[tuple[str, bytes, int, str], list[Action]] = field(default_factory=dict)
    records: frozenset[str | int] | None = None


class Domain(ABC):
    """A tool-use world: the episode's reward is 1 when the final database equals the ground truth's.

    Instances are stateless apart from caches, so one instance can serve many
    episodes at once; each episode works on its own `open_database()`.
    """

    name: ClassVar[str] = ""
    policy: str = ""
    """The rules the agent works under; a domain whose rules depend on its parameters sets its own per instance."""
    policy_is_system_prompt: ClassVar[bool] = False
    """True: `policy` is the tool agent's whole system prompt, with none of Faultline's own rules around it."""
    failing_gold_steps: ClassVar[Literal["fail", "ignore"]] = "fail"
    """What a ground-truth step that errors means: "fail" raises DomainError (a broken task);
    "ignore" scores the state after it as is (benchmarks whose gold includes refused calls)."""
    rollback_on_error: ClassVar[bool] = True
    """Whether a call that ends in an error leaves the database as it was (False: its writes stay)."""
    budgets: ClassVar[Budgets] = Budgets()
    """The episode limits a run uses unless its command line sets others."""
    hidden_instructions: ClassVar[bool] = False
    """True: task instructions are a brief for the user simulator (often in the second person) that
    must never reach the agent as written; the default user paraphrases instead of quoting."""
    user_agent: ClassVar[type[Agent] | None] = None
    """The agent class that plays the user in this domain's episodes (None: `UserSimulator`). A subclass
    of `UserSimulator` keeps the episode protocol and changes what the user says (`opening`)."""
    terminal_on_error: ClassVar[bool] = False
    """True: a terminal tool ends the episode even when the call fails (benchmarks whose transfer ends
    the conversation whatever it returns); False: only once it succeeded."""
    hashed_tables: ClassVar[frozenset[str] | None] = None
    """The tables the state hash covers (None: every table); the others are scratch space."""
    hashed_columns: ClassVar[Mapping[str, Sequence[str]]] = {}
    """Per table named, the only columns the state hash covers (an id the benchmark does not compare,
    a timestamp); tables not named are hashed whole. See also `canonical_row`."""
    _tool_methods: ClassVar[dict[str, tuple[ToolSpec, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        methods = dict(cls._tool_methods)
        for attribute, value in vars(cls).items():
            spec = getattr(value, _TOOL_ATTR, None)
            if isinstance(spec, ToolSpec):
                if hasattr(Domain, attribute):
                    raise DomainError(
                        f"{cls.__name__}: tool method {attribute!r} clashes with a Domain method;"
                        f" rename the method and give the tool's name as @tool(..., called={attribute!r})"
                    )
                methods[spec.name] = (spec, attribute)
        cls._tool_methods = methods

    # -- what a domain provides ---------------------------------------------------------------

    @abstractmethod
    def seed_database(self, db: sqlite3.Connection) -> None:
        """Create the tables and insert the seeded data (runs once per process per data key)."""

    @abstractmethod
    def tasks(self) -> list[Task]:
        """Every task, in a stable order."""

    def registered_tools(self) -> Iterable[tuple[ToolSpec, ToolFunction]]:
        """Tools that are not `@tool` methods: a spec and the function that runs it (see `ToolFunction`).

        For tools that exist already, such as a benchmark's functions over
        dicts wrapped by `document_tool`; their names may be anything.
        """
        return ()

    def tools(self) -> list[ToolSpec]:
        """The tools: `@tool` methods in the order they are defined, then the registered ones."""
        return [spec for spec, _ in self._toolbox().values()]

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        """Plausible wrong actions for ground-truth step `step`; `mistake` keeps the decisive ones.

        By default they are derived from the gold action, the tool schemas and
        the data (see `_mistakes`); a domain that knows its own likely errors says so here.
        """
        tools = {name: spec for name, (spec, _) in self._toolbox().items()}
        return derived_candidates(task, step, category, tools, self._key_index())

    def policy_breach(self, task: Task, action: Action) -> str:
        """The policy rule `action` breaks in `task`, in a few words, or "" when the domain sees none.

        For calls the tools accept although the policy forbids them (the tools refuse the rest);
        `faultline.replay.categorize` names such a call a policy violation. A domain judges from
        its data and policy, never from `mistake_candidates`. Default: no rule is checked.
        """
        return ""

    def names_record(self, value: Any) -> bool:
        """Whether `value` is the key of a record in the seeded data (a table's one-column primary key).

        Tells an argument that picks the record a call acts on (an order id) from one that only
        sets a value; a domain whose records are keyed otherwise says so here.
        """
        if isinstance(value, bool) or not isinstance(value, str | int):
            return False
        memo = self._memo()
        if memo.records is None:
            template = self._template()
            with _templates_lock:
                memo.records = _record_keys(template)
        return value in memo.records

    def user_prompt(self, task: Task) -> str:
        """The system prompt of the default user simulator for `task`; "" for Faultline's own."""
        return ""

    def is_terminal(self, tool_name: str) -> bool:
        """Whether a successful call of `tool_name` ends the episode."""
        found = self._toolbox().get(tool_name)
        return found is not None and found[0].terminal

    def output_error(self, output: Any) -> str:
        """The error a tool's returned `output` stands for, or "" when it is a normal result.

        For benchmarks whose tools return error strings instead of raising; such
        an error is treated like a raised `ToolError` (see `rollback_on_error`).
        Return the reason alone: the agent's model reads it as `Error: <reason>`.
        """
        return ""

    def output_told(self, output: str, told: str) -> bool:
        """Whether the required `output` appears in `told`, all the agent said; case is ignored."""
        return output.casefold() in told.casefold()

    @property
    def data_key(self) -> Hashable:
        """What the seeded data depends on besides the class (a seed, a size)."""
        return ()

    # -- what the base class derives ----------------------------------------------------------

    def task(self, task_id: str) -> Task:
        try:
            return self._indexed_tasks()[task_id]
        except KeyError:
            raise DomainError(f"domain {self.name!r} has no task {task_id!r}") from None

    def checked_tasks(self) -> list[Task]:
        """`tasks()` as the runtime reads it: an error inside it is one DomainError, and an id
        listed twice (two episodes would share an id) is refused."""
        return list(self._indexed_tasks().values())

    def _indexed_tasks(self) -> dict[str, Task]:
        memo = self._memo()
        if memo.tasks is None:
            try:
                listed = self.tasks()
            except Exception as exc:  # noqa: BLE001 - whatever a plugin's tasks() raises, the answer is one line
                raise DomainError(f"domain {self.name!r}: tasks() raised {type(exc).__name__}: {exc}") from None
            indexed: dict[str, Task] = {}
            for task in listed:
                if task.id in indexed:
                    raise DomainError(f"domain {self.name!r} lists task {task.id!r} twice: task ids must be unique")
                indexed[task.id] = task
            memo.tasks = indexed
        return memo.tasks

    def open_database(self) -> sqlite3.Connection:
        """A fresh in-memory copy of the seeded data; writes to it are visible nowhere else.

        The connection is in autocommit mode and may move between threads, but
        must not be used by two at once.
        """
        template = self._template()
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        with _templates_lock:
            template.backup(db)
        # A REPLACE that deletes a row fires delete triggers only with this on.
        db.execute("PRAGMA recursive_triggers = ON")
        return db

    def call(self, db: sqlite3.Connection, action: Action) -> ToolOutcome:
        """Run one tool call in its own transaction. Never raises: every problem is the outcome's error."""
        toolbox = self._toolbox()
        found = toolbox.get(action.name) if isinstance(action.name, str) else None
        if found is None:
            known = ", ".join(toolbox)
            return ToolOutcome(error=f"unknown tool {action.name!r}; the tools are: {known}")
        spec, function = found
        problem = check_arguments(spec.parameters, action.arguments)
        if problem:
            return ToolOutcome(error=f"invalid arguments for {spec.name}: {problem}")
        try:
            db.execute("SAVEPOINT tool_call")
        except sqlite3.Error as exc:
            return ToolOutcome(error=f"database unavailable: {exc}")
        # A copy: a tool that changes its arguments must not change the caller's (a task's ground truth).
        arguments = copy.deepcopy(action.arguments)
        try:
            output = msgspec.to_builtins(function(db, **arguments))
            error = self.output_error(output)
        except Exception as exc:  # noqa: BLE001 - a tool call must never take its caller down
            error = str(exc) if isinstance(exc, ToolError) else f"{spec.name} failed: {type(exc).__name__}: {exc}"
        _end_call(db, keep=not error or not self.rollback_on_error)
        return ToolOutcome(error=error) if error else ToolOutcome(output=output)

    def state_hash(self, db: sqlite3.Connection) -> str:
        """A digest of every table's name, columns and rows; row order does not matter.

        Tables whose names start with `_fl_` are bookkeeping and left out, and so
        is every table that `hashed_tables` does not name. Each row counts in the
        form `hashed_columns` and `canonical_row` give it.
        """
        return state_digest(db, self.hashed_tables, self._row_form())

    def canonical_row(self, table: str, row: dict[str, Any]) -> Any:
        """The form of one row of `table` that the state hash covers (default: the row as given).

        `row` maps the columns `hashed_columns` keeps to their stored values. Return any
        msgpack-encodable value: mappings are hashed with their keys sorted, so key order
        never counts; normalise whatever else the benchmark ignores (JSON text, case,
        float precision). Called for every row of a full digest, and for the few rows
        a tool changed otherwise, so it must not read the database.
        """
        return row

    def _row_form(self) -> RowForm | None:
        """The row form of `state_hash`; None (rows as stored, the fastest) when the domain sets none."""
        if not self.hashed_columns and type(self).canonical_row is Domain.canonical_row:
            return None
        keep = {table: frozenset(columns) for table, columns in self.hashed_columns.items()}

        def form(table: str, columns: list[str], values: tuple[object, ...]) -> object:
            kept = keep.get(table)
            row = {c: v for c, v in zip(columns, values, strict=True) if kept is None or c in kept}
            return self.canonical_row(table, row)

        return form

    def expected_hash(self, task: Task) -> str:
        """The state hash after the task's ground truth; a step that fails raises DomainError
        unless the domain's `failing_gold_steps` is "ignore"."""
        key = (task.id, msgspec.msgpack.encode(task.actions))
        memo = self._memo()
        if key not in memo.expected:
            db = self.open_database()
            try:
                for index, action in enumerate(task.actions):
                    outcome = self.call(db, action)
                    if outcome.error and self.failing_gold_steps == "fail":
                        raise DomainError(
                            f"task {task.id!r}: ground-truth step {index} ({action.name}) fails: {outcome.error}"
                        )
                memo.expected[key] = self.state_hash(db)
            finally:
                db.close()
        return memo.expected[key]

    def score(self, task: Task, db: sqlite3.Connection, told: list[str]) -> Score:
        """Reward 1.0 iff the final state is the expected one and `output_told` finds every output.

        `told` is every message the agent sent the user, in order.
        """
        db_match = self.state_hash(db) == self.expected_hash(task)
        text = "\n".join(told)
        missing = [output for output in task.outputs if not self.output_told(output, text)]
        return Score(reward=1.0 if db_match and not missing else 0.0, db_match=db_match, missing_outputs=missing)

    def mistake(self, task: Task, step: int, category: str, rng: Random) -> Action | None:
        """A wrong action in `category` at ground-truth step `step`, or None if there is no decisive one.

        Decisive means: the tool accepts it, and carrying on with the ground
        truth afterwards still ends in a state other than the expected one.
        Step `len(task.actions)` is the final answer, where a policy violation
        is one of the task's `forbidden` writes.
        """
        options = self._decisive_mistakes(task, step, category)
        return rng.choice(options) if options else None

    def _decisive_mistakes(self, task: Task, step: int, category: str) -> list[Action]:
        key = (task.id, msgspec.msgpack.encode(task.actions), step, category)
        memo = self._memo()
        if key in memo.mistakes:
            return memo.mistakes[key]
        candidates: list[Action] = []
        if category != EARLY_STOP and 0 <= step <= len(task.actions):
            if step == len(task.actions) and category == POLICY_VIOLATION:
                candidates.extend(task.forbidden)
            candidates.extend(self.mistake_candidates(task, step, category))
        intended = task.actions[step] if step < len(task.actions) else None
        unique = [c for i, c in enumerate(candidates) if c != intended and c not in candidates[:i]]
        decisive = [c for c in unique if self.is_decisive(task, step, c)] if unique else []
        memo.mistakes[key] = decisive
        return decisive

    def is_decisive(self, task: Task, step: int, candidate: Action) -> bool:
        """Whether the tools accept `candidate` in place of ground-truth step `step` and the task, carried
        on with the ground truth, then ends in a state other than the expected one."""
        db = self.open_database()
        try:
            for action in task.actions[:step]:
                self.call(db, action)
            if self.call(db, candidate).error:
                return False
            for action in task.actions[step + 1 :]:
                self.call(db, action)
            return self.state_hash(db) != self.expected_hash(task)
        finally:
            db.close()

    def _template(self) -> sqlite3.Connection:
        key = (type(self), self.data_key)
        with _templates_lock:
            template = _templates.get(key)
            if template is None:
                template = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                template.execute("BEGIN")
                try:
                    self.seed_database(template)
                except Exception as exc:
                    template.close()
                    raise DomainError(f"domain {self.name!r}: seeding the database failed: {exc}") from exc
                template_id = f"{type(self).__module__}.{type(self).__qualname__}:{self.data_key!r}"
                track_changes(template, template_id, self._row_form())
                template.execute("COMMIT")
                _templates[key] = template
        return template

    def _key_index(self) -> KeyIndex:
        memo = self._memo()
        if memo.keys is None:
            template = self._template()
            with _templates_lock:
                memo.keys = key_index(template)
        return memo.keys

    def _toolbox(self) -> dict[str, tuple[ToolSpec, ToolFunction]]:
        memo = self._memo()
        if memo.tools is None:
            tools = {name: (spec, getattr(self, attribute)) for name, (spec, attribute) in self._tool_methods.items()}
            for spec, function in self.registered_tools():
                problem = "a tool of that name exists" if spec.name in tools else schema_problem(spec.parameters)
                if problem:
                    raise DomainError(f"domain {self.name!r}: tool {spec.name}: {problem}")
                tools[spec.name] = (spec, function)
            memo.tools = tools
        return memo.tools

    def _memo(self) -> _Memo:
        memo: _Memo | None = vars(self).get("_faultline_memo")
        if memo is None:
            memo = vars(self).setdefault("_faultline_memo", _Memo())
        return memo


def _record_keys(db: sqlite3.Connection) -> frozenset[str | int]:
    """Every text or whole-number value of a one-column primary key, bookkeeping tables left out."""
    keys: set[str | int] = set()
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if table.startswith(("_fl_", "sqlite_")):
            continue
        primary = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")') if row[5]]
        if len(primary) == 1:
            keys.update(v for (v,) in db.execute(f'SELECT "{primary[0]}" FROM "{table}"') if isinstance(v, str | int))
    return frozenset(keys)


def _end_call(db: sqlite3.Connection, *, keep: bool) -> None:
    """Close the call's savepoint, keeping or undoing its writes."""
    try:
        if not keep:
            db.execute("ROLLBACK TO tool_call")
        db.execute("RELEASE tool_call")
    except sqlite3.Error:
        pass
