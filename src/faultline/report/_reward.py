"""The structured-reflection reward of one turn against a reference (Tool-Reflection-Bench, section 3.2).

Both turns are split into reflection r, calls c and final answer f (`faultline.core.parse_turn`):

    s_ref = sim(r^, r)    s_call = 1[c^ = c]    s_final = sim(f^, f)
    S = sum_k w_k m_k s_k / sum_k w_k m_k                      (m_k: part k is in the reference)
    P = P_miss + l_extra P_extra + l_cnt P_cnt
    F = clip(1 - l_scale * P * rho, 0, 1)                     (rho: reduction when c^ and c are equal)
    R = S * F, or beta * sim(lin(y^), lin(y)) when S * F < eps, clipped to [0, 1]

`c^ = c` holds when the calls pair one to one with the same name and the same arguments.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, Literal

import msgspec

from faultline._errors import ConfigError
from faultline.core import Turn

Similarity = Callable[[str, str], float]
"""A similarity of two texts in [0, 1]."""

Weight = Annotated[float, msgspec.Meta(ge=0.0)]


class PartWeights(msgspec.Struct, frozen=True, kw_only=True):
    """One weight per part; only their ratios matter, as they are normalised to sum to 1."""

    reflection: Weight
    call: Weight
    final: Weight

    def __post_init__(self) -> None:
        if self.reflection + self.call + self.final <= 0.0:
            raise ConfigError("part weights must not all be 0")

    def normalised(self) -> tuple[float, float, float]:
        total = self.reflection + self.call + self.final
        return self.reflection / total, self.call / total, self.final / total


PAPER_WEIGHTS: Final = PartWeights(reflection=0.1, call=0.7, final=0.2)


class RewardSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The reward's parameters; the defaults are the paper's (its authors' released values).

    `weights` are w in S; `part_weights` are alpha, what a missing or extra part costs in P;
    `extra_part`, `count_mismatch` and `penalty_scale` are l_extra, l_cnt and l_scale;
    `exact_calls_reduction` is rho when the calls match exactly (else 1); the backoff
    `backoff_weight` * sim replaces a core reward below `backoff_below`.
    """

    weights: PartWeights = PAPER_WEIGHTS
    part_weights: PartWeights = PAPER_WEIGHTS
    extra_part: Weight = 0.8
    count_mismatch: Weight = 0.6
    penalty_scale: Weight = 0.8
    exact_calls_reduction: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.3
    backoff_weight: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.15
    backoff_below: Weight = 1e-6


class TurnReward(msgspec.Struct, frozen=True, kw_only=True):
    """A turn's reward and its parts. A part score is None where the reference lacks the part
    (its mask is 0); `structure` is S, `format` F, `core` S*F; `backoff` says the total is the
    similarity backoff rather than the core reward."""

    reflection: float | None
    call: float | None
    final: float | None
    structure: float
    format: float
    core: float
    total: float
    backoff: bool


UNIGRAM_WEIGHT: Final = 0.6
BIGRAM_WEIGHT: Final = 0.3
LENGTH_WEIGHT: Final = 0.1


def text_similarity(a: str, b: str) -> float:
    """A lexical stand-in for the paper's unspecified semantic similarity, needing no model:
    0.6 * Jaccard(words) + 0.3 * Jaccard(word pairs) + 0.1 * shorter/longer length, over
    lower-cased text with runs of white space as one. The paper's authors fall back on this
    mix when no embedding model is given. A text of one word is its own word pair; an empty
    text is like nothing (0)."""
    x, y = " ".join(a.lower().split()), " ".join(b.lower().split())
    if not x or not y:
        return 0.0
    if x == y:
        return 1.0
    words_x, words_y = x.split(), y.split()
    score = (
        UNIGRAM_WEIGHT * _jaccard(_grams(words_x, 1), _grams(words_y, 1))
        + BIGRAM_WEIGHT * _jaccard(_grams(words_x, 2), _grams(words_y, 2))
        + LENGTH_WEIGHT * min(len(x), len(y)) / max(len(x), len(y))
    )
    return min(1.0, max(0.0, score))


def _grams(words: list[str], n: int) -> set[str]:
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def _jaccard(x: set[str], y: set[str]) -> float:
    return len(x & y) / len(x | y)


def _linearize(turn: Turn) -> str:
    """The turn as one text for the backoff: its present parts in order, the calls as sorted-key JSON."""
    calls = json.dumps(turn.calls, sort_keys=True) if turn.calls else ""
    return " ".join(part for part in (turn.reflection, calls, turn.final) if part)


def _same_calls(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> bool:
    """The paper's exact match: a one-to-one pairing with equal names and equal arguments.

    Arguments compare as JSON with their types (1 is not 1.0 nor "1"), which is schema-strict
    already, so the paper's second, strict equality (the one rho asks for) is this one too."""
    return Counter(map(_call_key, a)) == Counter(map(_call_key, b))


def _call_key(call: dict[str, Any]) -> str:
    return json.dumps({"name": call.get("name"), "arguments": call.get("arguments", {})}, sort_keys=True)


def turn_reward(
    completion: Turn,
    reference: Turn,
    settings: RewardSettings | None = None,
    similarity: Similarity = text_similarity,
) -> TurnReward:
    """Score `completion` against `reference` with the paper's decomposition.

    Where the paper is silent: a part is present when its text is not blank, or for calls
    when at least one call could be read, so an unreadable `<call>` counts as missing; a
    part absent from the completion scores 0 without asking `similarity`; a reference with
    no part at all asks for nothing, so S is 1 and only the format factor (extra parts) is
    left; the count mismatch is |n^ - n| / max(n^, n), counted only when both turns call.
    """
    s = settings or RewardSettings()
    mine = (bool(completion.reflection), bool(completion.calls), bool(completion.final))
    wanted = (bool(reference.reflection), bool(reference.calls), bool(reference.final))
    exact = _same_calls(completion.calls, reference.calls)

    def text_score(got: str, want: str) -> float | None:
        if not want:
            return None
        return similarity(got, want) if got else 0.0

    scores = (
        text_score(completion.reflection, reference.reflection),
        (1.0 if exact else 0.0) if reference.calls else None,
        text_score(completion.final, reference.final),
    )
    weights = s.weights.normalised()
    active = sum(w for w, present in zip(weights, wanted, strict=True) if present)
    structure = (
        sum(w * score for w, score in zip(weights, scores, strict=True) if score is not None) / active
        if active > 0.0
        else 1.0
    )
    alpha = s.part_weights.normalised()
    missing = sum(a for a, want, got in zip(alpha, wanted, mine, strict=True) if want and not got)
    extra = sum(a for a, want, got in zip(alpha, wanted, mine, strict=True) if got and not want)
    n_got, n_want = len(completion.calls), len(reference.calls)
    count = alpha[1] * abs(n_got - n_want) / max(n_got, n_want) if n_got and n_want else 0.0
    penalty = missing + s.extra_part * extra + s.count_mismatch * count
    reduction = s.exact_calls_reduction if n_want and exact else 1.0
    format_factor = _clip(1.0 - s.penalty_scale * penalty * reduction)
    core = structure * format_factor
    backoff = core < s.backoff_below
    total = core
    if backoff:
        got_text = _linearize(completion)
        total = s.backoff_weight * similarity(got_text, _linearize(reference)) if got_text else 0.0
    return TurnReward(
        reflection=scores[0],
        call=scores[1],
        final=scores[2],
        structure=structure,
        format=format_factor,
        core=core,
        total=_clip(total),
        backoff=backoff,
    )


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


Component = Literal["reflection", "call", "final", "structure", "format", "total"]
COMPONENTS: Final[tuple[Component, ...]] = ("reflection", "call", "final", "structure", "format", "total")


class ComponentStats(msgspec.Struct, frozen=True, kw_only=True):
    """One component over many turns: how many turns score it (`n`) and its spread; None when n is 0."""

    component: Component
    n: int
    mean: float | None
    min: float | None
    median: float | None
    max: float | None


def reward_stats(rewards: Sequence[TurnReward]) -> list[ComponentStats]:
    """Mean, min, median and max of each component over the turns whose reference has it."""
    out = []
    for name in COMPONENTS:
        values: list[float] = [v for r in rewards if (v := getattr(r, name)) is not None]
        if not values:
            out.append(ComponentStats(component=name, n=0, mean=None, min=None, median=None, max=None))
            continue
        out.append(
            ComponentStats(
                component=name,
                n=len(values),
                mean=statistics.fmean(values),
                min=min(values),
                median=statistics.median(values),
                max=max(values),
            )
        )
    return out
