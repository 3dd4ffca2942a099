"""The parting rule (arldiag/diff/parting.py, docs/detectors.md "Where two runs part"): alignment by step, the
noise estimate shared with the score detector, a planted divergence found within its noise window, and no parting
between two seeds of one stationary process."""
from __future__ import annotations

import math

import numpy as np
import pytest

from arldiag.detectors.score import trimmed_sd
from arldiag.diff.parting import PartingRule, align, first_parting, need_of, noise

RULE = PartingRule()


def test_align_takes_the_coarser_grid_and_averages_the_finer_run():
    # A every step 1..10, B every second step 2..12: the grid is B's steps inside both ranges (2..10), A's value
    # at grid step k is the mean of its points in (k-2, k] (step 1 is before B's range)
    sa, a = np.arange(1, 11), np.arange(1, 11) * 10.0
    sb, b = np.arange(2, 13, 2), np.arange(2, 13, 2) * 1.0
    steps, xa, xb = align(sa, a, sb, b)
    assert steps.tolist() == [2, 4, 6, 8, 10]
    assert xa.tolist() == [20.0, 35.0, 55.0, 75.0, 95.0]   # 20, (30 + 40) / 2, (50 + 60) / 2, ...
    assert xb.tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]
    # symmetric: the finer run may be either one
    steps2, xb2, xa2 = align(sb, b, sa, a)
    assert steps2.tolist() == steps.tolist() and xa2.tolist() == xa.tolist()


def test_align_is_bounded_by_the_shorter_run_and_drops_missing_points():
    a = np.arange(100.0)
    b = np.where(np.arange(50) % 7 == 3, np.nan, np.arange(50.0))  # NaN rows: a metric not logged there
    steps, xa, xb = align(np.arange(100), a, np.arange(50), b)
    # B (fewer points) is the grid, up to its last step 49; A at a grid step after a missing one is the mean of
    # A over both steps (4: (3 + 4) / 2)
    assert steps.max() == 49 and not np.isin(steps, np.arange(3, 50, 7)).any()
    assert np.array_equal(xb, steps.astype(float))
    want = [(s - 0.5 if s % 7 == 4 else float(s)) for s in steps]
    assert xa.tolist() == want


def test_noise_is_the_detectors_trimmed_sd_and_keeps_all_changes_of_a_mostly_flat_metric():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.3, 4000)
    d = np.diff(y)
    assert noise(y) == pytest.approx(trimmed_sd((d * d).tolist()))
    assert noise(y) == pytest.approx(0.3, rel=0.05)   # unbiased on normal noise
    # a count of rare events: 90 % of the changes are 0, so the trimmed sd would be 0; all changes count
    spikes = np.zeros(200)
    spikes[::20] = 1.0
    d = np.diff(spikes)
    assert noise(spikes) == pytest.approx(math.sqrt(np.mean(d * d) / 2))
    assert math.isnan(noise(np.array([1.0, 2.0])))


def test_need_is_the_documented_formula():
    # sqrt(pi / 2) sqrt(s_a^2 + s_b^2) / sqrt(w) * (t + sqrt(2 ln(N / w))), t = z + (z^3 + z) / (4 df) + ... (df = N - 1)
    z, n, w = 3.0, 101, 5
    df = n - 1
    t = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
    want = math.sqrt(math.pi / 2) * math.sqrt(0.3 ** 2 + 0.4 ** 2) / math.sqrt(w) * (t + math.sqrt(2 * math.log((n - w + 1) / w)))
    assert need_of(0.3, 0.4, n, RULE) == pytest.approx(want)


@pytest.mark.parametrize("shift", [8.0, 12.0])
def test_a_planted_divergence_is_found_within_its_noise_window(shift):
    """A shift of `shift` noise sd in one run from point 120 of 200, over 100 seeds: found every time, never
    before it, and within the rule's window (5 points)."""
    lags = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        a, b = rng.normal(0, 1, 200), rng.normal(0, 1, 200)
        b[120:] += shift
        p = first_parting(np.arange(200) * 10, a, b)   # logged every 10 steps
        assert p is not None, seed
        lags.append((p.step - 1200) // 10)
        assert p.gap < 0 and p.mean_b > p.mean_a
    assert min(lags) >= 0 and max(lags) < RULE.window, lags
    if shift >= 12:
        assert max(lags) <= 1  # the median moves once 3 of its 5 points have, then moves back to the onset


def _stationary(kind: str, n: int, rng) -> np.ndarray:
    if kind == "normal":
        return rng.normal(0.5, 0.1, n)
    if kind == "score8":       # one prompt x 8 samples: a score in steps of 1/8
        return rng.binomial(8, 0.5, n) / 8
    if kind == "heavy":        # a gradient norm: heavy tails
        return np.abs(rng.standard_t(3, n))
    if kind == "skewed":       # a KL: lognormal
        return np.exp(rng.normal(-3.0, 1.0, n))
    if kind == "sparse":       # a count of rare events
        return rng.binomial(1, 0.15, n) * rng.exponential(1.0, n)
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["normal", "score8", "heavy", "skewed", "sparse"])
def test_two_seeds_of_one_stationary_process_do_not_part(kind):
    rng = np.random.default_rng({"normal": 1, "score8": 2, "heavy": 3, "skewed": 5, "sparse": 4}[kind])
    found = [first_parting(np.arange(n), _stationary(kind, n, rng), _stationary(kind, n, rng))
             for n in (40, 200, 1000) for _ in range(60)]
    assert [p for p in found if p is not None] == []


def test_noiseless_series_part_where_they_differ():
    lr_a = np.full(100, 2e-4)
    lr_b = lr_a.copy()
    lr_b[60:] = 1e-4                       # a closed loop halved the learning rate after step 59
    p = first_parting(np.arange(100), lr_a, lr_b)
    assert p is not None and p.step == 60
    assert first_parting(np.arange(100), lr_a, lr_a.copy()) is None   # identical: no gap at all


def test_too_few_points_and_bad_settings():
    assert first_parting(np.arange(8), np.zeros(8), np.ones(8)) is None   # fewer than window + confirm - 1
    for bad in (dict(window=0), dict(confirm=0), dict(noise_min=2), dict(z=0.0), dict(rel_tol=-1.0)):
        with pytest.raises(ValueError):
            PartingRule(**bad)
