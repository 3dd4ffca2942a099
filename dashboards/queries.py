"""The dashboard's read queries: small, pre-aggregated DuckDB queries over one run's views -> pandas frames.

Rules that keep the dashboard fast on runs with 10 M token rows:
- step series come from the ``steps`` view (one row per step) and are averaged into at most ``max_points`` buckets;
- distributions are histogrammed inside DuckDB (only bin counts come back);
- raw token rows are read for one sequence at a time only.
All values that reach SQL are either column names from fixed lists checked against the run's columns, or numbers
passed as bound parameters; the browser never sends SQL.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd


def q(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + str(name).replace('"', '""') + '"'


def columns(run: Any, table: str) -> list[str]:
    try:
        return list(run.columns(table))
    except Exception:  # a table the run has never written has no view (or an empty one)
        return []


def fetch(run: Any, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
    return run.con.execute(sql, list(params or [])).df()


def step_range(run: Any) -> tuple[int | None, int | None, int]:
    """(first step, last step, number of steps) of the ``steps`` view."""
    if "step" not in columns(run, "steps"):
        return None, None, 0
    lo, hi, n = run.con.execute("select min(step), max(step), count(distinct step) from steps").fetchall()[0]
    return (None if lo is None else int(lo)), (None if hi is None else int(hi)), int(n or 0)


def last_signal_step(run: Any) -> int | None:
    """The last step holding a sequence row with a non-zero advantage (None without such rows)."""
    if "advantage" not in columns(run, "sequences"):
        return None
    v = run.con.execute("select max(step) from sequences where advantage <> 0").fetchall()[0][0]
    return None if v is None else int(v)


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
            out = fetch(run, f"select step, {sel} from steps order by step")
        else:
            sel = ", ".join(f"avg(case when isnan({q(m)}::DOUBLE) then null else {q(m)}::DOUBLE end) as {q(m)}"
                            for m in present)
            out = fetch(run, f"select min(step) as step, {sel} from steps group by (step - $1) // $2 order by 1",
                        [lo, k])
    for m in metrics:
        if m not in out.columns:
            out[m] = np.nan
    return out[["step", *metrics]]


def band_edges(manifest: dict, level: str) -> tuple[float, float] | None:
    """Log-ratio edges (log(1-eps_low), log(1+eps_high)) of the clip band for token or sequence ratios."""
    clip = manifest.get("seq_clip") if level == "sequences" else None
    clip = clip or manifest.get("clip")
    try:
        lo, hi = float(clip[0]), float(clip[1])
    except (TypeError, ValueError, IndexError):
        return None
    return (math.log(1.0 - lo) if lo < 1.0 else -math.inf, math.log1p(hi))


def ratio_histogram(run: Any, level: str = "sequences", bins: int = 40, max_steps: int = 200,
                    half_range: float | None = None) -> dict[str, Any]:
    """Distribution of the log IS ratio per step (bucket), split by advantage sign, computed in DuckDB.

    level "sequences": x = seq_log_ratio (GSPO log s_i) per sequence row; level "tokens": x = log_ratio (log r_t)
    over the hash-sampled token rows only (``sampled``), which are an unbiased sample. Returns
    {"steps": [...], "edges": [...], "pos": z[bins, steps], "neg": z[bins, steps], "half_range": R, "n": rows}
    where z is the fraction of that sign's rows of the step bucket falling in each bin.
    """
    if level not in ("sequences", "tokens"):
        raise ValueError(f"level must be 'sequences' or 'tokens', got {level!r}")
    col = "seq_log_ratio" if level == "sequences" else "log_ratio"
    cols = columns(run, level)
    lo, hi, _ = step_range(run)
    empty = {"steps": [], "edges": [], "pos": np.zeros((bins, 0)), "neg": np.zeros((bins, 0)), "half_range": 0.0,
             "n": 0, "level": level}
    if col not in cols or "advantage" not in cols:
        return empty
    if half_range is None:
        half_range = _auto_half_range(run, level)
    if lo is None:
        lo, hi = run.con.execute(f"select min(step), max(step) from {level}").fetchall()[0]
        if lo is None:
            return empty
    k = bucket_width(int(lo), int(hi), max_steps)
    width = 2.0 * half_range / bins
    keep = " where sampled" if level == "tokens" and "sampled" in cols else ""
    df = fetch(run, f"""
        with v as (select step, advantage, {q(col)}::DOUBLE as x from {level}{keep})
        select (step - $1) // $2 as b, advantage > 0 as pos,
               least(greatest(floor((x + $3) / $4), 0), $5 - 1)::INTEGER as bin, count(*) as n
        from v where advantage <> 0 and isfinite(x) group by all""", [int(lo), k, half_range, width, bins])
    nb = int((int(hi) - int(lo)) // k + 1)
    out = {"steps": [int(lo) + i * k for i in range(nb)], "edges": list(-half_range + width * np.arange(bins + 1)),
           "half_range": half_range, "n": int(df["n"].sum()) if len(df) else 0, "level": level, "bucket": k}
    for sign, flag in (("pos", True), ("neg", False)):
        z = np.zeros((bins, nb))
        part = df[df["pos"] == flag]
        if len(part):
            np.add.at(z, (part["bin"].to_numpy(int), part["b"].to_numpy(int)), part["n"].to_numpy(float))
        tot = z.sum(axis=0, keepdims=True)
        out[sign] = np.divide(z, tot, out=np.zeros_like(z), where=tot > 0)
    return out


def _auto_half_range(run: Any, level: str) -> float:
    """Histogram half-range in log-ratio units: 4 typical stds (90th percentile over steps), widened to show the
    clip band; kept in [1e-3, 5]. Read from the ``steps`` view so no extra pass over the big tables is needed."""
    std_col = "seq_log_ratio_std" if level == "sequences" else "log_ratio_std"
    r = 0.0
    if std_col in columns(run, "steps"):
        v = run.con.execute(f"select quantile_cont(case when isnan({q(std_col)}) then null else {q(std_col)} end, 0.9)"
                            f" from steps").fetchall()[0][0]
        if v is not None and math.isfinite(v):
            r = 4.0 * float(v)
    edges = band_edges(getattr(run, "manifest", {}) or {}, level)
    if edges:
        r = max(r, 1.5 * max(abs(e) for e in edges if math.isfinite(e)))
    return float(min(max(r, 1e-3), 5.0))


WORST_ORDER = {
    # why: the largest k3 contributors carry the policy-update KL (ARLArena: collapse is driven by few sequences)
    "ppo_kl_k3_sum": "ppo_kl_k3_sum desc nulls last",
    # the ARLArena negative-advantage low-IS set first, lowest sequence ratio first
    "neg_adv_low_is": "neg_adv_low_is desc nulls last, seq_ratio asc nulls last",
    "seq_ratio": "seq_ratio asc nulls last",
}
SEQ_COLUMNS = ["sample_id", "update", "rank", "group_id", "turn", "n_tokens", "advantage", "seq_ratio",
               "ppo_kl_k3_sum", "neg_adv_low_is", "reward", "success", "format_valid", "nonfinite"]


def worst_sequences(run: Any, step: int, by: str = "ppo_kl_k3_sum", limit: int = 25) -> pd.DataFrame:
    """The step's worst sequence rows by ``by`` (a key of WORST_ORDER), with each row's share of its update's k3 KL
    and whether its token rows were kept (``has_tokens``)."""
    if by not in WORST_ORDER:
        raise ValueError(f"by must be one of {sorted(WORST_ORDER)}, got {by!r}")
    step, limit = int(step), max(1, min(int(limit), 500))
    have = columns(run, "sequences")
    if not have:
        return pd.DataFrame(columns=SEQ_COLUMNS + ["kl_share", "has_tokens"])
    sel = ", ".join(q(c) if c in have else f"null as {q(c)}" for c in SEQ_COLUMNS)
    df = fetch(run, f"""
        select {sel},
               ppo_kl_k3_sum / nullif(sum(ppo_kl_k3_sum) over (partition by "update", rank), 0) as kl_share
        from sequences where step = $1 order by {WORST_ORDER[by]} limit $2""", [step, limit])
    df["has_tokens"] = False
    if len(df) and "sample_id" in columns(run, "tokens"):
        ids = [int(s) for s in df["sample_id"].unique()]
        kept = fetch(run, 'select distinct sample_id, "update", rank from tokens where step = $1 and '
                          'list_contains($2, sample_id)', [step, ids])
        keys = set(map(tuple, kept[["sample_id", "update", "rank"]].astype(int).to_numpy().tolist()))
        df["has_tokens"] = [(int(a), int(b), int(c)) in keys
                            for a, b, c in zip(df["sample_id"], df["update"], df["rank"])]
    return df


TOKEN_COLUMNS = ["pos", "turn", "token_id", "logp", "logp_old", "logp_rollout", "logp_ref", "entropy", "advantage",
                 "log_ratio", "sampled"]


def sequence_tokens(run: Any, step: int, sample_id: int, update: int, rank: int = 0) -> pd.DataFrame:
    """Token rows of one sequence row (the only place raw token rows are read), ordered by position, with each
    token's k3 KL contribution r - log r - 1 (log r = log_ratio) and its share of the sequence's sum."""
    have = columns(run, "tokens")
    if not have:
        return pd.DataFrame(columns=TOKEN_COLUMNS + ["kl_k3", "kl_share"])
    sel = ", ".join(q(c) if c in have else f"null as {q(c)}" for c in TOKEN_COLUMNS)
    df = fetch(run, f"""select {sel}, exp(log_ratio) - log_ratio - 1 as kl_k3 from tokens
                        where step = $1 and sample_id = $2 and "update" = $3 and rank = $4 order by pos""",
               [int(step), int(sample_id), int(update), int(rank)])
    tot = float(np.nansum(df["kl_k3"].to_numpy(float))) if len(df) else 0.0
    df["kl_share"] = df["kl_k3"] / tot if tot > 0 else 0.0
    return df


def sequence_row(run: Any, step: int, sample_id: int, update: int, rank: int = 0) -> dict[str, Any]:
    """The sequences row (as a dict) of one sample/update, or {} if absent."""
    if not columns(run, "sequences"):
        return {}
    df = fetch(run, 'select * from sequences where step = $1 and sample_id = $2 and "update" = $3 and rank = $4 '
                    'limit 1', [int(step), int(sample_id), int(update), int(rank)])
    return {} if df.empty else df.iloc[0].to_dict()


def turn_heatmap(run: Any, max_steps: int = 200, max_turns: int = 50) -> pd.DataFrame:
    """Per (step bucket, turn index): turn rows, mean turn_log_ratio (ATPO log s_ik) and mean |turn_log_ratio|."""
    cols = columns(run, "turns")
    if "turn_log_ratio" not in cols:
        return pd.DataFrame(columns=["step", "turn", "n", "mean_log_ratio", "mean_abs_log_ratio"])
    lo, hi = run.con.execute("select min(step), max(step) from turns").fetchall()[0]
    if lo is None:
        return pd.DataFrame(columns=["step", "turn", "n", "mean_log_ratio", "mean_abs_log_ratio"])
    k = bucket_width(int(lo), int(hi), max_steps)
    return fetch(run, """
        select $1 + ((step - $1) // $2) * $2 as step, turn, count(*) as n,
               avg(turn_log_ratio) as mean_log_ratio, avg(abs(turn_log_ratio)) as mean_abs_log_ratio
        from turns where isfinite(turn_log_ratio) and turn >= 0 and turn < $3
        group by all order by 1, 2""", [int(lo), k, int(max_turns)])


def _event_rows(run: Any, table: str, want: list[str], limit: int) -> pd.DataFrame:
    """Rows of an event table (alerts, actions) by step then time; columns an older store lacks come back null."""
    cols = columns(run, table)
    if "step" not in cols:
        return pd.DataFrame(columns=want)
    sel = ", ".join(q(c) if c in cols else f"null as {q(c)}" for c in want)
    order = "step, time" if "time" in cols else "step"
    return fetch(run, f"select {sel} from {table} order by {order} limit $1", [int(limit)])


def alerts(run: Any, limit: int = 500) -> pd.DataFrame:
    """Alerts the run's monitor (or `arldiag watch`) wrote, newest last."""
    return _event_rows(run, "alerts", ["step", "detector", "severity", "state", "risk", "title", "message", "source"],
                       limit)


def actions(run: Any, limit: int = 500) -> pd.DataFrame:
    """What --auto-stabilize applied (the actions table), by step."""
    return _event_rows(run, "actions", ["step", "action", "params", "detector", "state", "risk", "reason", "policy"],
                       limit)


def state_segments(timeline: pd.DataFrame) -> list[tuple[int, int, str]]:
    """Contiguous runs of one non-ok alert state -> [(first step, last step, state)], for shaded bands."""
    if timeline is None or timeline.empty:
        return []
    t = timeline.sort_values("step")
    out: list[tuple[int, int, str]] = []
    prev = "ok"
    for step, state in zip(t["step"].astype(int), t["state"].astype(str)):
        if state != "ok" and state == prev:
            out[-1] = (out[-1][0], step, state)
        elif state != "ok":
            out.append((step, step, state))
        prev = state
    return out
