"""The collapse label: the step at which a run collapsed, from its outcome series only.

Rule (docs/detectors.md "Collapse label"): for each outcome series y (success rate; valid-format ratio), take the
trailing mean m_t over ``window`` steps and its running peak P_t = max_{s<=t} m_s (from the third step on, so one
lucky first step is no peak). The series collapses at the
first step t such that P_t >= min_peak and m_s < frac * P_s for every s >= t up to the end of the run, provided at
least ``min_tail`` steps remain from t on. Because a trailing mean lags an abrupt fall, t then moves back over the
immediately preceding steps whose raw value y_s is already below frac * P_s. The run's collapse step is the earliest
over its series; None when no series collapses (a stable run). A below-stretch of at least ``min_tail`` steps that
ends before the run does is a recovered *dip*: an event of its own kind for the scoring (evaluation.scoring).
When the run logs ``eval_success`` (greedy evaluation every few steps), it replaces the batch success series.

A run that never reached min_peak can still die: a *decline* (``run_decline``) is the collapse rule with min_peak
lowered to DECLINE_FLOOR, on a run without a collapse. It is an event of its own kind too (nothing learned was lost,
but the run is failing): the scoring counts a warning before it neither as a false alarm nor as a caught collapse.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from arldiag.aliases import score_bounds

SUCCESS_COLUMNS = ("success_rate", "success_frac", "success")
FORMAT_COLUMNS = ("format_valid_frac",)
# the last resort, as in the detectors' outcome context (detectors/context.py): a run that logs no success flag
# (TRL and verl step logs: only the mean reward) is labelled from its mean reward when every value lies in [0, 1]
# (accuracy and format rewards, pass rates); on an unknown scale "half of its peak" means nothing, so no label
REWARD_COLUMN = "reward_mean"


def _window_mean(y: np.ndarray, before: int, after: int) -> np.ndarray:
    """out_t = mean of the finite values among y[t-before .. t+after] (NaN if none)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.full(y.shape, np.nan)
    for t in range(y.size):
        seg = y[max(0, t - before):t + after + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[t] = seg.mean()
    return out


def trailing_mean(y: np.ndarray, window: int) -> np.ndarray:
    """m_t = mean of the finite values among y[t-window+1 .. t] (NaN if none)."""
    return _window_mean(y, window - 1, 0)


def _below(y: np.ndarray, window: int, frac: float, min_peak: float):
    """(below, peak, m): below_t = the trailing mean is under frac x its running peak (peak >= min_peak)."""
    m = trailing_mean(y, window)
    # the peak needs a mean over at least min(window, 3) steps, so one lucky first step is not a "peak" (a run
    # that breaks within its first steps, from a behaviour-cloned start, still gets its collapse label)
    full = np.isfinite(m) & (np.arange(m.size) >= min(window, 3) - 1)
    peak = np.fmax.accumulate(np.where(full, m, -np.inf))
    below = np.isfinite(m) & (m < frac * peak) & (peak >= min_peak)
    below |= ~np.isfinite(m) & (peak >= min_peak)  # a step without the metric does not break a collapse
    return below, peak, m


def _move_back(y: np.ndarray, t: int, peak: np.ndarray, frac: float, min_peak: float) -> int:
    """The trailing mean lags an abrupt fall by up to window-1 steps: move back over the raw values just before
    t that are already below the threshold, so the label does not flatter lead times."""
    while t > 0 and np.isfinite(y[t - 1]) and y[t - 1] < frac * peak[t - 1] and peak[t - 1] >= min_peak:
        t -= 1
    return t


def series_events(y: Sequence[float], window: int = 10, frac: float = 0.5, min_peak: float = 0.2,
                  min_tail: int = 5) -> tuple[int | None, list[tuple[int, int]]]:
    """(collapse index or None, [(start, end) indices of recovered dips]) of one outcome series.

    A stretch of ``below`` steps lasting at least ``min_tail`` steps is a collapse when it lasts to the end of the
    run and a recovered dip when it ends before (end = its last below index)."""
    if window < 1 or min_tail < 1 or not 0 < frac < 1:
        raise ValueError("window and min_tail must be >= 1 and frac in (0, 1)")
    y = np.asarray(y, dtype=np.float64)
    if not np.isfinite(y).any():
        return None, []
    below, peak, m = _below(y, window, frac, min_peak)
    collapse, dips = None, []
    t = 0
    n = below.size
    while t < n:
        if not below[t]:
            t += 1
            continue
        e = t
        while e + 1 < n and below[e + 1]:
            e += 1
        a = t
        while a <= e and not np.isfinite(m[a]):  # steps before the metric was ever logged
            a += 1
        if e - a + 1 >= min_tail:
            a = _move_back(y, a, peak, frac, min_peak)
            if e == n - 1:
                collapse = a
            else:
                dips.append((a, e))
        t = e + 1
    return collapse, dips


def series_collapse_index(y: Sequence[float], window: int = 10, frac: float = 0.5, min_peak: float = 0.2,
                          min_tail: int = 5) -> int | None:
    """Index (not step) at which the series collapses under the rule above, or None."""
    return series_events(y, window, frac, min_peak, min_tail)[0]


# eval_success (greedy evaluation every few steps, NULL in between) is a cleaner outcome than the batch success of
# 16 sampled episodes: when a run logs it at least EVAL_MIN_POINTS times, the label reads it on its own evaluation
# points, with a trailing mean over EVAL_WINDOW evaluations and EVAL_MIN_TAIL evaluations of tail.
EVAL_COLUMN = "eval_success"
EVAL_MIN_POINTS, EVAL_WINDOW, EVAL_MIN_TAIL = 5, 3, 2


def _unit_reward(columns: Mapping[str, Sequence[float]]) -> bool:
    """The run logs no success value (a run store has the columns, NULL when unused), and a mean reward whose
    logged values all lie in [0, 1]."""
    if REWARD_COLUMN not in columns or any(np.isfinite(np.asarray(columns[c], dtype=np.float64)).any()
                                           for c in SUCCESS_COLUMNS if c in columns):
        return False
    r = np.asarray(columns[REWARD_COLUMN], dtype=np.float64)
    r = r[~np.isnan(r)]
    return bool(r.size) and bool(np.all((r >= 0.0) & (r <= 1.0)))


# The task score of a real run (arldiag.aliases: critic/score/mean, the reward, an accuracy; any scale) is
# labelled by the rule of the real development runs (../shared/real_runs/README.md), which reproduces every label
# there: a = the score as logged when non-negative, (a + 1) / 2 for +1/-1 scores, min-max for a scale with
# negatives; m = centred 5-point mean; the collapse is the first point where a <= 1/3 of the best m before it, the
# mean of a over that point and the next 4 is too, m never comes back above 1/2 of that best, at least 5 points
# follow, best >= 0.02.
SCORE_COLUMN = "task_score"


def unit_score(y: Sequence[float]) -> np.ndarray:
    """The score for the label rule: as logged when it lies in [0, 1] or is non-negative on its own scale (the rule
    compares ratios to the best), (y + 1) / 2 on [-1, 1], else min-max scaled."""
    y = np.asarray(y, dtype=np.float64)
    fin = y[np.isfinite(y)]
    if fin.size and fin.min() >= 0.0:
        return y  # [0, 1], or non-negative on its own scale: the rule compares ratios to the best either way
    if score_bounds(fin.tolist()) == (-1.0, 1.0):
        return (y + 1.0) / 2.0
    if not fin.size or fin.max() <= fin.min():
        return np.zeros_like(y)
    return (y - fin.min()) / (fin.max() - fin.min())


def centred_mean(a: np.ndarray, width: int = 5) -> np.ndarray:
    """Mean of the finite values among a[t - width//2 .. t + width//2] (NaN if none)."""
    return _window_mean(a, width // 2, width // 2)


def score_collapse_index(y: Sequence[float], frac: float = 1 / 3, keep: float = 0.5, confirm: int = 5,
                         follow: int = 5, min_best: float = 0.02) -> int | None:
    """Index of the task score's collapse under the rule above (over its logged points), or None."""
    a = unit_score(y)
    ok = np.isfinite(a)
    idx = np.flatnonzero(ok)
    a = a[ok]
    m = centred_mean(a)
    n = a.size
    for t in range(1, n):
        best = float(np.nanmax(m[:t]))
        if not best >= min_best or n - 1 - t < follow:
            continue
        if a[t] <= frac * best and a[t:t + confirm].mean() <= frac * best and np.all(m[t:] <= keep * best):
            return int(idx[t])
    return None


def run_events(steps: Sequence[int], columns: Mapping[str, Sequence[float]], window: int = 10, frac: float = 0.5,
               min_peak: float = 0.2, min_tail: int = 5) -> tuple[int | None, list[tuple[int, int]]]:
    """(collapse step, recovered dips [(first, last) step]) of a run: eval_success when logged (else the first
    available success column, else reward_mean when it stays in [0, 1]) and format_valid_frac; the earliest
    collapse wins; dips are merged when they overlap, and a dip inside the collapse (from the other series) is
    dropped."""
    steps = np.asarray(list(steps))
    ts = columns.get(SCORE_COLUMN)
    if ts is not None and np.isfinite(np.asarray(ts, dtype=np.float64)).any() and not any(
            np.isfinite(np.asarray(columns[c], dtype=np.float64)).any() for c in SUCCESS_COLUMNS + (EVAL_COLUMN,)
            if c in columns):
        # a real run's task score (no success flag of arldiag's own): the rule of the real development runs
        i = score_collapse_index(ts)
        return (None if i is None else int(steps[i])), []
    found, dips = [], []
    ev = columns.get(EVAL_COLUMN)
    groups = (SUCCESS_COLUMNS + ((REWARD_COLUMN,) if _unit_reward(columns) else ()), FORMAT_COLUMNS)
    if ev is not None:
        ev = np.asarray(ev, dtype=np.float64)
        ok = np.isfinite(ev)
        if ok.sum() >= EVAL_MIN_POINTS:
            c, d = series_events(ev[ok], EVAL_WINDOW, frac, min_peak, EVAL_MIN_TAIL)
            st = steps[ok]
            if c is not None:
                found.append(int(st[c]))
            dips += [(int(st[a]), int(st[b])) for a, b in d]
            groups = (FORMAT_COLUMNS,)
    for group in groups:
        for col in group:
            y = columns.get(col)
            if y is None:
                continue
            y = np.asarray(y, dtype=np.float64)
            if not np.isfinite(y).any():
                continue
            c, d = series_events(y, window, frac, min_peak, min_tail)
            if c is not None:
                found.append(int(steps[c]))
            dips += [(int(steps[a]), int(steps[b])) for a, b in d]
            break
    collapse = min(found) if found else None
    merged: list[list[int]] = []
    for a, b in sorted(dips):
        if collapse is not None and b >= collapse:
            continue
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return collapse, [(a, b) for a, b in merged]


def collapse_step_of(steps: Sequence[int], columns: Mapping[str, Sequence[float]], window: int = 10,
                     frac: float = 0.5, min_peak: float = 0.2, min_tail: int = 5) -> int | None:
    """The run's collapse step (``run_events``), None for a run that does not collapse."""
    return run_events(steps, columns, window, frac, min_peak, min_tail)[0]


# Half of min_peak: a decline needs an outcome mean of at least 0.1 that then stays under half of it to the end.
# Fixed before it was tried; on the 73 dev runs of 2026-12-01 it marks exactly the six runs whose eval success went
# from 0.12-0.23 (never above 0.27) to 0.00-0.06 (stress seeds 0, 10, 35; lag seeds 5, 6, 10); 0.05 marks the same
# six, 0.15 four of them.
DECLINE_FLOOR = 0.1


def run_decline(steps: Sequence[int], columns: Mapping[str, Sequence[float]], window: int = 10, frac: float = 0.5,
                min_peak: float = 0.2, min_tail: int = 5, floor: float = DECLINE_FLOOR) -> int | None:
    """The step at which a run without a collapse *declined* (the collapse rule of ``run_events`` with min_peak
    lowered to ``floor``), None when it collapsed or did not decline."""
    if not 0 < floor < min_peak:
        raise ValueError(f"floor must be in (0, min_peak={min_peak}), got {floor}")
    if run_events(steps, columns, window, frac, min_peak, min_tail)[0] is not None:
        return None
    return run_events(steps, columns, window, frac, floor, min_tail)[0]
