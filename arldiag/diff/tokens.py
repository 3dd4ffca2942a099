"""What a run's token rows show over a window of steps: one DuckDB pass over that window's rows (the Parquet parts
are pruned by their step statistics, so a window of a 100 M-token run reads only its own part of the table). A window
holding more than MAX_ROWS stored rows is read on whole samples, one sample in k (hash(sample_id) % k = 0, k =
ceil(the window's estimated rows / MAX_ROWS), the estimate being its n_tokens x token_sample_rate): shares and
quantiles of half a million rows are exact enough, and a sample keeps all its tokens, so nothing is biased.

Over the unbiased token sample (``sampled``; rows kept only for being anomalous would bias every share):

* ``low_neg_share``: share of tokens with A < 0 and r_t < 1 - eps_low (the token clip band of run.json): the
  negative-advantage low-IS tokens (ARLArena), and ``low_neg_kl_share``, their share of the window's k3
  policy-update KL, sum of r - log r - 1 (r = exp(log_ratio));
* ``ratio_q001`` .. ``ratio_q999``: the IS ratio r_t at the 0.1 %, 1 %, 99 % and 99.9 % quantiles (DuckDB's
  quantile_cont of log_ratio, exponentiated): the tails the clip band is meant to hold;
* ``mismatch_k3``: the token mean of exp(d) - d - 1, d = lp_old - lp_roll (training-inference mismatch, as the
  step metric of that name), ``mismatch_abs_max``: the largest |d|; NULL without rollout log-probs.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from arldiag.views._sql import query, run_filter
from arldiag.views.heatmap import band_of

QUANTILES = (0.001, 0.01, 0.99, 0.999)
MAX_ROWS = 500_000  # token rows read per run and window, at most about
STATS = ("tokens", "one_in", "low_neg_share", "low_neg_kl_share", "ratio_q001", "ratio_q01", "ratio_q99", "ratio_q999",
         "mismatch_k3", "mismatch_abs_max")

_SQL = """
with t as (select advantage as a, log_ratio as x, logp_old - logp_rollout as d from tokens
           where {cond} and step between {lo:d} and {hi:d} and sampled and isfinite(log_ratio)
             and hash(sample_id) % {k:d} = 0)
select count(*) as tokens,
       avg(case when a < 0 and x < ? then 1.0 else 0.0 end) as low_neg_share,
       sum(case when a < 0 and x < ? then exp(x) - x - 1 else 0.0 end) / nullif(sum(exp(x) - x - 1), 0)
           as low_neg_kl_share,
       quantile_cont(x, [{qs}]) as q,
       avg(exp(d) - d - 1) as mismatch_k3, max(abs(d)) as mismatch_abs_max
from t
"""


def one_in(expected_rows: float) -> int:
    """k: read one sample in k so that about MAX_ROWS rows are read (1: every row)."""
    return max(1, math.ceil(expected_rows / MAX_ROWS)) if math.isfinite(expected_rows) else 1


def window_stats(run: Any, lo: int, hi: int, name: str | None = None,
                 manifest: Mapping[str, Any] | None = None, k: int = 1) -> dict[str, float] | None:
    """The statistics of the module doc over steps lo..hi of run ``name`` (one query; one sample in ``k``), None
    when the run has no token rows in the window (or no token table)."""
    band = band_of(manifest if manifest is not None else run.manifest, "tokens")
    low = band[0] if band is not None and math.isfinite(band[0]) else -math.inf
    cond, params = run_filter(name)
    # the window and k are written into the SQL as integers: as bound parameters they keep DuckDB from filtering
    # the rows before it reads their other columns (3x slower on a 100 M-token run)
    sql = _SQL.format(cond=cond, qs=", ".join(str(q) for q in QUANTILES), lo=int(lo), hi=int(hi), k=int(k))
    try:
        row = query(run, sql, [*params, low, low]).iloc[0]
    except Exception:  # noqa: BLE001 - a run store without a tokens view has no token rows
        return None
    if not row["tokens"]:
        return None
    qs = list(row["q"]) if row["q"] is not None else [math.nan] * len(QUANTILES)
    out = {"tokens": int(row["tokens"]), "one_in": int(k), "low_neg_share": _num(row["low_neg_share"]),
           "low_neg_kl_share": _num(row["low_neg_kl_share"])}
    out.update({key: math.exp(float(v)) for key, v in zip(STATS[4:8], qs)})
    out.update(mismatch_k3=_num(row["mismatch_k3"]), mismatch_abs_max=_num(row["mismatch_abs_max"]))
    return out


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f
