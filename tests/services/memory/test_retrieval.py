"""Dynamic n (MemToolAgent Algorithm 1) and top-k on constructed similarity curves."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from faultline._errors import ConfigError
from faultline.services.memory import (
    Dynamic,
    MemoryEntry,
    Retrieval,
    ScoredEntry,
    TopK,
    choose_n,
    derivative_estimate,
)


def step_curve(sizes: list[int], levels: list[float], slope: float = 0.001) -> np.ndarray:
    """Descending similarities: blocks of `sizes` at `levels`, each falling gently by `slope`."""
    return np.concatenate([level - slope * np.arange(size) for size, level in zip(sizes, levels, strict=True)])


def test_derivative_matches_the_formula() -> None:
    rng = np.random.default_rng(7)
    x = np.sort(rng.random(40))[::-1]
    radius = 4
    taus = range(-radius, radius + 1)
    expected = [-sum(t * x[j + t] for t in taus) / sum(t * t for t in taus) for j in range(radius, len(x) - radius)]
    assert np.allclose(derivative_estimate(x, radius), expected)


def test_derivative_of_a_line_is_its_rate_of_decrease() -> None:
    x = 0.9 - 0.01 * np.arange(30)
    assert np.allclose(derivative_estimate(x, 5), 0.01)


@pytest.mark.parametrize("knee", [12, 25, 40, 63, 88])
def test_clean_knee_gives_n_at_the_knee(knee: int) -> None:
    x = step_curve([knee, 100 - knee], [0.85, 0.35])
    cut = choose_n(x, Dynamic())
    assert (cut.n, cut.reason) == (knee, "peak")
    assert cut.peaks == [knee - 1]


def test_noisy_knee_is_found_within_one_position() -> None:
    rng = np.random.default_rng(3)
    x = step_curve([30, 70], [0.8, 0.4]) + rng.normal(0.0, 0.002, 100)
    cut = choose_n(x, Dynamic(prominence=1e-3))
    assert cut.reason == "peak"
    assert abs(cut.n - 30) <= 1


def test_order_of_the_input_does_not_matter() -> None:
    x = step_curve([30, 70], [0.8, 0.4])
    shuffled = np.random.default_rng(0).permutation(x)
    assert choose_n(shuffled, Dynamic()) == choose_n(x, Dynamic())


def test_two_knees_first_and_second_peak() -> None:
    x = step_curve([20, 30, 50], [0.9, 0.6, 0.3])
    first = choose_n(x, Dynamic(peak=1))
    second = choose_n(x, Dynamic(peak=2))
    assert (first.n, first.reason) == (20, "peak")
    assert (second.n, second.reason) == (50, "peak")
    assert first.peaks == second.peaks == [19, 49]


def test_asking_for_more_peaks_than_exist_falls_back() -> None:
    x = step_curve([20, 30, 50], [0.9, 0.6, 0.3])
    cut = choose_n(x, Dynamic(peak=3, fallback_k=7))
    assert (cut.n, cut.reason, cut.peaks) == (7, "no_peak", [19, 49])


def test_flat_curve_falls_back_to_top_k() -> None:
    x = 0.7 - 0.002 * np.arange(100)
    cut = choose_n(x, Dynamic(fallback_k=6))
    assert (cut.n, cut.reason, cut.peaks) == (6, "no_peak", [])


def test_constant_curve_falls_back_to_top_k() -> None:
    cut = choose_n(np.full(60, 0.5), Dynamic(fallback_k=4))
    assert (cut.n, cut.reason) == (4, "no_peak")


@pytest.mark.parametrize("size", [0, 1, 10, 20])
def test_fewer_than_2r_plus_1_candidates_fall_back(size: int) -> None:
    x = step_curve([size // 2, size - size // 2], [0.9, 0.1])
    cut = choose_n(x, Dynamic(radius=10, fallback_k=5))
    assert (cut.n, cut.reason) == (min(5, size), "too_few_candidates")


def test_prominence_filters_small_bumps() -> None:
    x = step_curve([30, 70], [0.8, 0.76])
    assert choose_n(x, Dynamic(prominence=1e-5)).reason == "peak"
    assert choose_n(x, Dynamic(prominence=0.01)).reason == "no_peak"


def test_smaller_radius_sees_an_earlier_knee() -> None:
    x = step_curve([6, 60], [0.9, 0.3])
    assert choose_n(x, Dynamic(radius=10)).reason == "no_peak"
    cut = choose_n(x, Dynamic(radius=3))
    assert (cut.n, cut.reason) == (6, "peak")


def test_top_k_is_capped_by_what_exists() -> None:
    assert choose_n(np.array([0.9, 0.5]), TopK(k=5)) == choose_n(np.array([0.9, 0.5]), TopK(k=2))
    assert choose_n(np.array([0.9, 0.5, 0.1]), TopK(k=2)).n == 2


def test_invalid_modes_are_refused() -> None:
    with pytest.raises(ConfigError, match="radius"):
        Dynamic(radius=0)
    with pytest.raises(ConfigError, match="peak"):
        Dynamic(peak=0)
    with pytest.raises(ConfigError, match=r"TopK\.k"):
        TopK(k=-1)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.radius"):
        msgspec.json.decode(b'{"type": "dynamic", "radius": 0}', type=Dynamic | TopK)


def test_retrieval_travels_over_the_wire() -> None:
    entry = MemoryEntry(
        id="e1", episode="ep1", domain="retail", query="cancel order 7", feedback=0, reflection="wrong id"
    )
    sent = Retrieval(
        query="cancel my order",
        mode=Dynamic(peak=2),
        entries=[ScoredEntry(entry=entry, score=0.75)],
        n=1,
        reason="peak",
        peaks=[0, 31],
        candidates=120,
    )
    got = msgspec.msgpack.decode(msgspec.msgpack.encode(sent), type=Retrieval)
    assert got == sent
    assert isinstance(got.mode, Dynamic) and got.mode.peak == 2


def test_n_is_rounded_to_the_drop_when_the_peak_lands_after_it() -> None:
    # The lower block starts steeply, so the derivative peaks on its first entry.
    x = np.concatenate([0.8 - 0.001 * np.arange(15), 0.36 - 0.012 * np.arange(5), 0.3 - 0.001 * np.arange(40)])
    cut = choose_n(x, Dynamic(radius=5))
    assert cut.peaks[0] == 15
    assert (cut.n, cut.reason) == (15, "peak")
