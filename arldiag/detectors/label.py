"""The collapse label: the step at which a run collapsed, from its outcome series only.

Rule (docs/detectors.md "Collapse label"): for each outcome series y (success rate; valid-format ratio), take the
trailing mean m_t over ``window`` steps and its running peak P_t = max_{s<=t} m_s (from the third step on, so one
lucky first step is no peak). The series collapses at the
first step t such that P_t >= min_peak and m_s < frac * P_s for every s >= t up to the end of the run, provided at
least ``min_tail`` steps remain from t on. Because a trailing mean lags an abrupt fall, t then moves back over the
immediately preceding steps whose raw value y_s is already below frac * P_s. The run's collapse step is the earliest
over its series; None when no series collapses (a stable run).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

SUCCESS_COLUMNS = ("success_rate", "success_frac", "success")
FORMAT_COLUMNS = ("format_valid_frac",)


def trailing_mean(y: np.ndarray, window: int) -> np.ndarray:
    """m_t = mean of the finite values among y[t-window+1 .. t] (NaN if none)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.full(y.shape, np.nan)
    for t in range(y.size):
        seg = y[max(0, t - window + 1):t + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[t] = seg.mean()
    return out


def series_collapse_index(y: Sequence[float], window: int = 10, frac: float = 0.5, min_peak: float = 0.2,
                          min_tail: int = 5) -> int | None:
    """Index (not step) at which the series collapses under the rule above, or None."""
    if window < 1 or min_tail < 1 or not 0 < frac < 1:
        raise ValueError("window and min_tail must be >= 1 and frac in (0, 1)")
    m = trailing_mean(np.asarray(y, dtype=np.float64), window)
    if not np.isfinite(m).any():
        return None
    # the peak needs a mean over at least min(window, 3) steps, so one lucky first step is not a "peak" (a run
    # that breaks within its first steps, from a behaviour-cloned start, still gets its collapse label)
    full = np.isfinite(m) & (np.arange(m.size) >= min(window, 3) - 1)
    peak = np.fmax.accumulate(np.where(full, m, -np.inf))
    below = np.isfinite(m) & (m < frac * peak) & (peak >= min_peak)
    below |= ~np.isfinite(m) & (peak >= min_peak)  # a step without the metric does not break a collapse
    if not below[-1]:
        return None
    # start of the final all-below stretch
    idx = np.flatnonzero(~below)
    t = int(idx[-1]) + 1 if idx.size else 0
    while t < below.size and not np.isfinite(m[t]):
        t += 1
    if below.size - t < min_tail:
        return None
    # the trailing mean lags an abrupt fall by up to window-1 steps: move back over the raw values just before t
    # that are already below the threshold, so the label does not flatter lead times
    y = np.asarray(y, dtype=np.float64)
    while t > 0 and np.isfinite(y[t - 1]) and y[t - 1] < frac * peak[t - 1] and peak[t - 1] >= min_peak:
        t -= 1
    return t


def collapse_step_of(steps: Sequence[int], columns: Mapping[str, Sequence[float]], window: int = 10,
                     frac: float = 0.5, min_peak: float = 0.2, min_tail: int = 5) -> int | None:
    """Apply the rule to the first available success column and to format_valid_frac; earliest collapse wins."""
    steps = list(steps)
    found = []
    for group in (SUCCESS_COLUMNS, FORMAT_COLUMNS):
        for c in group:
            y = columns.get(c)
            if y is None:
                continue
            y = np.asarray(y, dtype=np.float64)
            if not np.isfinite(y).any():
                continue
            i = series_collapse_index(y, window, frac, min_peak, min_tail)
            if i is not None:
                found.append(int(steps[i]))
            break
    return min(found) if found else None


