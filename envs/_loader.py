"""Finding a domain by name: a built-in, or any `package.module:ClassName` on the path."""

from __future__ import annotations

import importlib
import threading

from faultline._errors import DomainError
from faultline.envs._domain import Domain

BUILTIN_DOMAINS: dict[str, str] = {
    "retail": "faultline.envs.retail:Retail",
    "phone": "faultline.envs.phone:Phone",
}
"""Short names of the domains that ship with Faultline, and where they live."""

_loaded: dict[str, Domain] = {}
_lock = threading.Lock()


def load_domain(spec: str) -> Domain:
    """The domain named by `spec`: a built-in name or `package.module:ClassName`.

    The class is instantiated without arguments; an attribute that is already a
    `Domain` instance is used as is. Domains are stateless, so one shared
    instance per spec is returned for the life of the process.
    """
    with _lock:
        domain = _loaded.get(spec)
        if domain is None:
            domain = _loaded[spec] = _load(spec)
    return domain


def _load(spec: str) -> Domain:
    path = BUILTIN_DOMAINS.get(spec, spec)
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        names = ", ".join(BUILTIN_DOMAINS)
        raise DomainError(f"unknown domain {spec!r}: use a built-in ({names}) or 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DomainError(f"cannot import domain module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise DomainError(f"importing domain module {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    target = getattr(module, attribute, None)
    if target is None:
        raise DomainError(f"domain module {module_name!r} has no attribute {attribute!r}")
    if isinstance(target, Domain):
        return target
    if not (isinstance(target, type) and issubclass(target, Domain)):
        raise DomainError(f"{path} is a {type(target).__name__}, not a Domain subclass")
    try:
        return target()
    except TypeError as exc:
        raise DomainError(f"cannot instantiate domain {path}: {exc}") from None
