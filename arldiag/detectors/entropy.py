"""Entropy detectors: collapse (with the sign of Cov(lp, A) as early signal) and blow-up.

Cui et al. (ALGORITHMS.md "Entropy dynamics"): entropy change is driven by the token covariance
Cov(lp, A) = mean_t (lp_t - mean lp)(A_t - mean A); a sustained positive covariance predicts entropy collapse.
"""
from __future__ import annotations

import math

import numpy as np

from arldiag.detectors.advice import CLIP_HIGH_DOWN, ENTROPY_BONUS_OFF, LOWER_LR, Remedy, clip_higher, grad_clip
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.context import outcome_of
from arldiag.detectors.window import early_baseline, grade_above, grade_below, move_baseline, slope, tail_mean


def entropy_collapse_rule(w, state, p) -> Signal | None:
    h = w.series("entropy")
    cur = tail_mean(h, p["smooth"])
    base = early_baseline(state, "entropy", h[-1], p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)) or base <= 0:
        return None
    frac = cur / base
    lv = grade_below(frac, p["frac_levels"])
    cov = w.series("cov_logp_adv")[-p["cov_steps"]:]
    cov = cov[np.isfinite(cov)]
    early = (cov.size >= p["cov_steps"] // 2 and float((cov > 0).mean()) >= p["cov_pos_share"]
             and slope(h, p["cov_steps"]) < 0 and frac <= p["early_frac"])
    if early:
        lv = max(lv, 1)  # Cui et al.: sustained Cov(lp, A) > 0 while entropy falls -> collapse ahead
    if not lv:
        return None
    ctx = outcome_of(w)
    if ctx.converged(p["conv_keep"], p["conv_success"]):
        return None  # low entropy at a high, steady success: the policy converged, it did not collapse
    note = f"entropy {cur:.3g} = {frac:.0%} of its early level"
    if cov.size:
        note += f"; Cov(lp, A) > 0 on {float((cov > 0).mean()):.0%} of the last {cov.size} steps"
    if ctx.known:
        note += f"; {ctx.describe()}"
    return Signal(lv, cur, "entropy", note)


ENTROPY_COLLAPSE = Detector(
    name="entropy_collapse",
    title="Entropy collapse",
    summary=("Token entropy falls to a small fraction of its early level; a sustained positive Cov(lp, A) is the early"
             " sign (Cui et al.)."),
    rule_doc=("f = mean_k(entropy) / base(entropy); level = grade_below(f, frac_levels). At least watch when "
              "cov_logp_adv > 0 on >= cov_pos_share of the last cov_steps steps while the entropy slope is negative "
              "and f <= early_frac. **Converged run**: quiet while the outcome (see \"Outcome context\") is >= "
              "conv_success and >= conv_keep x its peak: low entropy at a high, steady success is convergence."),
    remedies=(Remedy("use Clip-Cov / KL-Cov on the top-covariance tokens"),
              Remedy("raise eps_high (clip-higher, DAPO 0.28)", clip_higher, None),
              Remedy("add an entropy bonus"), Remedy("check the advantage normalisation")),
    inputs=("entropy",),
    columns=("cov_logp_adv",),
    rule=entropy_collapse_rule,
    # conv_*: quiet while the outcome is at least conv_success and within conv_keep of its peak (a converged run:
    # entropy 0.63 -> 0.01 at a steady success of 0.93 is not a collapse)
    params=dict(smooth=5, baseline_steps=10, frac_levels=(0.35, 0.2, 0.08), cov_steps=10, cov_pos_share=0.8,
                early_frac=0.7, conv_success=0.7, conv_keep=0.9),
    explanation="Token entropy fell to a small fraction of its early level; the policy is becoming "
                "deterministic and stops exploring. A sustained positive Cov(logp, A) is the early sign "
                "(Cui et al.): confident tokens keep getting positive advantage.",
    recommendation="Use Clip-Cov / KL-Cov on the top-covariance tokens, clip-higher (DAPO eps_high 0.28), or an "
                   "entropy bonus; check the advantage normalisation.",
    source="Cui et al., The Entropy Mechanism of RL for Reasoning LMs; DAPO clip-higher",
)


def entropy_blowup_rule(w, state, p) -> Signal | None:
    h = w.series("entropy")
    cur = tail_mean(h, p["smooth"])
    base = early_baseline(state, "entropy", h[-1], p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)) or base <= 0:
        return None
    lv = grade_above(cur / base, p["ratio_levels"])
    if not lv:
        return None
    if lv < 3 and outcome_of(w).climbing(p["improve_keep"], p["improve_rise"], p["improve_z"]):
        # more exploration while the outcome still climbs (clip-higher runs): learning, below critical, and the
        # entropy it has then is the reference from now on
        move_baseline(state, "entropy", cur)
        return None
    return Signal(lv, cur, "entropy", f"entropy {cur:.3g} = {cur / base:.1f}x its early level")


ENTROPY_BLOWUP = Detector(
    name="entropy_blowup",
    loop_role=("off_policy", "entropy"), loop_priority=5,
    title="Entropy blow-up",
    summary="Token entropy rises well above its early level (drift towards uniform, garbled text).",
    rule_doc=("level = grade(mean_k(entropy) / base(entropy), ratio_levels); below critical, quiet while the outcome "
              "climbs (within improve_keep of its peak, up by improve_rise and by improve_z noise sds of the rise over"
              " the trend span, to a peak set within that span: exploration, as clip-higher intends), and the entropy "
              "reached then becomes base(entropy)."),
    remedies=(ENTROPY_BONUS_OFF, CLIP_HIGH_DOWN, LOWER_LR,
              Remedy("check for non-finite gradients and negative-advantage low-IS sequences"),
              Remedy("add gradient clipping", grad_clip, "lower the gradient-norm clip ({has})")),
    inputs=("entropy",),
    rule=entropy_blowup_rule,
    # improve_*: below critical, quiet while the outcome is within improve_keep of its peak and rose by improve_rise
    # and by improve_z of the rise's noise sds over the trend span (entropy that grows while the score climbs is
    # exploration, as clip-higher intends); the entropy reached then becomes the reference
    params=dict(smooth=3, baseline_steps=10, ratio_levels=(1.5, 2.0, 3.0), improve_keep=0.9, improve_rise=0.1,
                improve_z=2.0),
    explanation="Token entropy rose well above its early level: the policy is drifting towards uniform, usually "
                "with garbled text and invalid formats, as in ARLArena's collapsed runs.",
    recommendation="Lower the learning rate; check for non-finite gradients, negative-advantage low-IS "
                   "sequences and an exploding grad norm.",
    source="ARLArena (finding 1); Cui et al.",
    evidence_sql="entropy_mean", evidence_where="entropy_mean is not null",
)

DETECTORS = [ENTROPY_COLLAPSE, ENTROPY_BLOWUP]
