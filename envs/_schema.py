"""The small part of JSON Schema that tool arguments use, built and checked here.

Models send arguments of any shape; the check names the first problem the way
msgspec does (`expected integer, got str - at $.quantity`), so an agent can
correct its call.
"""

from __future__ import annotations

from typing import Any

_SCALARS: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
}


def arguments_schema(optional: tuple[str, ...] = (), /, **fields: tuple[str, str]) -> dict[str, Any]:
    """A closed object schema from `name=(type, description)` pairs.

    A type is a JSON type name, or `<type>[]` for a non-empty array of it.
    Every field is required unless named in `optional`.
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


def check_arguments(schema: dict[str, Any], arguments: Any) -> str:
    """The first way `arguments` breaks `schema`, or "" when they fit."""
    return _check(schema or {"type": "object"}, arguments, "$")


def _check(schema: dict[str, Any], value: Any, path: str) -> str:
    kind = schema.get("type")
    if kind == "array":
        if not isinstance(value, list):
            return f"expected array, got {type(value).__name__} - at {path}"
        if len(value) < schema.get("minItems", 0):
            return f"expected at least {schema['minItems']} item(s) - at {path}"
        for index, item in enumerate(value):
            problem = _check(schema.get("items", {}), item, f"{path}[{index}]")
            if problem:
                return problem
        return ""
    if kind in _SCALARS:
        # bool is an int in Python, but not in JSON.
        wrong_bool = isinstance(value, bool) and kind in ("integer", "number")
        if wrong_bool or not isinstance(value, _SCALARS[kind]):
            return f"expected {kind}, got {type(value).__name__} - at {path}"
    if "enum" in schema and value not in schema["enum"]:
        return f"expected one of {schema['enum']}, got {value!r} - at {path}"
    if kind == "object":
        return _check_object(schema, value, path)
    return ""


def _check_object(schema: dict[str, Any], value: dict[str, Any], path: str) -> str:
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            return f"missing required argument '{name}' - at {path}"
    for name, item in value.items():
        if name not in properties:
            if schema.get("additionalProperties", True) is False:
                return f"unexpected argument '{name}' - at {path}"
            continue
        problem = _check(properties[name], item, f"{path}.{name}")
        if problem:
            return problem
    return ""
