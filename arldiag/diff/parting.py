"""Where two series part: the pure rule of `arldiag diff` (docs/detectors.md "Where two runs part").

Two runs log a metric at their own steps. ``align`` puts both on one grid: the steps inside both runs' ranges (the
shorter run bounds the comparison) at the coarser run's logged steps, each value of the finer run being the mean of
its points in the interval (previous coarse step, this step] (a trainer that logs every 5 steps logs such a mean).

``first_parting`` then tests, at each aligned point i, the gap between the two runs' trailing medians over
``window`` points, g_i = med(a[i-w+1..i]) - med(b[i-w+1..i]) (medians, not means: a metric with heavy or skewed
tails, a gradient norm or a KL, throws outliers that would move a mean for w points), against both runs' own noise:
s_a, s_b, the sd of one point from its point-to-point changes with the largest quarter left out
(``detectors.score.trimmed_sd``, the estimate the score detector uses), over the aligned series. Two independent runs
of one stationary process with normal noise have sd(g) <= sqrt(pi / 2) sqrt(s_a^2 + s_b^2) / sqrt(w) (the sd of a
median of w points is at most sqrt(pi / 2) that of their mean), so the runs part at the first point where

    |g_i| >= sqrt(pi / 2) sqrt(s_a^2 + s_b^2) / sqrt(w) * (t + sqrt(2 ln(N / w)))

and the gap keeps its sign and stays beyond for ``confirm`` consecutive points (default window + 1: the windows at
the first and the last of those points share no point, so one burst cannot part two runs alone). t is the
Student-t quantile of ``z`` for the changes the noise rests on (``detectors.score.t_from_z``: few changes, a wider
margin); sqrt(2 ln(N / w)) is the multiple-comparisons margin over the N points tested (about N / w independent
windows; the expected maximum of n standard normals is at most sqrt(2 ln n), the margin the score detector adds for
its running peak).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arldiag.detectors.score import NOISE_TRIM, t_from_z, trimmed_sd

# sd of the median of w normal points / sd of their mean: sqrt(pi / 2), the large-w value (for w = 5 the exact
# ratio is 1.20: the need is then slightly wide)
MEDIAN_SD = math.sqrt(math.pi / 2.0)
# share of zero point-to-point changes from which a metric's noise keeps all its changes (``noise``)
ZERO_SHARE = 0.5


@dataclass(frozen=True)
class PartingRule:
    """The parting rule's settings (docs/detectors.md "Where two runs part (`arldiag diff`)")."""
    window: int = 5        # aligned points in each run's trailing median
    z: float = 3.0         # normal quantile of one test before the margins (the detectors' noise_z)
    confirm: int = 6       # consecutive aligned points the gap must stay beyond, with one sign (> window: the first
    #                        and the last window share no point, so one burst cannot part two runs alone)
    noise_min: int = 6     # aligned points each run needs for its noise to be measured
    rel_tol: float = 1e-9  # a gap under rel_tol x the series' largest |value| is float rounding, not a gap

    def __post_init__(self) -> None:
        if self.window < 1 or self.confirm < 1 or self.noise_min < 3:
            raise ValueError(f"window and confirm must be >= 1 and noise_min >= 3, got {self}")
        if not self.z > 0 or not self.rel_tol >= 0:
            raise ValueError(f"z must be > 0 and rel_tol >= 0, got {self}")


@dataclass(frozen=True)
class Parting:
    """Where one metric's two series part."""
    step: int              # the first aligned step of the confirmed stretch, moved back over the points of its
    #                        window already parted (``_move_back``)
    gap: float             # trailing median of A minus trailing median of B there
    need: float            # the |gap| the rule needed there
    noise_a: float         # s_a, sd of one aligned point of A
    noise_b: float
    mean_a: float          # the trailing medians at the parting
    mean_b: float

    @property
    def strength(self) -> float:
        """|gap| / need: how far beyond the noise (inf for two noiseless series that differ)."""
        return abs(self.gap) / self.need if self.need > 0 else math.inf


def _finite(steps: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = np.asarray(steps, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(y)
    order = np.argsort(steps[ok], kind="stable")
    return steps[ok][order], y[ok][order]


def _bin_means(grid: np.ndarray, steps: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[len(grid)]: mean of y over the steps in (grid[k-1], grid[k]] (grid[-1] = -inf); NaN where none."""
    idx = np.searchsorted(grid, steps, side="left")        # the first grid step >= each step
    keep = idx < grid.size
    sums = np.bincount(idx[keep], weights=y[keep], minlength=grid.size)
    counts = np.bincount(idx[keep], minlength=grid.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def align(steps_a, ya, steps_b, yb) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, a, b) on one grid (module doc): the coarser run's finite points inside both ranges, the other run
    averaged over each interval; points where either has no value are dropped."""
    sa, a = _finite(steps_a, ya)
    sb, b = _finite(steps_b, yb)
    if not sa.size or not sb.size:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    lo, hi = max(sa[0], sb[0]), min(sa[-1], sb[-1])
    ina, inb = (sa >= lo) & (sa <= hi), (sb >= lo) & (sb <= hi)
    if ina.sum() <= inb.sum():   # A is the coarser (or as fine): its steps are the grid
        grid, a2 = sa[ina], a[ina]
        b2 = _bin_means(grid, sb[inb], b[inb])
    else:
        grid, b2 = sb[inb], b[inb]
        a2 = _bin_means(grid, sa[ina], a[ina])
    ok = np.isfinite(a2) & np.isfinite(b2)
    return grid[ok], a2[ok], b2[ok]


def noise(y: np.ndarray) -> float:
    """sd of one point of ``y`` from its point-to-point changes (``trimmed_sd``, the largest quarter left out); NaN
    with under two changes. When at least half of the changes are 0 (a count of rare events, a score on a coarse
    step that mostly repeats), the changes that are left are the metric's noise, not outliers of a normal one, and
    the trim would set it near 0: they are all kept (trim 0)."""
    d = np.diff(np.asarray(y, dtype=np.float64))
    if d.size < 2:
        return math.nan
    sq = (d * d).tolist()
    return trimmed_sd(sq, 0.0 if np.mean(d == 0) >= ZERO_SHARE else NOISE_TRIM)


def _trailing(x: np.ndarray, w: int) -> np.ndarray:
    """[n - w + 1]: medians of x[i-w+1..i] for i = w-1 .. n-1."""
    return np.median(np.lib.stride_tricks.sliding_window_view(x, w), axis=1)


def need_of(s_a: float, s_b: float, n_points: int, rule: PartingRule) -> float:
    """The |gap| of two trailing medians the rule needs (module doc), for series of ``n_points`` aligned points."""
    w = rule.window
    t = t_from_z(rule.z, max(1, n_points - 1))
    margin = math.sqrt(2.0 * math.log(max(1.0, (n_points - w + 1) / w)))
    return MEDIAN_SD * math.hypot(s_a, s_b) / math.sqrt(w) * (t + margin)


def first_parting(steps, a, b, rule: PartingRule = PartingRule()) -> Parting | None:
    """The first aligned step where ``a`` and ``b`` part (module doc), None when they stay within noise. The
    inputs are already aligned (``align``): same length, finite."""
    steps, a, b = np.asarray(steps), np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    w, c, n = rule.window, rule.confirm, a.size
    if n < max(rule.noise_min, w + c - 1):
        return None
    s_a, s_b = noise(a), noise(b)
    need = need_of(s_a, s_b, n, rule)
    tol = rule.rel_tol * max(float(np.max(np.abs(a))), float(np.max(np.abs(b))), 1e-300)
    ma, mb = _trailing(a, w), _trailing(b, w)
    gap = ma - mb                                          # [n - w + 1], index j <-> aligned point j + w - 1
    over = (np.abs(gap) >= need) & (np.abs(gap) > tol)
    starts = [_first_run(over & (np.sign(gap) == sg), c) for sg in (1.0, -1.0)]
    starts = [j for j in starts if j is not None]
    if not starts:
        return None
    j = min(starts)
    i = _move_back(a - b, j + w - 1, j, need, float(np.sign(gap[j])))
    return Parting(int(steps[i]), float(gap[j]), float(need), s_a, s_b, float(ma[j]), float(mb[j]))


def _first_run(ok: np.ndarray, c: int) -> int | None:
    """The first index that starts ``c`` consecutive True values of ``ok``, None when there is none."""
    if ok.size < c:
        return None
    full = np.flatnonzero(np.convolve(ok.astype(np.int64), np.ones(c, np.int64), "valid") == c)
    return int(full[0]) if full.size else None


def _move_back(d: np.ndarray, i: int, lo: int, need: float, sign: float) -> int:
    """A trailing median lags an abrupt change by up to w - 1 points: move back over the points of the window
    just before i whose own gap d = a - b already has the parting's sign and size (as the collapse label moves
    back over the raw values already below its threshold)."""
    while i > lo and np.sign(d[i - 1]) == sign and abs(d[i - 1]) >= need:
        i -= 1
    return i
