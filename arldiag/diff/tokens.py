"""What a run's token rows show over a window of steps: one DuckDB pass over that window's rows (the Parquet parts
are pruned by their step statistics, so a window of a 100 M-token run reads only its own part of the table).

Over the unbiased token sample (``sampled``; rows kept only for being anomalous would bias every share):

* ``low_neg_share``: share of tokens with A < 0 and r_t < 1 - eps_low (the token clip band of run.json): the
  negative-advantage low-IS tokens (ARLArena), and ``low_neg_kl_share``, their share of the window's k3
  policy-update KL, sum of r - log r - 1 (r = exp(log_ratio));
* ``ratio_q001`` .. ``ratio_q999``: the IS ratio r_t at the 0.1 %, 1 %, 99 % and 99.9 % quantiles (DuckDB's
  approx_quantile of log_ratio, exponentiated): the tails the clip band is meant to hold;
* ``mismatch_k3``: the token mean of exp(d) - d - 1, d = lp_old - lp_roll (training-inference mismatch, as the
  step metric of that name), ``mismatch_abs_max``: the largest |d|; NULL without rollout log-probs.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from arldiag.views._sql import query, run_filter, table_rows
from arldiag.views.heatmap import band_of

QUANTILES = (0.001, 0.01, 0.99, 0.999)
STATS = ("tokens", "low_neg_share", "low_neg_kl_share", "ratio_q001", "ratio_q01", "ratio_q99", "ratio_q999",
         "mismatch_k3", "mismatch_abs_max")

_SQL = """
with t as (select advantage as a, log_ratio as x, logp_old - logp_rollout as d from tokens
           where {cond} and step between ? and ? and sampled and isfinite(log_ratio))
select count(*) as tokens,
       avg(case when a < 0 and x < ? then 1.0 else 0.0 end) as low_neg_share,
       sum(case when a < 0 and x < ? then exp(x) - x - 1 else 0.0 end) / nullif(sum(exp(x) - x - 1), 0)
           as low_neg_kl_share,
       approx_quantile(x, [{qs}]) as q,
       avg(exp(d) - d - 1) as mismatch_k3, max(abs(d)) as mismatch_abs_max
from t
"""


def window_stats(run: Any, lo: int, hi: int, name: str | None = None,
                 manifest: Mapping[str, Any] | None = None) -> dict[str, float] | None:
    """The statistics of the module doc over steps lo..hi of run ``name`` (one query), None when the run has no
    token rows in the window."""
    if not table_rows(run, "tokens", name):
        return None
    band = band_of(manifest if manifest is not None else run.manifest, "tokens")
    low = band[0] if band is not None and math.isfinite(band[0]) else -math.inf
    cond, params = run_filter(name)
    sql = _SQL.format(cond=cond, qs=", ".join(str(q) for q in QUANTILES))
    row = query(run, sql, [*params, int(lo), int(hi), low, low]).iloc[0]
    if not row["tokens"]:
        return None
    qs = list(row["q"]) if row["q"] is not None else [math.nan] * len(QUANTILES)
    out = {"tokens": int(row["tokens"]), "low_neg_share": _num(row["low_neg_share"]),
           "low_neg_kl_share": _num(row["low_neg_kl_share"])}
    out.update({k: math.exp(float(v)) for k, v in zip(STATS[3:7], qs)})
    out.update(mismatch_k3=_num(row["mismatch_k3"]), mismatch_abs_max=_num(row["mismatch_abs_max"]))
    return out


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f
