"""Plausible wrong actions for any domain, derived from its gold actions, its tool schemas and its data.

They feed the offline simulator, which is a simulation for exercising the
runtime: `Domain.mistake` keeps only the decisive ones, and the mistake a
reply made is a label of that simulation, never an input to a result.

- wrong entity: a string argument that is a key in the data (a primary key,
  or a document's key) replaced by a neighbouring key of the same table;
- wrong value: an argument with an enum replaced by another member, and a
  whole number by the next one;
- policy violation: at a step that only reads, the task's next write made
  at once, before the lookups a policy asks for (the ground truth then makes
  it again, which is decisive unless the write is idempotent).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from faultline.envs._types import POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Task, ToolSpec

NEIGHBOURS = 3
"""How many other keys of the same table a wrong entity is drawn from."""

Path = tuple[str | int, ...]
KeyIndex = dict[str, list[str]]
"""Each key value in the data, and the sorted keys of its table's key column."""


def key_index(db: sqlite3.Connection) -> KeyIndex:
    """Every text value of a primary-key column, with all values of that column in order."""
    index: KeyIndex = {}
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if table.startswith(("_fl_", "sqlite_")):
            continue
        keys = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")') if row[5]]
        if len(keys) != 1:
            continue
        values = sorted(v for (v,) in db.execute(f'SELECT "{keys[0]}" FROM "{table}"') if isinstance(v, str))
        for value in values:
            index.setdefault(value, values)
    return index


def derived_candidates(
    task: Task, step: int, category: str, tools: dict[str, ToolSpec], keys: KeyIndex
) -> list[Action]:
    """Wrong actions in `category` for ground-truth step `step` of `task`, in a fixed order."""
    if not 0 <= step < len(task.actions) or task.actions[step].name not in tools:
        return []
    action = task.actions[step]
    if category == POLICY_VIOLATION:
        if tools[action.name].writes:
            return []
        later = [a for a in task.actions[step + 1 :] if a.name in tools and tools[a.name].writes]
        return later[:1]
    schema = tools[action.name].parameters
    candidates: list[Action] = []
    for path, value in _leaves(action.arguments, ()):
        for other in _others(value, _schema_at(schema, path), category, keys):
            candidates.append(Action(name=action.name, arguments=_replaced(action.arguments, path, other)))
    return candidates


def _others(value: Any, schema: dict[str, Any], category: str, keys: KeyIndex) -> list[Any]:
    if category == WRONG_ENTITY and isinstance(value, str) and value in keys:
        column = keys[value]
        at = column.index(value)
        return [column[(at + i) % len(column)] for i in range(1, min(NEIGHBOURS, len(column) - 1) + 1)]
    if category == WRONG_VALUE and "enum" in schema:
        return [member for member in schema["enum"] if member != value][:1]
    if category == WRONG_VALUE and isinstance(value, int) and not isinstance(value, bool):
        return [value + 1]
    return []


def _leaves(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(item, (*path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _schema_at(schema: dict[str, Any], path: Path) -> dict[str, Any]:
    for step in path:
        if isinstance(step, int):
            schema = schema.get("items", {})
        else:
            schema = schema.get("properties", {}).get(step, {})
    return schema


def _replaced(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {k: _replaced(v, tuple(rest), new) if k == head else v for k, v in value.items()}
    return [_replaced(v, tuple(rest), new) if i == head else v for i, v in enumerate(value)]
