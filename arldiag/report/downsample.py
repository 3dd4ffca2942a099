"""Downsampling of step series for plotting, keeping spikes.

A plain bucket mean would hide exactly what a post-mortem looks for (a one-step grad-norm or KL spike), so each
bucket keeps the points at its minimum and its maximum (the "min-max" / M4-style reduction used by plotting
libraries): the drawn envelope of the downsampled line is the envelope of the full one.
Only plotted series are downsampled; findings and the verdict are computed on the full data.
"""
from __future__ import annotations

import numpy as np


def minmax_indices(y: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices into ``y`` (finite values only) keeping at most ``max_points`` points: the argmin and argmax of
    each of ``max_points // 2`` equal-count buckets. All finite indices when they already fit."""
    if max_points < 2:
        raise ValueError(f"max_points must be >= 2, got {max_points!r}")
    y = np.asarray(y, dtype=np.float64)  # [N]
    finite = np.flatnonzero(np.isfinite(y))  # [K]
    if finite.size <= max_points:
        return finite
    n_buckets = max_points // 2
    width = int(np.ceil(finite.size / n_buckets))
    pad = n_buckets * width - finite.size
    vals = np.concatenate([y[finite], np.full(pad, np.nan)]).reshape(n_buckets, width)  # [nb, w]
    pos = np.concatenate([finite, np.full(pad, -1)]).reshape(n_buckets, width)        # [nb, w]
    rows = np.arange(n_buckets)
    valid = np.isfinite(vals).any(axis=1)  # the last bucket may be all padding
    lo = np.where(np.isfinite(vals), vals, np.inf).argmin(axis=1)
    hi = np.where(np.isfinite(vals), vals, -np.inf).argmax(axis=1)
    keep = np.concatenate([pos[rows[valid], lo[valid]], pos[rows[valid], hi[valid]]])
    return np.unique(keep)


def downsample_xy(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) restricted to the min-max indices of y; non-finite y values are dropped."""
    x = np.asarray(x)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    idx = minmax_indices(y, max_points)
    return x[idx], y[idx]
