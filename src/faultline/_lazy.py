"""Re-exports a package imports only when a name is first used (PEP 562), so that importing the
package for one name does not load the others' dependencies: `faultline replay` reaches
`faultline.api` and `faultline.runtime` for a few functions and must not load NATS through them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], origins: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` serving each name of `origins` (module: names) from its
    module, imported on first use and then kept in the package's `namespace` like an eager import."""
    home = {name: module for module, names in origins.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        __import__(module)  # not importlib.import_module, which `python -X importtime` does not report
        value = getattr(sys.modules[module], name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__
