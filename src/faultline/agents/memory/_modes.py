"""How many entries a retrieval asks for: a fixed top-k, or MemToolAgent's dynamic n (Algorithm 1).

The modes travel in retrieval requests; the service computes the cut (`faultline.services.memory.choose_n`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from faultline._errors import ConfigError

DEFAULT_TOP_K = 5
DEFAULT_RADIUS = 10
DEFAULT_PROMINENCE = 1e-5
DEFAULT_CANDIDATES = 200


class TopK(msgspec.Struct, frozen=True, kw_only=True, tag="top_k"):
    """Always the `k` most similar entries."""

    k: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_TOP_K

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ConfigError(f"TopK.k must be >= 0, got {self.k}")


class Dynamic(msgspec.Struct, frozen=True, kw_only=True, tag="dynamic"):
    """Dynamic n: cut the ranked list where similarity drops (see `choose_n`).

    `peak` counts from 1: 1 takes the first drop (the paper's choice for
    general tool use), 2 the second (its choice for preference tasks).
    `fallback_k` is the top-k used when no such peak exists. Only the
    `candidates` most similar entries form the curve (the paper ranks the whole
    memory; past a few hundred entries the tail only adds noise and time).

    y is defined from position R on, so a drop within the first R+1 entries
    cannot be a peak: with the paper's R = 10, a peak gives n >= 12, and a
    memory whose relevant entries are fewer gets the fallback. Use a smaller
    radius for small memories.
    """

    radius: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_RADIUS
    prominence: Annotated[float, msgspec.Meta(ge=0.0)] = DEFAULT_PROMINENCE
    peak: Annotated[int, msgspec.Meta(ge=1)] = 1
    fallback_k: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_TOP_K
    candidates: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_CANDIDATES

    def __post_init__(self) -> None:
        for name, low in (("radius", 1), ("peak", 1), ("fallback_k", 0), ("candidates", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"Dynamic.{name} must be >= {low}, got {getattr(self, name)}")
        if self.prominence < 0:
            raise ConfigError(f"Dynamic.prominence must be >= 0, got {self.prominence}")


RetrievalMode = TopK | Dynamic

CutReason = Literal["top_k", "peak", "no_peak", "too_few_candidates"]
