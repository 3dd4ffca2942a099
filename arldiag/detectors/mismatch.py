"""Training-inference mismatch and retokenization drift (ALGORITHMS.md "Training-inference mismatch")."""
from __future__ import annotations

import math

import numpy as np

from arldiag.detectors.advice import CORRECT_FROM_START, Remedy, token_in_token_out
from arldiag.detectors.base import Detector, Signal, strongest
from arldiag.detectors.window import (early_baseline, first_available, grade_above, growth_gated_level,
                                      tail_mean)


def _as_is(x: np.ndarray) -> np.ndarray:
    return x


def abs_to_k3(x: np.ndarray) -> np.ndarray:
    """A mean |d| (nats) on the k3 scale the thresholds are set on: k3(d) = exp(d) - d - 1 = d^2/2 + O(d^3), and for
    d ~ N(0, s^2) E|d| = s sqrt(2/pi), so E[k3] ~ s^2/2 = (pi/4) E|d|^2 (Gaussian second-order equivalence)."""
    return (math.pi / 4.0) * np.square(x)


# the series mismatch_drift reads, the most direct first, each with its map to the k3 scale: arldiag's own k3 (or a
# trainer's, verl rollout_corr/k3_kl), chi2_token, then the mean |lp_old - lp_roll| TRL and slime log
MISMATCH_SERIES = {"mismatch_k3": _as_is, "mismatch_chi2": _as_is, "mismatch_log_abs_mean": abs_to_k3,
                   "mismatch_log_abs_seq_mean": abs_to_k3}


def mismatch_drift_rule(w, state, p) -> Signal | None:
    col = first_available(w, tuple(MISMATCH_SERIES))
    if col is None:
        return None
    raw = w.series(col)
    x = MISMATCH_SERIES[col](raw)
    cur = tail_mean(x, p["smooth"])
    base = early_baseline(state, col, x[-1], p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)) or cur < p["min_value"]:
        return None
    # a constant engine/trainer offset (precision, kernels) is a known bias, not drift: only growth counts
    lv, ratio = growth_gated_level(cur, base, p, "abs_levels")
    lv = max(lv, grade_above(ratio, p["ratio_levels"]))
    if not lv:
        return None
    shown = f"{tail_mean(raw, p['smooth']):.3g}" + ("" if MISMATCH_SERIES[col] is _as_is else
                                                    f" nats (k3-equivalent {cur:.3g})")
    note = f"{col} {shown} ({ratio:.1f}x its early level)"
    mx = w.last("mismatch_log_abs_max")
    if math.isfinite(mx):
        note += f"; max |lp_old - lp_roll| {mx:.2f} nats"
    masked = w.last("mismatch_masked_frac")
    if math.isfinite(masked):
        note += f"; {masked:.2%} of tokens masked for their mismatch"
    return Signal(lv, cur, col, note)


MISMATCH_DRIFT = Detector(
    name="mismatch_drift",
    title="Training-inference mismatch drifts",
    summary="The training-inference mismatch (rollout engine vs trainer log-probs) grows.",
    rule_doc=("x = mismatch_k3 = mean_t exp(d) - d - 1, d = lp_old - lp_roll (fallbacks: mismatch_chi2 = E[rho^2] - 1; "
              "a logged token-mean |d| m, TRL's sampling/sampling_logp_difference/mean or slime's per-sample mean, as "
              "its k3 equivalent (pi/4) m^2, since k3 = d^2/2 + O(d^3) and E|d| = s sqrt(2/pi) for d ~ N(0, s^2)). "
              "level = max(grade(mean_k(x), abs_levels) if ratio >= min_growth, grade(ratio, ratio_levels)) with ratio"
              " = mean_k(x) / max(base(x), floor), when mean_k(x) >= min_value (a constant offset is a known bias, not"
              " drift). Batch evidence: the sequences and stored tokens with the largest |lp_old - lp_roll|."),
    remedies=(CORRECT_FROM_START, Remedy("masked IS (IcePop: drop tokens whose ratio is outside [0.5, 5])"),
              Remedy("align engine and trainer precision/kernels"),
              Remedy("check the sequences with the largest mismatch")),
    inputs=tuple(MISMATCH_SERIES),
    columns=("mismatch_log_abs_max", "mismatch_masked_frac"),
    rule=mismatch_drift_rule,
    params=dict(smooth=3, baseline_steps=10, floor=1e-4, min_value=1e-3, min_growth=1.5, abs_levels=(0.02, 0.05, 0.2),
                ratio_levels=(4.0, 10.0, 30.0)),
    explanation="The KL between the rollout engine's log-probs and the trainer's recomputed log-probs grew: the "
                "samples are more off-policy than the IS ratios show, which biases the gradient.",
    recommendation="Use truncated IS (TIS, C = 2) or masked IS (IcePop, [0.5, 5]); align engine and trainer "
                   "precision/kernels; check the sequences with the largest mismatch.",
    source="verl rollout correction (TIS/MIS); ALGORITHMS.md mismatch k3 and chi2",
    evidence_sql="mismatch_log_abs_max", evidence_where="mismatch_log_abs_max is not null",
    token_evidence_sql="abs(logp_old - logp_rollout)",
)


def retok_drift_rule(w, state, p) -> Signal | None:
    parts = []
    fr = tail_mean(w.series("retok_mismatch_frac"), p["smooth"])
    if math.isfinite(fr):
        parts.append((grade_above(fr, p["frac_levels"]), fr, "retok_mismatch_frac",
                      f"{fr:.2%} of tokens differ between rollout and trainer ids"))
    # isolated huge |lp_roll - lp_old| tokens while the bulk mismatch is small: the AT2PO retokenization signature
    mx, k3 = w.last("mismatch_log_abs_max"), w.last("mismatch_k3")
    if math.isfinite(mx) and (not math.isfinite(k3) or k3 < p["bulk_k3_max"]):
        parts.append((grade_above(mx, p["isolated_levels"]), mx, "mismatch_log_abs_max",
                      f"isolated token with |lp_old - lp_roll| = {mx:.1f} nats while mismatch_k3 is small"))
    return strongest(parts)


RETOK_DRIFT = Detector(
    name="retok_drift",
    title="Retokenization drift",
    summary="The trainer optimises token ids the engine never sampled (AT2PO retokenization drift).",
    rule_doc=("level = max(grade(mean_k(retok_mismatch_frac), frac_levels), grade(mismatch_log_abs_max_t, "
              "isolated_levels) while mismatch_k3 < bulk_k3_max): id mismatches, or an isolated token with a huge "
              "|lp_old - lp_roll| while the bulk mismatch is small. Batch evidence: sequences with id mismatches and "
              "the top stored tokens."),
    remedies=(Remedy("pass token ids through (token-in-token-out) instead of re-tokenizing text between turns",
                 token_in_token_out, "the run passes token ids through ({has}), so check the chat "
                                     "template and the turn boundaries for re-encoded text"),),
    inputs=("retok_mismatch_frac", "mismatch_log_abs_max"),
    columns=("mismatch_k3",),
    rule=retok_drift_rule,
    # frac_levels: token-in-token-out makes the mismatch exactly 0, so a lasting 0.1 % of differing ids (one token
    # in a thousand trained on ids the sampler never produced) is already a pipeline fault worth a warning; the
    # planted retokenization of the calculator run differs on 0.14-0.85 % of its tokens, which was only "watch"
    # with the earlier warning level of 1 %
    params=dict(smooth=3, frac_levels=(2e-4, 1e-3, 0.05), bulk_k3_max=0.01, isolated_levels=(8.0, 12.0, 1e9)),
    explanation="The trainer optimises token ids the rollout engine never sampled (decode -> re-tokenize gives "
                "different ids), visible as id mismatches and isolated tokens with a huge |lp_roll - lp_old|, "
                "often at turn boundaries (AT2PO).",
    recommendation="Pass token ids through (token-in-token-out) instead of re-tokenizing text between turns.",
    source="AT2PO (retokenization drift)",
    evidence_sql="greatest(coalesce(retok_mismatch, 0), 0) * 100 + coalesce(mismatch_log_abs_max, 0)",
    evidence_where="retok_mismatch > 0 or mismatch_log_abs_max > 5",
    token_evidence_sql=("abs(logp_old - logp_rollout) + 100 * (token_id_rollout >= 0 and token_id <> token_id_rollout)"
                        "::INT"),
)

DETECTORS = [MISMATCH_DRIFT, RETOK_DRIFT]
