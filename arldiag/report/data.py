"""Data gathering for the report: DuckDB queries over one run's views, nothing rendered here.

Every query filters on the view's ``run`` column, so the functions work on a single run and on one run of a
multi-run view alike. Bulk tables (tokens, sequences) are only aggregated in DuckDB (histograms, top-k); the only
rows pulled into Python are the step series and the tokens of the few offender sequences.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

# ---------------------------------------------------------------- helpers ----------------------------------------


def query(run: Any, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
    """Run parameterised SQL on the run's DuckDB connection (views registered by open_run)."""
    return run.con.execute(sql, list(params)).df()


def table_rows(run: Any, table: str, name: str) -> int:
    """Rows of ``table`` that belong to run ``name`` (0 when the view is missing or empty)."""
    try:
        if run.count(table) == 0:
            return 0
        return int(query(run, f"select count(*) as n from {table} where run = ?", [name])["n"].iloc[0])
    except Exception:  # a view that does not exist for this store counts as empty
        return 0


def has_column(run: Any, table: str, col: str) -> bool:
    try:
        return bool(run.has_column(table, col))
    except Exception:
        return False


def _q(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


# ---------------------------------------------------------------- step series ------------------------------------


def step_frame(run: Any, name: str) -> pd.DataFrame:
    """All step metrics of run ``name``, one row per step, sorted by step (the full data, not downsampled)."""
    df = query(run, "select * from steps where run = ? order by step", [name])
    return df.reset_index(drop=True)


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


def alerts_frame(run: Any, name: str, limit: int = 50) -> pd.DataFrame | None:
    """The first ``limit`` alerts the run recorded (online monitor / watch), by step; None when there are none."""
    if table_rows(run, "alerts", name) == 0:
        return None
    return query(run, f"""select step, detector, severity, state, title, source from alerts where run = ?
                          order by step, time limit {int(limit)}""", [name])


def actions_frame(run: Any, name: str, limit: int = 50) -> pd.DataFrame | None:
    """What --auto-stabilize applied (the actions table), by step; None when nothing was applied."""
    if table_rows(run, "actions", name) == 0:
        return None
    return query(run, f"""select step, action, params, detector, state, reason, policy from actions where run = ?
                          order by step, time limit {int(limit)}""", [name])


def action_outcomes(run: Any, name: str) -> list[str]:
    """The ``outcome`` JSON of every auto-stabilize action, in the order applied (empty without actions)."""
    from arldiag.detectors.batch import actions_of

    return [outcome for _, outcome in actions_of(run, name)]


# ---------------------------------------------------------------- IS-ratio heatmaps ------------------------------


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


def log_band(clip: Sequence[float] | None) -> tuple[float, float]:
    """Clip band [1 - eps_low, 1 + eps_high] in log space."""
    if not clip:
        return (-math.inf, math.inf)
    eps_low, eps_high = float(clip[0]), float(clip[1])
    return (math.log(1.0 - eps_low) if eps_low < 1.0 else -math.inf, math.log1p(eps_high))


def ratio_heatmap(run: Any, name: str, table: str, column: str, band: tuple[float, float],
                  max_x: int = 120, n_y: int = 41, where: str = "") -> Heatmap | None:
    """Histogram of ``column`` (a log ratio) by advantage sign over step buckets, computed in DuckDB.

    The y range is symmetric: the larger of the 99th percentile of |column| and 1.5x the clip band, so that the
    band lines are always visible and outliers land in the edge bins (values are clamped, never dropped)."""
    if not (has_column(run, table, column) and has_column(run, table, "advantage")):
        return None
    col = _q(column)
    base = (f"from {table} where run = ? and {col} is not null and isfinite({col}) and advantage is not null "
            f"and advantage <> 0 {where}")
    info = query(run, f"select min(step) as s0, max(step) as s1, count(*) as n, "
                      f"approx_quantile(abs({col}), 0.99) as q99 {base}", [name])
    if info.empty or int(info["n"].iloc[0] or 0) == 0:
        return None
    s0, s1, q99 = int(info["s0"].iloc[0]), int(info["s1"].iloc[0]), float(info["q99"].iloc[0] or 0.0)
    finite_band = [abs(b) for b in band if math.isfinite(b)]
    limit = max([q99] + [1.5 * b for b in finite_band] + [1e-4])
    limit = min(limit, 20.0)  # log-ratios are stored clamped to +-20
    n_x = max(1, min(max_x, s1 - s0 + 1))
    width = int(math.ceil((s1 - s0 + 1) / n_x))
    n_x = int(math.ceil((s1 - s0 + 1) / width))
    bw = 2 * limit / n_y
    hist = query(run, f"""
        select least(cast(floor((step - {s0}) / {width}) as bigint), {n_x - 1}) as xb,
               advantage < 0 as neg,
               least(greatest(cast(floor((greatest(least({col}, {limit}), {-limit}) + {limit}) / {bw}) as bigint), 0),
                     {n_y - 1}) as yb,
               count(*) as n
        {base} group by all""", [name])
    z, counts = {}, {}
    for sign, is_neg in (("neg", True), ("pos", False)):
        h = hist[hist["neg"] == is_neg]
        m = np.zeros((n_y, n_x), dtype=np.float64)  # [n_y, n_x]
        np.add.at(m, (h["yb"].to_numpy(dtype=np.int64), h["xb"].to_numpy(dtype=np.int64)), h["n"].to_numpy())
        counts[sign] = int(m.sum())
        col_tot = m.sum(axis=0, keepdims=True)  # [1, n_x]
        z[sign] = np.divide(m, col_tot, out=np.zeros_like(m), where=col_tot > 0)
    x = s0 + width * np.arange(n_x)
    y = -limit + bw * (np.arange(n_y) + 0.5)
    return Heatmap(table, column, x, y, z, counts, band, limit, sampled_only="sampled" in where)


# ---------------------------------------------------------------- neg-adv low-IS before vs at collapse -----------


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


# ---------------------------------------------------------------- turns -----------------------------------------


def turn_summary(run: Any, name: str, band: tuple[float, float], max_turn: int = 12) -> pd.DataFrame | None:
    """Per turn index k: rows, quantiles of the turn ratio s_ik and the fraction outside the band."""
    if table_rows(run, "turns", name) == 0 or not has_column(run, "turns", "turn_log_ratio"):
        return None
    lo = band[0] if math.isfinite(band[0]) else -1e9
    hi = band[1] if math.isfinite(band[1]) else 1e9
    df = query(run, f"""
        select least(turn, {max_turn}) as turn, count(*) as n,
               exp(quantile_cont(turn_log_ratio, 0.05)) as p05, exp(quantile_cont(turn_log_ratio, 0.5)) as p50,
               exp(quantile_cont(turn_log_ratio, 0.95)) as p95,
               avg(case when turn_log_ratio < {lo} or turn_log_ratio > {hi} then 1.0 else 0.0 end) as oob_frac
        from turns where run = ? and isfinite(turn_log_ratio) group by 1 order by 1""", [name])
    return df if not df.empty else None


# ---------------------------------------------------------------- offender sequences ----------------------------


@dataclass
class Offender:
    step: int
    update: int
    sample_id: int
    advantage: float
    seq_ratio: float
    kl_k3_sum: float
    kl_share: float                     # share of its step's k3 policy-update KL
    neg_adv_low_is: bool
    n_tokens: int
    text: str | None = None
    tokens: pd.DataFrame | None = None  # pos, token_id, log_ratio (ordered by pos)
    source: str = "top KL"              # why it was picked: a detector name, "top KL" or "neg-adv low-IS"
    extra: dict = field(default_factory=dict)


_SEQ_COLS = ("step", "update", "sample_id", "advantage", "seq_ratio", "ppo_kl_k3_sum", "neg_adv_low_is", "n_tokens")


def _offender_rows(run: Any, name: str, where: str, params: list, order: str, limit: int) -> pd.DataFrame:
    text = ", text" if has_column(run, "sequences", "text") else ", null as text"
    return query(run, f"""
        with s as (
            select step, "update", sample_id, advantage, seq_ratio, ppo_kl_k3_sum, neg_adv_low_is, n_tokens {text},
                   ppo_kl_k3_sum / nullif(sum(ppo_kl_k3_sum) over (partition by step), 0) as kl_share
            from sequences where run = ?)
        select * from s where {where} order by {order} limit {int(limit)}""", [name] + params)


def top_offenders(run: Any, name: str, steps: tuple[int, int] | None, n: int = 6,
                  pinned: Sequence[dict] = ()) -> list[Offender]:
    """The sequences that drove the window: those named by findings' evidence (``pinned``, dicts with step and
    sample_id), then the largest k3 policy-update KL contributors, half of them among the negative-advantage low-IS
    set (the ARLArena collapse driver); rows with a zero advantage are never picked by KL."""
    if table_rows(run, "sequences", name) == 0 or not all(has_column(run, "sequences", c) for c in _SEQ_COLS):
        return []
    rng = "true" if steps is None else "step between ? and ?"
    rparams = [] if steps is None else [int(steps[0]), int(steps[1])]
    frames, sources = [], []
    for p in list(pinned)[:n]:
        if "step" in p and "sample_id" in p:
            f = _offender_rows(run, name, "step = ? and sample_id = ?", [int(p["step"]), int(p["sample_id"])],
                               "kl_share desc nulls last", 1)
            frames.append(f)
            sources += [str(p.get("source", "finding"))] * len(f)
    f = _offender_rows(run, name, f"{rng} and neg_adv_low_is", rparams, "ppo_kl_k3_sum desc nulls last",
                       max(1, n // 2))
    frames.append(f)
    sources += ["neg-adv low-IS"] * len(f)
    # a zero-advantage row has no gradient through the policy loss: it cannot have driven anything
    f = _offender_rows(run, name, f"{rng} and advantage <> 0", rparams, "ppo_kl_k3_sum desc nulls last", n)
    frames.append(f)
    sources += ["top KL"] * len(f)
    out, seen = [], set()
    for row, src in zip(pd.concat(frames, ignore_index=True).itertuples(index=False), sources):
        key = (int(row.step), int(row.update), int(row.sample_id))
        if key in seen or len(out) >= n:
            continue
        seen.add(key)
        out.append(Offender(step=key[0], update=key[1], sample_id=key[2], advantage=_num(row.advantage),
                            seq_ratio=_num(row.seq_ratio), kl_k3_sum=_num(row.ppo_kl_k3_sum),
                            kl_share=_num(row.kl_share), neg_adv_low_is=bool(row.neg_adv_low_is),
                            n_tokens=int(row.n_tokens or 0),
                            text=None if row.text is None or (isinstance(row.text, float)) else str(row.text),
                            source=src))
    _attach_tokens(run, name, out)
    return out


def _num(v: Any) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _attach_tokens(run: Any, name: str, offenders: list[Offender]) -> None:
    """One query for the token rows of all offenders (tokens are always kept for anomalous sequences)."""
    if not offenders or table_rows(run, "tokens", name) == 0:
        return
    steps = sorted({o.step for o in offenders})
    ids = sorted({o.sample_id for o in offenders})
    tid = "token_id" if has_column(run, "tokens", "token_id") else "-1 as token_id"
    df = query(run, f"""
        select step, "update", sample_id, pos, {tid}, log_ratio from tokens
        where run = ? and step in ({",".join("?" * len(steps))}) and sample_id in ({",".join("?" * len(ids))})
        order by step, "update", sample_id, pos""", [name] + steps + ids)
    for o in offenders:
        t = df[(df["step"] == o.step) & (df["update"] == o.update) & (df["sample_id"] == o.sample_id)]
        if not t.empty:
            o.tokens = t[["pos", "token_id", "log_ratio"]].reset_index(drop=True)


def token_labels(offender: Offender, decode: Callable[[int], str] | None = None) -> tuple[list[str], str]:
    """Display labels for an offender's tokens and how they were obtained:
    "decoded" (a tokenizer), "text" (the text split on whitespace has exactly one word per token),
    "ids" (token ids only) or "positions" (neither ids nor text recorded)."""
    t = offender.tokens
    if t is None or t.empty:
        return [], "none"
    ids = t["token_id"].to_numpy(dtype=np.int64)
    have_ids = bool((ids >= 0).all())
    if decode is not None and have_ids:
        return [decode(int(i)) for i in ids], "decoded"
    words = offender.text.split() if offender.text else []
    if words and len(words) == len(ids):
        return words, "text"
    if have_ids:
        return [f"#{int(i)}" for i in ids], "ids"
    return [f"@{int(p)}" for p in t["pos"].to_numpy()], "positions"
