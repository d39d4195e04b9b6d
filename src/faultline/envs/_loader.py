"""Finding a domain by name: a registered one (`retail`), or any `package.module:ClassName` on the path, with parameters.

A spec may end in `?key=value&...`, the domain's parameters (`mybench.domains:Airline?split=test`):
they are passed to the class as keyword arguments, as strings, so one class serves every split.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import parse_qsl

from faultline._errors import DomainError
from faultline.core import load_plugin, plugin_error
from faultline.envs._domain import Domain

_loaded: dict[str, Domain] = {}
_lock = threading.Lock()


def load_domain(spec: str) -> Domain:
    """The domain named by `spec`: a registered name or `package.module:ClassName`, each with `?parameters`.

    The class is instantiated with the parameters as keyword arguments (none
    by default); an attribute that is already a `Domain` instance is used as
    is and takes no parameters. Domains are stateless, so one shared instance
    per spec is returned for the life of the process.
    """
    with _lock:
        domain = _loaded.get(spec)
        if domain is None:
            domain = _loaded[spec] = _load(spec)
    return domain


def known_domain(spec: str, loaded: dict[str, Domain | None]) -> Domain | None:
    """The domain `spec` names, loaded once into `loaded` (a reader's own cache); None where none answers to it, as
    for a journal from a domain this installation lacks."""
    if spec not in loaded:
        try:
            loaded[spec] = load_domain(spec)
        except DomainError:
            loaded[spec] = None
    return loaded[spec]


def use_plugin_path(folders: Iterable[str | Path]) -> None:
    """Put `folders` in front of the import path, so that domains (and classes) in them import by name."""
    added = False
    for folder in reversed([str(Path(f).resolve()) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
            added = True
    if added:
        importlib.invalidate_caches()


def _load(spec: str) -> Domain:
    name, _, query = spec.partition("?")
    try:
        parameters = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise plugin_error("domain", spec, "parameters must look like ?key=value&key2=value2") from None
    target = load_plugin("domain", name)
    if isinstance(target, Domain):
        if parameters:
            raise plugin_error("domain", spec, "it is an instance and takes no parameters")
        return target
    if not (isinstance(target, type) and issubclass(target, Domain)):
        raise plugin_error("domain", name, f"it is a {type(target).__name__}, not a Domain subclass")
    try:
        return target(**parameters)
    except (TypeError, ValueError) as exc:
        raise plugin_error("domain", spec, f"the class refused its parameters: {exc}") from None
