"""The IS-ratio heatmap both the report and the dashboard draw: the distribution of a log ratio per step bucket,
split by advantage sign, histogrammed inside DuckDB (only bin counts come back).

One range rule. The y range is symmetric, [-L, L] with

    L = min(20, max(q99(|x|), 1.5 * max |clip band edge|, 1e-4))

over exactly the rows plotted (non-zero advantage, finite x; tokens: the unbiased hash sample only). Values outside
are clamped into the edge bins, never dropped. Why this rule and not the dashboard's former one (4 x the 90th
percentile over steps of the per-step std, capped at 5): it is measured on the plotted rows themselves, so it needs
no step-level std column (imported or sequence-only runs had a range of 1.5 x band only), makes no Gaussian-tail
assumption (log ratios are heavy-tailed at collapse, which is what the figure is for), and the clip band is always
visible. The 20 is the clamp the store applies to log ratios. Its cost is one more aggregate over the plotted rows
(benchmarks/dashboard_speed.py, token heatmap). The default n_y = 41 is odd so that log r = 0 (on-policy) is a bin
centre rather than an edge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from arldiag.views._sql import columns, q, query, run_filter

LEVELS = {"sequences": "seq_log_ratio", "tokens": "log_ratio"}  # table -> the log-ratio column it histograms
MAX_LIMIT = 20.0  # log ratios are stored clamped to +-20


@dataclass
class Heatmap:
    """Distribution of a log IS ratio per step bucket, split by advantage sign. z[sign] is [n_y, n_x]: the
    fraction of that bucket's rows of that sign falling in each log-ratio bin (columns sum to 1 where non-empty)."""
    table: str
    column: str
    x: np.ndarray                 # [n_x] first step of each step bucket
    y: np.ndarray                 # [n_y] centre of each log-ratio bin
    z: dict[str, np.ndarray]      # "neg" / "pos" -> [n_y, n_x]
    counts: dict[str, int]        # rows per sign
    band: tuple[float, float]     # log(1 - eps_low), log(1 + eps_high) (-inf when eps_low >= 1)
    limit: float                  # values were clamped to [-limit, limit]
    sampled_only: bool = False
    width: int = 1                # steps per bucket

    @property
    def edges(self) -> np.ndarray:
        """[n_y + 1] bin edges."""
        bw = 2 * self.limit / len(self.y)
        return -self.limit + bw * np.arange(len(self.y) + 1)

    @property
    def n(self) -> int:
        return self.counts["neg"] + self.counts["pos"]


def log_band(clip: Sequence[float] | None) -> tuple[float, float]:
    """Clip band [1 - eps_low, 1 + eps_high] in log space ((-inf, inf) without a clip)."""
    if not clip:
        return (-math.inf, math.inf)
    eps_low, eps_high = float(clip[0]), float(clip[1])
    return (math.log(1.0 - eps_low) if eps_low < 1.0 else -math.inf, math.log1p(eps_high))


def band_of(manifest: Mapping[str, Any], table: str) -> tuple[float, float] | None:
    """The clip band a table's ratios are held to, in log space: sequences by ``seq_clip`` (else ``clip``), tokens
    by ``clip``; None when the manifest has no usable clip."""
    clip = manifest.get("seq_clip") if table == "sequences" else None
    clip = clip or manifest.get("clip")
    try:
        lo, hi = float(clip[0]), float(clip[1])
    except (TypeError, ValueError, IndexError):
        return None
    return log_band((lo, hi))


def range_limit(q99: float, band: Sequence[float]) -> float:
    """The range rule of the module docstring."""
    finite_band = [abs(b) for b in band if math.isfinite(b)]
    return min(max([q99] + [1.5 * b for b in finite_band] + [1e-4]), MAX_LIMIT)


def ratio_heatmap(run: Any, table: str, name: str | None = None, band: Sequence[float] | None = None,
                  max_x: int = 120, n_y: int = 41, limit: float | None = None) -> Heatmap | None:
    """Histogram of the table's log ratio (LEVELS) by advantage sign over at most ``max_x`` step buckets; None
    without rows. ``band`` defaults to the manifest's (band_of); ``limit`` overrides the range rule."""
    if table not in LEVELS:
        raise ValueError(f"table must be one of {sorted(LEVELS)}, got {table!r}")
    if max_x < 1 or n_y < 1:
        raise ValueError(f"max_x and n_y must be >= 1, got {max_x!r} and {n_y!r}")
    column = LEVELS[table]
    have = columns(run, table)
    if column not in have or "advantage" not in have:
        return None
    if band is None:
        band = band_of(getattr(run, "manifest", {}) or {}, table) or (-math.inf, math.inf)
    band = (float(band[0]), float(band[1]))
    col = q(column)
    cond, params = run_filter(name)
    sampled = table == "tokens" and "sampled" in have
    base = (f"from {table} where {cond} and {col} is not null and isfinite({col}) and advantage is not null "
            f"and advantage <> 0" + (" and sampled" if sampled else ""))
    info = query(run, f"select min(step) as s0, max(step) as s1, count(*) as n"
                      + ("" if limit is not None else f", approx_quantile(abs({col}), 0.99) as q99") + f" {base}",
                 params)
    if info.empty or int(info["n"].iloc[0] or 0) == 0:
        return None
    s0, s1 = int(info["s0"].iloc[0]), int(info["s1"].iloc[0])
    L = float(limit) if limit is not None else range_limit(float(info["q99"].iloc[0] or 0.0), band)
    n_x = max(1, min(max_x, s1 - s0 + 1))
    width = int(math.ceil((s1 - s0 + 1) / n_x))
    n_x = int(math.ceil((s1 - s0 + 1) / width))
    bw = 2 * L / n_y
    hist = query(run, f"""
        select least(cast(floor((step - {s0}) / {width}) as bigint), {n_x - 1}) as xb,
               advantage < 0 as neg,
               least(greatest(cast(floor((greatest(least({col}::DOUBLE, {L}), {-L}) + {L}) / {bw}) as bigint), 0),
                     {n_y - 1}) as yb,
               count(*) as n
        {base} group by all""", params)
    z, counts = {}, {}
    for sign, is_neg in (("neg", True), ("pos", False)):
        h = hist[hist["neg"] == is_neg]
        m = np.zeros((n_y, n_x), dtype=np.float64)  # [n_y, n_x]
        np.add.at(m, (h["yb"].to_numpy(dtype=np.int64), h["xb"].to_numpy(dtype=np.int64)), h["n"].to_numpy())
        counts[sign] = int(m.sum())
        col_tot = m.sum(axis=0, keepdims=True)  # [1, n_x]
        z[sign] = np.divide(m, col_tot, out=np.zeros_like(m), where=col_tot > 0)
    x = s0 + width * np.arange(n_x)
    y = -L + bw * (np.arange(n_y) + 0.5)
    return Heatmap(table, column, x, y, z, counts, band, L, sampled_only=sampled, width=width)
