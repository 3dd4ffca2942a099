"""Constructed step series for the detector tests: a healthy run and, per registered detector, a firing variant.

Each case changes only the columns its detector reads, starting at FIRE_AT, so the test can also check the first
firing step is not before the change.
"""
from __future__ import annotations

import math

import numpy as np

N_STEPS = 120
FIRE_AT = 60


def healthy(n: int = N_STEPS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        u = t / n
        e = lambda s: float(rng.normal(0, s))  # noqa: E731
        out.append({
            "step": t,
            "n_tokens": 5000.0, "nonfinite_tokens": 0.0,
            "neg_adv_low_is_frac": 0.08 + e(0.01), "neg_adv_low_is_kl_share": 0.3 + e(0.03),
            "tok_oob_frac": 0.03 + e(0.003), "tok_oob_low_neg_frac": 0.01, "seq_oob_low_neg_frac": 0.02,
            "pg_clipfrac": 0.02 + e(0.002),
            "ppo_kl_k3": 0.002 + e(0.0002), "ppo_kl": 0.001 + e(0.0002),
            "kl_ref_k3": 0.001 + 0.01 * u + e(0.0002),
            "kl_top1pct_share": 0.08 + e(0.01),
            "entropy": 1.0 - 0.2 * u + e(0.02), "cov_logp_adv": e(0.01),
            "grad_norm": 1.0 + e(0.1), "loss": 0.1 + e(0.01),
            "format_valid_frac": min(0.98, 0.6 + 0.35 * u + e(0.02)),
            "zero_std_group_frac": max(0.0, 0.5 - 0.3 * u + e(0.03)),
            "response_length_mean": 100.0 + e(5), "truncated_frac": 0.02,
            "success_rate": 0.1 + 0.6 * u + e(0.03),
            # a real run's task score on the +1/-1 scale (verl ReTool), rising like the success rate
            "task_score": -0.8 + 1.2 * u + e(0.06),
            "mismatch_k3": 0.0005 + e(0.00005), "mismatch_chi2": 0.001, "mismatch_log_abs_max": 2.0 + e(0.2),
            "retok_mismatch_frac": 0.0,
        })
    return out


def _after(rows, fn):
    rows = [dict(r) for r in rows]
    for r in rows:
        k = r["step"] - FIRE_AT
        if k >= 0:
            fn(r, k)
    return rows


def _set(**cols):
    def fn(r, k):
        for c, v in cols.items():
            r[c] = v(r, k) if callable(v) else v
    return fn


# name -> function(healthy rows) -> rows on which the detector must fire (at or after FIRE_AT)
FIRING = {
    "neg_adv_low_is": lambda h: _after(h, _set(neg_adv_low_is_frac=lambda r, k: 0.08 + 0.01 * k,
                                               neg_adv_low_is_kl_share=lambda r, k: min(0.95, 0.3 + 0.02 * k))),
    "clip_pressure": lambda h: _after(h, _set(tok_oob_frac=lambda r, k: 0.03 + 0.01 * k,
                                              tok_oob_low_neg_frac=lambda r, k: 0.01 + 0.008 * k)),
    "ppo_kl_spike": lambda h: _after(h, _set(ppo_kl_k3=lambda r, k: 0.05 if k == 0 else r["ppo_kl_k3"])),
    # KL runs away while success stalls (if success kept climbing, that would be learning: test_healthy_runs)
    "kl_ref_drift": lambda h: _after(h, _set(kl_ref_k3=lambda r, k: 0.008 * 1.3 ** min(k, 20), success_rate=0.4)),
    # the policy must move for concentration to matter: the step KL rises to 0.008 (min_kl 5e-3, below a spike)
    "kl_concentration": lambda h: _after(h, _set(kl_top1pct_share=lambda r, k: min(0.9, 0.08 + 0.05 * k),
                                                 ppo_kl_k3=lambda r, k: 0.008)),
    "entropy_collapse": lambda h: _after(h, _set(entropy=lambda r, k: max(0.02, 0.88 * 0.9 ** k),
                                                 cov_logp_adv=0.02)),
    # entropy rises while success stalls (while success still climbs it is exploration below critical:
    # test_healthy_dynamics, test_healthy_runs)
    "entropy_blowup": lambda h: _after(h, _set(entropy=lambda r, k: 0.88 * (1 + 0.1 * k), success_rate=0.4)),
    "grad_norm_spike": lambda h: _after(h, _set(grad_norm=lambda r, k: 10.0 if k == 0 else r["grad_norm"])),
    "nonfinite": lambda h: _after(h, _set(nonfinite_tokens=lambda r, k: 3.0 if k == 0 else 0.0)),
    "format_collapse": lambda h: _after(h, _set(format_valid_frac=lambda r, k: max(0.0, 0.8 - 0.05 * k))),
    # every rollout fails: success falls with it (groups that all succeed are mastery: test_healthy_runs)
    "zero_std_groups": lambda h: _after(h, _set(zero_std_group_frac=lambda r, k: min(1.0, 0.3 + 0.03 * k),
                                                success_rate=lambda r, k: max(0.0, 0.4 - 0.03 * k))),
    "length_growth": lambda h: _after(h, _set(response_length_mean=lambda r, k: 100.0 * (1 + 0.1 * k),
                                              truncated_frac=lambda r, k: min(0.9, 0.02 + 0.02 * k))),
    # answers shrink to a third of their early length while none were cut at the limit
    # shorter answers while success stalls (while it still climbs, concise answers are learning)
    "length_shrink": lambda h: _after(h, _set(response_length_mean=lambda r, k: max(20.0, 100.0 * 0.93 ** k),
                                              success_rate=0.4)),
    # the +1/-1 score falls from about -0.2 (0.4 on [0, 1]) to -0.9 (0.05) and stays there
    "score_collapse": lambda h: _after(h, _set(task_score=lambda r, k: -0.9 + 0.02 * math.sin(k))),
    "success_collapse": lambda h: _after(h, _set(success_rate=lambda r, k: max(0.0, 0.45 - 0.03 * k))),
    # the success rate drops to zero and stays there: the label's own conditions, 3 points on
    "collapse_floor": lambda h: _after(h, _set(success_rate=0.0)),
    "mismatch_drift": lambda h: _after(h, _set(mismatch_k3=lambda r, k: 0.0005 * 1.3 ** min(k, 25))),
    "retok_drift": lambda h: _after(h, _set(retok_mismatch_frac=lambda r, k: 0.02)),
}


def without(rows, *cols):
    return [{k: v for k, v in r.items() if k not in cols} for r in rows]


def nan_cols(rows, *cols):
    return [{k: (math.nan if k in cols else v) for k, v in r.items()} for r in rows]
