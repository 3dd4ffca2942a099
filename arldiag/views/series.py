"""Step series: the ``steps`` view as frames (full resolution for the report and the findings, bucketed means for the
dashboard's live charts), window means, and the per-turn views of the ``turns`` table.

Why two resolutions: the report keeps every step and min-max downsamples only what it plots (a one-step spike must
survive); the dashboard re-renders on every refresh tick of a live run and asks DuckDB for bucket means instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from arldiag.views._sql import columns, has_column, q, query, run_filter, table_rows

# ---------------------------------------------------------------- full-resolution frames (report) -----------------


def step_frame(run: Any, name: str | None = None) -> pd.DataFrame:
    """All step metrics of run ``name``, one row per step, sorted by step (the full data, not downsampled)."""
    cond, params = run_filter(name)
    return query(run, f"select * from steps where {cond} order by step", params).reset_index(drop=True)


def columns_with_data(steps: pd.DataFrame) -> set[str]:
    """Numeric step columns holding at least one finite value."""
    out = set()
    for c in steps.columns:
        if c in ("run", "step", "time"):
            continue
        v = pd.to_numeric(steps[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isfinite(v).any():
            out.add(c)
    return out


def series(steps: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """(step, value) of one column with non-finite values dropped (full resolution)."""
    x = steps["step"].to_numpy(dtype=np.int64)
    y = pd.to_numeric(steps[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    ok = np.isfinite(y)
    return x[ok], y[ok]


def window_mean(steps: pd.DataFrame, col: str, lo: float, hi: float) -> float:
    """Mean of a step column over steps in [lo, hi] (NaN when none)."""
    x, y = series(steps, col)
    sel = (x >= lo) & (x <= hi)
    return float(y[sel].mean()) if sel.any() else math.nan


@dataclass
class Comparison:
    """Mean of a few step metrics over two windows (before the collapse and at it, or early vs late)."""
    labels: tuple[str, str]
    windows: tuple[tuple[int, int], tuple[int, int]]
    rows: dict[str, tuple[float, float]]  # metric -> (before, at)


def compare_windows(steps: pd.DataFrame, cols: dict[str, str], collapse: int | None, window: int
                    ) -> Comparison | None:
    """Before = steps up to ``collapse - window - 1``; at = [collapse - window, collapse + window]. Without a
    collapse step: the first and the last ``2 * window + 1`` steps (early vs late)."""
    if steps.empty or not cols:
        return None
    s = steps["step"].to_numpy(dtype=np.int64)
    lo, hi = int(s.min()), int(s.max())
    if collapse is not None:
        labels = ("before collapse", "at collapse")
        windows = ((lo, collapse - window - 1), (collapse - window, collapse + window))
    else:
        labels = ("early", "late")
        windows = ((lo, min(hi, lo + 2 * window)), (max(lo, hi - 2 * window), hi))
    rows = {k: (window_mean(steps, c, *windows[0]), window_mean(steps, c, *windows[1])) for k, c in cols.items()}
    return Comparison(labels, windows, rows)


# ---------------------------------------------------------------- bucketed series (dashboard) ---------------------


def step_range(run: Any) -> tuple[int | None, int | None, int]:
    """(first step, last step, number of steps) of the ``steps`` view."""
    if "step" not in columns(run, "steps"):
        return None, None, 0
    lo, hi, n = run.con.execute("select min(step), max(step), count(distinct step) from steps").fetchall()[0]
    return (None if lo is None else int(lo)), (None if hi is None else int(hi)), int(n or 0)


def bucket_width(lo: int | None, hi: int | None, max_points: int) -> int:
    """Steps per bucket so that [lo, hi] fits in at most ``max_points`` buckets."""
    if lo is None or hi is None:
        return 1
    return max(1, math.ceil((hi - lo + 1) / max(1, max_points)))


def step_series(run: Any, metrics: Sequence[str], max_points: int = 1000) -> pd.DataFrame:
    """Columns ``step`` + each metric; one row per step, or per bucket of k steps (mean of the finite values, at the
    bucket's first step) when the run has more than ``max_points`` steps. Metrics the run never recorded are NaN."""
    have = set(columns(run, "steps"))
    present = [m for m in dict.fromkeys(metrics) if m in have]
    lo, hi, _ = step_range(run)
    if not present or lo is None:
        out = pd.DataFrame({"step": pd.Series([], dtype="int64")})
    else:
        k = bucket_width(lo, hi, max_points)
        if k == 1:
            sel = ", ".join(f"{q(m)}::DOUBLE as {q(m)}" for m in present)
            out = query(run, f"select step, {sel} from steps order by step")
        else:
            sel = ", ".join(f"avg(case when isnan({q(m)}::DOUBLE) then null else {q(m)}::DOUBLE end) as {q(m)}"
                            for m in present)
            out = query(run, f"select min(step) as step, {sel} from steps group by (step - $1) // $2 order by 1",
                        [lo, k])
    for m in metrics:
        if m not in out.columns:
            out[m] = np.nan
    return out[["step", *metrics]]


def last_signal_step(run: Any) -> int | None:
    """The last step holding a sequence row with a non-zero advantage (None without such rows)."""
    if "advantage" not in columns(run, "sequences"):
        return None
    v = run.con.execute("select max(step) from sequences where advantage <> 0").fetchall()[0][0]
    return None if v is None else int(v)


# ---------------------------------------------------------------- turns -------------------------------------------


def turn_summary(run: Any, name: str | None, band: tuple[float, float], max_turn: int = 12) -> pd.DataFrame | None:
    """Per turn index k: rows, quantiles of the turn ratio s_ik and the fraction outside the band."""
    if table_rows(run, "turns", name) == 0 or not has_column(run, "turns", "turn_log_ratio"):
        return None
    lo = band[0] if math.isfinite(band[0]) else -1e9
    hi = band[1] if math.isfinite(band[1]) else 1e9
    cond, params = run_filter(name)
    df = query(run, f"""
        select least(turn, {int(max_turn)}) as turn, count(*) as n,
               exp(quantile_cont(turn_log_ratio, 0.05)) as p05, exp(quantile_cont(turn_log_ratio, 0.5)) as p50,
               exp(quantile_cont(turn_log_ratio, 0.95)) as p95,
               avg(case when turn_log_ratio < {lo} or turn_log_ratio > {hi} then 1.0 else 0.0 end) as oob_frac
        from turns where {cond} and isfinite(turn_log_ratio) group by 1 order by 1""", params)
    return df if not df.empty else None


TURN_HEATMAP_COLUMNS = ["step", "turn", "n", "mean_log_ratio", "mean_abs_log_ratio"]


def turn_heatmap(run: Any, max_steps: int = 200, max_turns: int = 50) -> pd.DataFrame:
    """Per (step bucket, turn index): turn rows, mean turn_log_ratio (ATPO log s_ik) and mean |turn_log_ratio|."""
    if "turn_log_ratio" not in columns(run, "turns"):
        return pd.DataFrame(columns=TURN_HEATMAP_COLUMNS)
    lo, hi = run.con.execute("select min(step), max(step) from turns").fetchall()[0]
    if lo is None:
        return pd.DataFrame(columns=TURN_HEATMAP_COLUMNS)
    k = bucket_width(int(lo), int(hi), max_steps)
    return query(run, """
        select $1 + ((step - $1) // $2) * $2 as step, turn, count(*) as n,
               avg(turn_log_ratio) as mean_log_ratio, avg(abs(turn_log_ratio)) as mean_abs_log_ratio
        from turns where isfinite(turn_log_ratio) and turn >= 0 and turn < $3
        group by all order by 1, 2""", [int(lo), k, int(max_turns)])
