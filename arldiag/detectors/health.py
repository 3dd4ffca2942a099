"""Numerical health: grad-norm spikes and non-finite values."""
from __future__ import annotations

import math

import numpy as np

from arldiag.detectors.advice import LOWER_LR, Remedy, grad_clip
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.window import grade_above, prior_median


def grad_norm_spike_rule(w, state, p) -> Signal | None:
    x = w.series("grad_norm")
    cur = x[-1] if x.size else math.nan
    if math.isinf(cur):
        return Signal(3, cur, "grad_norm", "grad_norm is infinite")
    # steps with a zero gradient (every group without reward variance: no update) say nothing about its scale
    base = prior_median(np.where(x > 0, x, np.nan), 1, p["baseline_steps"], p["min_history"])
    if not (math.isfinite(cur) and math.isfinite(base)) or base <= 0:
        return None
    ratio = cur / base
    lv = grade_above(ratio, p["ratio_levels"])
    if not lv:
        return None
    return Signal(lv, cur, "grad_norm", f"grad_norm {cur:.3g} = {ratio:.1f}x the previous steps' median "
                                        f"{base:.3g}")


GRAD_NORM_SPIKE = Detector(
    name="grad_norm_spike",
    loop_role="off_policy", loop_priority=4,
    title="Gradient-norm spike",
    summary="The gradient norm (user metric grad_norm from record_step) jumps above its recent median.",
    rule_doc=("level = grade(grad_norm_t / prior_median(grad_norm), ratio_levels) with at least min_history prior "
              "steps; the baseline skips steps with a zero gradient (no group had reward variance: no update). An "
              "infinite grad_norm is critical."),
    remedies=(LOWER_LR, Remedy("add gradient clipping", grad_clip, "lower the gradient-norm clip ({has})"),
              Remedy("look at the step's top-KL and negative-advantage low-IS sequences")),
    inputs=("grad_norm",),
    rule=grad_norm_spike_rule,
    params=dict(baseline_steps=20, min_history=5, ratio_levels=(3.0, 6.0, 15.0)),
    explanation="The gradient norm (user metric grad_norm, before clipping) jumped far above its recent median. "
                "ARLArena's tolerant-clipping runs collapse with a grad-norm explosion.",
    recommendation="Lower the learning rate or the clip threshold of the gradient norm; look at the step's "
                   "top-KL and negative-advantage low-IS sequences.",
    source="ARLArena (finding 1)",
)

_USER_NUMERIC = ("grad_norm", "loss", "pg_loss")


def nonfinite_rule(w, state, p) -> Signal | None:
    bad_tok = w.last("nonfinite_tokens")
    n_tok = w.last("n_tokens")
    notes, lv = [], 0
    if math.isfinite(bad_tok) and bad_tok > 0:
        total = bad_tok + (n_tok if math.isfinite(n_tok) else 0.0)
        frac = bad_tok / total if total > 0 else 1.0
        lv = 3 if frac >= p["critical_token_frac"] else 2
        notes.append(f"{int(bad_tok)} masked tokens with NaN/Inf log-probs or advantages ({frac:.2%})")
    # A step without any policy update (n_updates == 0: e.g. dynamic filtering dropped every group) logs NaN for
    # its loss and grad norm: nothing was computed, nothing is broken.
    updated = w.last("n_updates") != 0
    for c in _USER_NUMERIC:
        v = w.last(c)
        seen = state.get("seen_" + c, False)
        if math.isinf(v) or (math.isnan(v) and seen and updated):
            # NaN only counts once the metric has been logged finite: before that NaN means "not recorded"
            lv = 3
            notes.append(f"{c} is {v}")
        if math.isfinite(v):
            state["seen_" + c] = True
    if not lv:
        return None
    return Signal(lv, bad_tok if math.isfinite(bad_tok) else math.nan, "nonfinite_tokens", "; ".join(notes))


NONFINITE = Detector(
    name="nonfinite",
    loop_role=("off_policy", "broken"), loop_priority=6,
    title="Non-finite values (NaN/Inf)",
    summary="NaN/Inf in the recorded log-probs or advantages, or in the logged loss / grad norm.",
    rule_doc=("warning when nonfinite_tokens > 0; critical when nonfinite_tokens / (n_tokens + nonfinite_tokens) >= "
              "critical_token_frac, or grad_norm / loss / pg_loss is Inf, or NaN after the metric had been finite "
              "(before that NaN means 'not logged', and a step without any update, n_updates = 0, logs NaN "
              "legitimately)."),
    remedies=(Remedy("clamp log-ratios before exp (+-20)"),
              Remedy("check the reward and advantage normalisation (std + eps)"),
              Remedy("look at the sequences listed in the evidence")),
    inputs=("nonfinite_tokens", "grad_norm", "loss"),
    columns=("n_tokens", "n_updates", "pg_loss"),
    rule=nonfinite_rule,
    params=dict(critical_token_frac=0.01),
    explanation="NaN or Inf appeared in the recorded log-probs/advantages or in the logged loss/grad norm. "
                "arldiag excludes such tokens from every aggregate, but the trainer probably does not.",
    recommendation="Clamp log-ratios before exp (±20), check the reward and advantage normalisation "
                   "(std + eps), and look at the sequences listed in the evidence.",
    source="ALGORITHMS.md (NaN/Inf must be detected, never averaged)",
    evidence_sql="nonfinite", evidence_where="nonfinite > 0",
)

DETECTORS = [GRAD_NORM_SPIKE, NONFINITE]
