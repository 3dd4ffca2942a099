"""Bounded per-step history and the small numeric helpers every rule uses.

State never grows with the run: a ``Window`` keeps the last ``size`` values of each column it tracks, and the
helpers that need more history keep O(1) summaries (running peak, running minimum, a frozen early baseline of at
most ``n`` values) in the detector's own state dict.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Callable, Iterable, Mapping

import numpy as np


def as_float(v) -> float:
    """Metric value -> float; None, non-numbers and pandas NA -> NaN (a column the step did not record)."""
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


class Window:
    """The last ``size`` values of each tracked column, oldest first; NaN where a step did not record it."""

    def __init__(self, columns: Iterable[str], size: int) -> None:
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        self.size = int(size)
        self._buf: dict[str, deque] = {c: deque(maxlen=self.size) for c in columns}
        self._cache: dict[str, np.ndarray] = {}
        self.n_steps = 0
        self.step: int | None = None
        self.context = None  # the step's outcome context (detectors.context.Outcome), set by the Evaluator

    @property
    def columns(self) -> list[str]:
        return list(self._buf)

    def push(self, step: int, metrics: Mapping[str, object]) -> None:
        for c, buf in self._buf.items():
            buf.append(as_float(metrics.get(c)))
        self._cache.clear()
        self.n_steps += 1
        self.step = int(step)

    def series(self, col: str) -> np.ndarray:
        """float64 array of the tracked values of ``col`` (oldest first); empty if the column is not tracked."""
        a = self._cache.get(col)
        if a is None:
            buf = self._buf.get(col)
            a = np.fromiter(buf, dtype=np.float64, count=len(buf)) if buf is not None else np.empty(0)
            self._cache[col] = a
        return a

    def last(self, col: str) -> float:
        a = self.series(col)
        return float(a[-1]) if a.size else math.nan

    def repair_spike(self, col: str) -> bool:
        """Replace the previous point of ``col`` by the mean of its two neighbours when it was a one-point spike
        (``isolated_spike``): the point after it came back, so a rule that smooths or looks back over the window
        no longer sees it (a spike in a log written every k steps is one batch, not a trend). The rules saw it
        raw when it was the newest point. True when it replaced one."""
        buf = self._buf.get(col)
        if buf is None or len(buf) < 3:
            return False
        a, b, c = buf[-3], buf[-2], buf[-1]
        if not isolated_spike(a, b, c, lambda: self.series(col)):
            return False
        buf[-2] = 0.5 * (a + c)
        self._cache.pop(col, None)
        return True


# ------------------------------------------------------------------------------------------------ pure helpers
def _finite_tail(x: np.ndarray, k: int) -> np.ndarray:
    t = x[-k:]
    return t[np.isfinite(t)]


def tail_mean(x: np.ndarray, k: int) -> float:
    """Mean of the finite values among the last k entries (NaN if none): the smoothing every level rule uses."""
    t = _finite_tail(x, k)
    return float(t.mean()) if t.size else math.nan


def tail_median(x: np.ndarray, k: int) -> float:
    """Median of the finite values among the last k entries (NaN if none). For k = 3 it is the value that at least
    two of the last three steps reach: a level that lasts, where ``tail_mean`` would stretch a one-step spike over
    k steps."""
    t = _finite_tail(x, k)
    return float(np.median(t)) if t.size else math.nan


def prior_median(x: np.ndarray, skip: int, n: int, min_count: int) -> float:
    """Median of the finite values among the n entries before the last ``skip`` ones: a rolling baseline that
    excludes the current step(s), so a spike is compared against what came before it."""
    end = len(x) - skip
    t = x[max(0, end - n):max(0, end)]
    t = t[np.isfinite(t)]
    return float(np.median(t)) if t.size >= min_count else math.nan


def slope(x: np.ndarray, n: int) -> float:
    """Least-squares slope per step over the finite values among the last n entries (NaN if < 3 points)."""
    t = x[-n:]
    idx = np.arange(t.size, dtype=np.float64)
    ok = np.isfinite(t)
    if ok.sum() < 3:
        return math.nan
    xi, yi = idx[ok], t[ok]
    xc = xi - xi.mean()
    den = float((xc * xc).sum())
    return float((xc * (yi - yi.mean())).sum() / den) if den > 0 else math.nan


# a one-point spike: the point stands SPIKE_GAP times further from its neighbours' mean than they stand from each
# other, and SPIKE_Z robust sds of the series' point-to-point noise from it
SPIKE_GAP, SPIKE_Z = 4.0, 6.0


def isolated_spike(a: float, b: float, c: float, series: Callable[[], np.ndarray]) -> bool:
    """b (between a and c) is a one-point spike of the series x = series(): |b - (a + c) / 2| > SPIKE_GAP |a - c| and
    > SPIKE_Z x robust_noise(x) (the median change is not moved by one spike). NaN anywhere: not a spike. The series
    is built only when the cheap gap test passes: the Evaluator asks this of every precursor column at every step."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return False
    d = abs(b - 0.5 * (a + c))
    if d <= SPIKE_GAP * abs(a - c):
        return False
    s = robust_noise(series())
    return math.isfinite(s) and d > SPIKE_Z * s


def robust_noise(x: np.ndarray) -> float:
    """1.4826 x median |point-to-point change| / sqrt 2: the per-point noise sd of a series whose level moves
    slowly (the changes of two independent draws have sd sqrt 2 sigma and median 0); NaN if < 4 points."""
    x = x[np.isfinite(x)]
    if x.size < 4:
        return math.nan
    return float(1.4826 * np.median(np.abs(np.diff(x))) / math.sqrt(2.0))


def grade_above(v: float, thresholds) -> int:
    """0..3: how many of the ascending thresholds (watch, warning, critical) v reaches."""
    if not math.isfinite(v):
        return 0
    return sum(1 for t in thresholds if v >= t)


def growth_gated_level(cur: float, base: float, p, levels: str) -> tuple[int, float]:
    """(level, ratio): ``grade_above(cur, p[levels])``, counted only once ``cur`` has grown past
    ``p["min_growth"]`` x its early baseline (floored at ``p["floor"]``). A tight band or a constant engine/trainer
    offset can hold a stable run at a high constant value: only growth is a precursor."""
    ratio = cur / max(base, p["floor"])
    return (grade_above(cur, p[levels]) if ratio >= p["min_growth"] else 0), ratio


def grade_below(v: float, thresholds) -> int:
    """0..3: how many of the descending thresholds (watch, warning, critical) v has fallen to or under."""
    if not math.isfinite(v):
        return 0
    return sum(1 for t in thresholds if v <= t)


# ------------------------------------------------------------------------------- O(1) state kept across steps
def early_baseline(state: dict, key: str, value: float, n: int) -> float:
    """Median of the first n finite values seen (frozen afterwards); NaN until n have been seen.

    A frozen early baseline catches slow accumulation that a rolling baseline would absorb (ARLArena: the
    negative-advantage low-IS share grows over ~100 steps before collapse)."""
    done = state.get(key + "_base")
    if done is not None:
        return done
    buf = state.setdefault(key + "_early", [])
    if math.isfinite(value):
        buf.append(value)
    if len(buf) >= n:
        state[key + "_base"] = float(np.median(buf))
        del state[key + "_early"]
        return state[key + "_base"]
    return math.nan


def move_baseline(state: dict, key: str, value: float) -> None:
    """Move a frozen early baseline (``early_baseline``) to ``value``: the level the run reached while its outcome
    climbed is its new normal (a policy that learned concise answers, or to explore more, while the score rose)."""
    if key + "_base" in state and math.isfinite(value):
        state[key + "_base"] = float(value)


def running_max(state: dict, key: str, value: float) -> float:
    """Running maximum of the finite values seen so far (NaN before the first)."""
    cur = state.get(key, math.nan)
    if math.isfinite(value) and not (value <= cur):
        state[key] = cur = value
    return cur


def running_min(state: dict, key: str, value: float) -> float:
    cur = state.get(key, math.nan)
    if math.isfinite(value) and not (value >= cur):
        state[key] = cur = value
    return cur


def count_finite(state: dict, key: str, value: float) -> int:
    """How many finite values of a series have been seen (a warm-up counter: running peaks and minima of a
    smoothed series start only once its smoothing window is full, so one lucky early step is not a "peak")."""
    n = state.get(key, 0) + (1 if math.isfinite(value) else 0)
    state[key] = n
    return n


def first_available(window: Window, cols) -> str | None:
    """The first of ``cols`` with a finite value somewhere in the window (alternative metric names)."""
    for c in cols:
        if np.isfinite(window.series(c)).any():
            return c
    return None
