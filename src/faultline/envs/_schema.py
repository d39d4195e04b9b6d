"""The JSON Schema of tool arguments: built from short field lists, or given whole, and checked here.

Models send arguments of any shape; the check names the first problem the way
msgspec does (`expected integer, got str - at $.quantity`), so an agent can
correct its call. A tool's schema is the one the model is shown and the one
its arguments are checked against, so `schema_problem` refuses, when a tool is
defined, any keyword this checker would silently skip.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}

CHECKED_KEYWORDS = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
        "maxItems", "uniqueItems", "minimum", "maximum", "minLength", "maxLength", "pattern", "anyOf", "oneOf",
    }
)  # fmt: skip
"""Keywords whose meaning the check enforces."""
ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$comment", "format"})
"""Keywords that only inform the model; `format` too, as in JSON Schema by default."""


def arguments_schema(optional: tuple[str, ...] = (), /, **fields: tuple[str, str]) -> dict[str, Any]:
    """A closed object schema from `name=(type, description)` pairs.

    A type is a JSON type name, or `<type>[]` for a non-empty array of it.
    Every field is required unless named in `optional`. For anything else
    (enums, nested objects, optional or empty arrays) give the schema whole.
    """
    properties: dict[str, Any] = {}
    for name, (kind, description) in fields.items():
        if kind.endswith("[]"):
            item = kind[:-2]
            properties[name] = {
                "type": "array",
                "items": {"type": item},
                "minItems": 1,
                "description": description,
            }
        else:
            properties[name] = {"type": kind, "description": description}
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in fields if name not in optional],
        "additionalProperties": False,
    }


def schema_problem(schema: Any, path: str = "$") -> str:
    """The first part of `schema` that `check_arguments` would not enforce, or "" when it checks it all."""
    if not isinstance(schema, dict):
        return f"a schema must be an object - at {path}"
    for keyword, value in schema.items():
        if keyword in ANNOTATIONS:
            continue
        if keyword not in CHECKED_KEYWORDS:
            return f"keyword {keyword!r} is not checked; use {', '.join(sorted(CHECKED_KEYWORDS))} - at {path}"
        if keyword == "type":
            kinds = value if isinstance(value, list) else [value]
            unknown = [k for k in kinds if k not in _TYPES]
            if unknown:
                return f"unknown type {unknown[0]!r} - at {path}"
        elif keyword == "properties":
            for name, item in value.items():
                if problem := schema_problem(item, f"{path}.{name}"):
                    return problem
        elif keyword in ("items", "additionalProperties") and isinstance(value, dict):
            if problem := schema_problem(value, f"{path}.{keyword}"):
                return problem
        elif keyword in ("anyOf", "oneOf"):
            for index, item in enumerate(value):
                if problem := schema_problem(item, f"{path}.{keyword}[{index}]"):
                    return problem
    return ""


def check_arguments(schema: dict[str, Any], arguments: Any) -> str:
    """The first way `arguments` breaks `schema`, or "" when they fit."""
    return _check(schema or {"type": "object"}, arguments, "$")


def _check(schema: dict[str, Any], value: Any, path: str) -> str:
    kind = schema.get("type")
    if kind is not None and not (_is(kind, value) if isinstance(kind, str) else any(_is(k, value) for k in kind)):
        expected = kind if isinstance(kind, str) else " or ".join(kind)
        return f"expected {expected}, got {_json_type(value)} - at {path}"
    if "enum" in schema and value not in schema["enum"]:
        return f"expected one of {schema['enum']}, got {value!r} - at {path}"
    if "const" in schema and value != schema["const"]:
        return f"expected {schema['const']!r}, got {value!r} - at {path}"
    if "anyOf" in schema or "oneOf" in schema:
        problem = _check_options(schema, value, path)
        if problem:
            return problem
    if isinstance(value, dict):
        return _check_object(schema, value, path)
    if isinstance(value, list):
        return _check_array(schema, value, path)
    if isinstance(value, str):
        return _check_string(schema, value, path)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"expected at least {schema['minimum']}, got {value} - at {path}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"expected at most {schema['maximum']}, got {value} - at {path}"
    return ""


def _check_options(schema: dict[str, Any], value: Any, path: str) -> str:
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            fits = sum(not _check(option, value, path) for option in schema[keyword])
            if fits == 0 or (keyword == "oneOf" and fits > 1):
                return f"fits {fits} of the {len(schema[keyword])} allowed shapes - at {path}"
    return ""


def _check_object(schema: dict[str, Any], value: dict[str, Any], path: str) -> str:
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            return f"missing required argument '{name}' - at {path}"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = _check(properties[name], item, f"{path}.{name}")
        elif extra is False:
            problem = f"unexpected argument '{name}' - at {path}"
        else:
            problem = _check(extra, item, f"{path}.{name}") if isinstance(extra, dict) else ""
        if problem:
            return problem
    return ""


def _check_array(schema: dict[str, Any], value: list[Any], path: str) -> str:
    if len(value) < schema.get("minItems", 0):
        return f"expected at least {schema['minItems']} item(s) - at {path}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"expected at most {schema['maxItems']} item(s) - at {path}"
    if schema.get("uniqueItems") and len({repr(item) for item in value}) < len(value):
        return f"expected unique items - at {path}"
    for index, item in enumerate(value):
        problem = _check(schema.get("items", {}), item, f"{path}[{index}]")
        if problem:
            return problem
    return ""


def _check_string(schema: dict[str, Any], value: str, path: str) -> str:
    if len(value) < schema.get("minLength", 0):
        return f"expected at least {schema['minLength']} character(s) - at {path}"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"expected at most {schema['maxLength']} character(s) - at {path}"
    if "pattern" in schema and not re.search(schema["pattern"], value):
        return f"expected text matching {schema['pattern']!r}, got {value!r} - at {path}"
    return ""


def _is(kind: str, value: Any) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # bool is an int in Python, but not in JSON
    return isinstance(value, _TYPES[kind])


def _json_type(value: Any) -> str:
    return type(value).__name__
