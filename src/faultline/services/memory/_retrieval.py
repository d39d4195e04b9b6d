"""Where to cut a ranking: a fixed top-k, or MemToolAgent's dynamic n (Algorithm 1)."""

from __future__ import annotations

import msgspec
import numpy as np

from faultline.agents.memory import CutReason, RetrievalMode, ScoredEntry, TopK

# y is rounded to this many decimals before peak finding, so that float rounding
# cannot split the flat top a clean step produces into two unequal samples.
DERIVATIVE_DECIMALS = 12


class Cut(msgspec.Struct, frozen=True, kw_only=True):
    """How many ranked entries to keep and why.

    `peaks` lists the positions (0-based, in the descending similarity list)
    where the derivative estimate peaked, whichever was chosen.
    """

    n: int
    reason: CutReason
    peaks: list[int] = []


class Retrieval(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to one retrieval, ready to send over the wire.

    `entries` are the first `n` of the ranking, most similar first; `reason`
    says whether n came from top-k, a peak, or a fallback to top-k, and
    `candidates` how many similarities the decision looked at.
    """

    query: str
    mode: RetrievalMode
    entries: list[ScoredEntry]
    n: int
    reason: CutReason
    peaks: list[int] = []
    candidates: int = 0


def derivative_estimate(x: np.ndarray, radius: int) -> np.ndarray:
    """y(j) = -Σ_{τ=-R..R} τ·x(j+τ) / Σ_{τ=-R..R} τ², for j = R .. len(x)-R-1.

    Element i of the result is y(R + i). On a descending curve y is the local
    rate of decrease, a least-squares slope over 2R+1 points.
    """
    taus = np.arange(-radius, radius + 1, dtype=np.float64)
    if len(x) < len(taus):
        return np.zeros(0, dtype=np.float64)
    return -np.correlate(np.asarray(x, dtype=np.float64), taus, mode="valid") / float(np.dot(taus, taus))


def choose_n(similarities: np.ndarray, mode: RetrievalMode) -> Cut:
    """Decide how many of the ranked entries to keep.

    Dynamic n follows Algorithm 1 of MemToolAgent: sort similarities
    descending (x), estimate the derivative y (see `derivative_estimate`),
    find peaks of y with `scipy.signal.find_peaks(y, prominence=p)` and take n
    at the chosen peak. Fewer than 2R+1 similarities, or fewer peaks than
    `mode.peak`, fall back to top-`fallback_k`.

    Index convention, as read from the paper: x is indexed from 0 (the loop
    j = R .. |x|-R-1 keeps every x(j+τ) inside x only then) and y shares x's
    index j (the paper writes y(j), and its Figure 4 draws x and y on one axis),
    so a peak at offset p of the computed y lies at j = p + R. The paper then
    sets n to the peak position j. A centred estimate cannot say on which side
    of a drop it peaks: on a clean step it lands on the last entry before the
    drop (`find_peaks` reports a two-sample flat top at its left sample), and
    n = j would leave that entry out. So n is the peak position rounded to the
    drop: n = j + 1 when the gap after x(j) is at least the gap before it,
    else n = j. This equals the paper's n whenever the peak lands after the
    drop, and gives n = K on a step after K similar entries.
    """
    x = np.sort(np.asarray(similarities, dtype=np.float64))[::-1]
    if isinstance(mode, TopK):
        return Cut(n=min(mode.k, len(x)), reason="top_k")
    fallback = min(mode.fallback_k, len(x))
    if len(x) < 2 * mode.radius + 1:
        return Cut(n=fallback, reason="too_few_candidates")
    from scipy.signal import find_peaks  # here, not at the top: importing scipy.signal takes seconds

    y = np.round(derivative_estimate(x, mode.radius), DERIVATIVE_DECIMALS)
    offsets, _ = find_peaks(y, prominence=mode.prominence)
    positions = [int(p) + mode.radius for p in offsets]
    if len(positions) < mode.peak:
        return Cut(n=fallback, reason="no_peak", peaks=positions)
    j = positions[mode.peak - 1]
    n = j + 1 if x[j] - x[j + 1] >= x[j - 1] - x[j] else j
    return Cut(n=n, reason="peak", peaks=positions)
