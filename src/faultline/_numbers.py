"""Reading the numbers a user writes: every numeric flag of the CLI and every numeric fault parameter given as text
(`run --fault storm:copies=3`) reads them here, so that each mistake reads the same wherever it is made."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

LARGEST = 2**62
"""The largest whole number a user's value takes unless it says otherwise: far inside what SQLite stores."""


def whole_number(text: str, minimum: int = -LARGEST, maximum: int = LARGEST) -> int:
    """`text` as an integer from `minimum` to `maximum`; else ValueError saying what was expected and what came."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    return _within(value, minimum, maximum)


def number(text: str, minimum: float = -math.inf, maximum: float = math.inf) -> float:
    """`text` as a finite number from `minimum` to `maximum`, as `whole_number` is for integers."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {text!r}")
    return _within(value, minimum, maximum)


def reader(annotation: Any) -> Callable[[str], Any] | None:
    """How a value of a struct field's `annotation` is read from text, when the field is a number: within the bounds
    (`ge`, `le`) of its `msgspec.Meta`. None for any other type."""
    hint, *metas = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Annotated else (annotation,)
    meta = next((m for m in metas if isinstance(m, msgspec.Meta)), msgspec.Meta())
    if hint is int:
        low, high = -LARGEST if meta.ge is None else int(meta.ge), LARGEST if meta.le is None else int(meta.le)
        return lambda text: whole_number(text, low, high)
    if hint is float:
        lowest, highest = -math.inf if meta.ge is None else meta.ge, math.inf if meta.le is None else meta.le
        return lambda text: number(text, lowest, highest)
    return None


N = TypeVar("N", int, float)


def _within(value: N, minimum: float, maximum: float) -> N:
    if value < minimum:
        raise ValueError(f"must be at least {_shown(minimum)}, got {_shown(value)}")
    if value > maximum:
        raise ValueError(f"must be at most {_shown(maximum)}, got {_shown(value)}")
    return value


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"
