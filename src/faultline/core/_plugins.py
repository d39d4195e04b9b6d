"""Plugins: agent classes, domains, model backends and systems, found by entry point or by `package.module:attr`.

An installed package registers a plugin under the entry-point group of its kind
(`[project.entry-points."faultline.domains"] airline = "mybench.domains:Airline"`), and
Faultline registers its own the same way, so no name is special. Anything importable can
also be named directly as `package.module:attr` (the plugin path, `--plugin-path`, puts
folders on the import path). Whatever goes wrong, the answer is one `PluginError` line:
which kind, which name, which module, why.
"""

from __future__ import annotations

import functools
import importlib
from typing import Literal

from faultline._errors import PluginError

PluginKind = Literal["agent", "domain", "model", "system"]

ENTRY_POINT_GROUPS: dict[PluginKind, str] = {
    "agent": "faultline.agents",
    "domain": "faultline.domains",
    "model": "faultline.models",
    "system": "faultline.systems",
}
"""The entry-point group each kind of plugin is registered under."""


def registered(kind: PluginKind) -> dict[str, str]:
    """Registered names of `kind` and their `module:attr` targets, from every installed package."""
    return dict(_registered(ENTRY_POINT_GROUPS[kind]))


def is_plugin_name(kind: PluginKind, name: str) -> bool:
    """Whether `name` can name a plugin of `kind`: registered, or written `package.module:attr`."""
    return name in _registered(ENTRY_POINT_GROUPS[kind]) or is_import_path(name)


def is_import_path(text: str) -> bool:
    """Whether `text` is written `package.module:attr` (dotted names of identifiers on both sides)."""
    return _split(text) is not None


def load_plugin(kind: PluginKind, name: str) -> object:
    """The object a registered name or a `package.module:attr` path stands for, imported now."""
    target = _registered(ENTRY_POINT_GROUPS[kind]).get(name, name)
    parts = _split(target)
    if parts is None:
        raise plugin_error(
            kind, name, f"not a registered name ({_known(kind)}) nor a package.module:Name path{_meant(name)}"
        )
    module_name, attribute = parts
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise plugin_error(
                kind, name, f"no module named {exc.name!r} (is it installed, or in a --plugin-path folder?)"
            ) from None
        raise plugin_error(kind, name, f"importing {module_name!r} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a plugin raises on import, the answer is one line
        raise plugin_error(kind, name, f"importing {module_name!r} raised {type(exc).__name__}: {exc}") from None
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise plugin_error(kind, name, f"module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    return found


def plugin_error(kind: PluginKind, name: str, why: str) -> PluginError:
    """The one wording of a plugin that does not load, for the loader and the checks its callers make."""
    return PluginError(f"cannot load {kind} {name!r}: {why}")


@functools.cache
def _registered(group: str) -> dict[str, str]:
    import importlib.metadata  # here: a command that loads no plugin (`journal episodes`) does without it

    return {point.name: point.value for point in importlib.metadata.entry_points(group=group)}


def _split(target: str) -> tuple[str, str] | None:
    module_name, colon, attribute = target.partition(":")
    if not colon or not all(part.isidentifier() for part in (*module_name.split("."), *attribute.split("."))):
        return None
    return module_name, attribute


def _meant(name: str) -> str:
    """The path `name` may have meant, written with a dot before its class (`desk.HelpDesk`), else ""."""
    module_name, dot, attribute = name.rpartition(".")
    return f"; did you mean '{module_name}:{attribute}'?" if dot and _split(f"{module_name}:{attribute}") else ""


def _known(kind: PluginKind) -> str:
    names = sorted(_registered(ENTRY_POINT_GROUPS[kind]))
    return f"registered: {', '.join(names)}" if names else "none is registered"
