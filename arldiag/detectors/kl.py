"""KL detectors: policy-update KL spike, reference-KL drift, KL concentration in the top 1 % of sequences.

k3 estimator (ALGORITHMS.md "KL estimators"): k3 = exp(x) - x - 1 >= 0. The policy-update KL (lp_old vs lp) spikes
at collapse in ARLArena's tolerant-clipping runs; verl's ppo_kl (k1) is the fallback for imported runs.
"""
from __future__ import annotations

import math

from arldiag.detectors.advice import (CORRECT_FROM_START, LOWER_LR, Remedy, grad_clip, kl_loss, nalis_mask,
                                      seq_clip)
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.context import outcome_of
from arldiag.detectors.window import (count_finite, early_baseline, first_available, grade_above, prior_median,
                                      running_min, tail_mean)


def _spike_level(x, p) -> tuple[int, float, float]:
    """(level, current value, ratio to the rolling median of the previous ``baseline_steps`` steps)."""
    cur = x[-1]
    base = prior_median(x, 1, p["baseline_steps"], p["min_history"])
    if not (math.isfinite(cur) and math.isfinite(base)):
        return 0, cur, math.nan
    ratio = cur / max(base, p["floor"])
    lv = grade_above(ratio, p["ratio_levels"]) if cur >= p["min_value"] else 0
    return lv, cur, ratio


def ppo_kl_spike_rule(w, state, p) -> Signal | None:
    # floor/min_value: with a few hundred tokens per step a k3 KL of 1e-4 jumps ten-fold by chance; a collapse
    # spike is orders of magnitude above 1e-3 nats/token (0.07 in the CISPO sample run)
    col = first_available(w, ("ppo_kl_k3", "ppo_kl"))
    if col is None:
        return None
    x = w.series(col)
    if col == "ppo_kl":
        x = abs(x)  # k1 can be negative; its magnitude is what spikes
    lv, cur, ratio = _spike_level(x, p)
    lv = max(lv, grade_above(cur, p["abs_levels"]))
    if not lv:
        return None
    return Signal(lv, cur, col, f"{col} {cur:.3g}" + (f" = {ratio:.1f}x the previous steps' median"
                                                       if math.isfinite(ratio) else ""))


PPO_KL_SPIKE = Detector(
    name="ppo_kl_spike",
    loop_role="off_policy", loop_priority=1,
    title="Policy-update KL spike",
    summary="The policy-update KL jumps above its recent level.",
    rule_doc=("x = ppo_kl_k3 = mean_t (r - log r - 1) (fallback |ppo_kl|, verl's k1). level = max(grade(x_t / "
              "max(prior_median(x), floor), ratio_levels) if x_t >= min_value and at least min_history prior steps, "
              "grade(x_t, abs_levels)). The floor keeps chance ten-fold jumps of a tiny KL (small batches) quiet."),
    remedies=(Remedy("inspect the top-KL sequences"), CORRECT_FROM_START, LOWER_LR,
              Remedy("add gradient clipping", grad_clip, "lower the gradient-norm clip ({has})"),
              Remedy("mask negative-advantage low-IS sequences", nalis_mask,
                 "tighten the negative-advantage low-IS mask ({has})")),
    inputs=("ppo_kl_k3", "ppo_kl"),
    rule=ppo_kl_spike_rule,
    params=dict(baseline_steps=20, min_history=5, floor=1e-3, min_value=2e-3, ratio_levels=(5.0, 15.0, 40.0),
                abs_levels=(0.1, 0.3, 1.0)),
    explanation="The KL between the behaviour policy and the updated policy jumped far above its recent level: "
                "one step moved the policy much more than the previous ones. ARLArena sees a KL spike together "
                "with the grad-norm explosion when tolerant-clipping runs collapse.",
    recommendation="Inspect the top-KL sequences; lower the learning rate, add gradient clipping, or mask "
                   "negative-advantage low-IS sequences.",
    source="ARLArena (finding 1); verl actor/ppo_kl; k3 estimator (Schulman)",
    evidence_sql="ppo_kl_k3_sum", evidence_where="true",
)


def kl_ref_drift_rule(w, state, p) -> Signal | None:
    x = w.series("kl_ref_k3")
    cur = tail_mean(x, p["smooth"])
    # the run's own early level: the lowest of its first baseline_steps values (frozen then). The absolute levels
    # count only once the KL grew past min_growth x that level: a KL that is high from the first step (another
    # reference, a warm start far from it) is not a drift, while one that explodes at step 2 still is
    if count_finite(state, "n", x[-1]) <= p["baseline_steps"]:
        running_min(state, "early", x[-1])
    base = state.get("early", math.nan)
    if not math.isfinite(cur):
        return None
    grown = cur / max(base, p["floor"]) if math.isfinite(base) else math.nan
    ctx = outcome_of(w)
    # at a high outcome near its peak (a converged run), a high KL is where learning took the policy: only recent
    # growth (the ratio below) counts, not the level (tiny TRL runs that mastered their task sat at 0.5-1.2 nats
    # with a steady reward of 0.95-1.0, "warning" on every step by the absolute levels alone)
    converged = ctx.converged(p["conv_keep"], p["conv_success"])
    lv = grade_above(cur, p["abs_levels"]) if grown >= p["min_growth"] and not converged else 0
    old = prior_median(x, p["lag"], p["lag"], 3)  # level ``lag`` steps ago
    ratio = math.nan
    if math.isfinite(old):
        ratio = cur / max(old, p["floor"])
        if cur >= p["min_value"]:
            lv = max(lv, grade_above(ratio, p["ratio_levels"]))
    if not lv:
        return None
    note = f"kl_ref_k3 {cur:.3g}" + (f" ({ratio:.1f}x its level {p['lag']} steps earlier" if math.isfinite(ratio)
                                     else " (") + (f", {grown:.1f}x its early level)" if math.isfinite(grown) else ")")
    if ctx.improving(p["improve_keep"], p["improve_rise"]) and lv < 3:
        # moving away from the reference while the outcome improves is what learning looks like
        lv -= p["learning_drop"]
        if lv <= 0:
            return None
        note += f"; weighed down: {ctx.describe()}"
    elif converged:
        note += f"; converged ({ctx.describe()}): only the growth counts"
    elif ctx.known:
        note += f"; {ctx.describe()}"
    return Signal(lv, cur, "kl_ref_k3", note)


KL_REF_DRIFT = Detector(
    name="kl_ref_drift",
    loop_role="off_policy", loop_priority=7,
    title="KL to the reference policy drifts up fast",
    summary="The k3 KL to the frozen reference grows several-fold within a few steps, or passes an absolute level.",
    rule_doc=("x = kl_ref_k3 = mean_t exp(d) - d - 1, d = lp_ref - lp. early = the lowest of the first baseline_steps "
              "values (frozen). level = max(grade(mean_k(x), abs_levels) if mean_k(x) >= min_growth x max(early, "
              "floor), grade(mean_k(x) / max(median of x over the lag steps before the last lag, floor), ratio_levels)"
              " if mean_k(x) >= min_value): a KL that is high from the first step is not a drift. **Learning**: below "
              "critical, the level drops by learning_drop while the outcome is improving (>= improve_keep x its peak, "
              "above its early level, and risen by >= improve_rise over the last 20 steps). **Converged**: while the "
              "outcome is >= conv_success and >= conv_keep x its peak, the absolute levels are off and only the growth"
              " over the lag counts (a high KL at a steady high outcome is where learning took the policy; tiny TRL "
              "runs that mastered their task sat at 0.5-1.2 nats, warning-level on every step by the level alone)."),
    param_docs={
        "learning_drop": "alert levels dropped (below critical) while the outcome improves (KL growth while learning)",
    },
    remedies=(Remedy("add a k3 KL loss to the reference (e.g. 0.01)", kl_loss, "raise the KL coefficient ({has})"),
              LOWER_LR, Remedy("check for reward hacking in the sequences with the highest kl_ref_k3")),
    inputs=("kl_ref_k3",),
    rule=kl_ref_drift_rule,
    # improve_*/learning_drop: below critical, the level drops by learning_drop while the outcome is within
    # improve_keep of its peak and rose by improve_rise over the last 20 steps; conv_*: while the outcome is at
    # least conv_success and within conv_keep of its peak, the absolute levels are off (entropy_collapse's values)
    params=dict(smooth=3, lag=10, floor=0.05, min_value=0.02, ratio_levels=(3.0, 6.0, 15.0),
                abs_levels=(0.2, 0.5, 1.5), baseline_steps=10, min_growth=2.0, improve_keep=0.9,
                improve_rise=0.05, learning_drop=2, conv_success=0.7, conv_keep=0.9),
    # floor/min_value: the KL to the reference starts at 0 and grows naturally early in RL; growth counts from
    # 0.05 nats/token on (with 0.01 the sample runs' ordinary first 20 steps, 0.01 -> 0.07, already read as a
    # six-fold runaway: sapo warned at step 16, 14 steps before anything happened)
    explanation="The k3 KL to the frozen reference grew several-fold within a few steps (or passed an absolute "
                "level): the policy is running away from the reference faster than the KL penalty holds it.",
    recommendation="Raise the KL coefficient, lower the learning rate, or check for reward hacking in the "
                   "sequences with the highest kl_ref_k3.",
    source="k3 estimator (verl low_var_kl); ARLArena SAMPO KL loss coef 0.01",
    evidence_sql="kl_ref_k3", evidence_where="kl_ref_k3 is not null",
)


def kl_concentration_rule(w, state, p) -> Signal | None:
    x = w.series("kl_top1pct_share")
    cur = tail_mean(x, p["smooth"])
    base = early_baseline(state, "kl_top1pct_share", x[-1], p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)):
        return None
    # when the policy barely moves, which few sequences carry the tiny KL is noise: require a KL worth a look
    kl = tail_mean(w.series("ppo_kl_k3"), p["smooth"])
    if math.isfinite(kl) and kl < p["min_kl"]:
        return None
    if cur < p["min_ratio"] * max(base, p["floor"]):
        return None
    lv = grade_above(cur, p["abs_levels"])
    if not lv:
        return None
    return Signal(lv, cur, "kl_top1pct_share",
                  f"top 1% of sequences carry {cur:.0%} of the policy-update KL (early level {base:.0%})")


KL_CONCENTRATION = Detector(
    name="kl_concentration",
    loop_role="off_policy", loop_priority=3,
    title="Policy-update KL concentrates in a few sequences",
    summary="A few sequences carry most of the step's policy-update KL.",
    rule_doc=("x = kl_top1pct_share (share of the step's k3 KL carried by the top 1 % of sequences). Fires when "
              "mean_k(x) >= min_ratio * max(base(x), floor) and mean_k(ppo_kl_k3) >= min_kl (when the policy barely "
              "moves, which few sequences carry the tiny KL is noise); level = grade(mean_k(x), abs_levels)."),
    remedies=(Remedy("read the top-KL sequences"),
              Remedy("mask or clip them at sequence level (GSPO, off-policy mask)", seq_clip,
                 "mask them (off-policy mask): {has} alone does not stop them")),
    inputs=("kl_top1pct_share",),
    columns=("ppo_kl_k3",),
    rule=kl_concentration_rule,
    # min_kl: a policy that barely moves (5-step mean k3 below 5e-3 nats/token) puts its tiny KL into a few tokens
    # by chance; in the sample runs that mean stays under 2.5e-3 on stable runs and passes 5e-3 only around real
    # trouble (0.018-0.058 before the CISPO collapses), while the top-1 % share swings 0.1 -> 0.9 step to step
    params=dict(smooth=5, baseline_steps=10, floor=0.02, min_ratio=1.5, min_kl=5e-3, abs_levels=(0.3, 0.5, 0.8)),
    explanation="A handful of sequences carry most of the step's k3 policy-update KL: the update is dominated by "
                "outliers (often negative-advantage low-IS sequences or retokenization artefacts).",
    recommendation="Read the top-KL sequences below; mask or clip them at sequence level (GSPO, off-policy mask).",
    source="ARLArena (KL share of negative-advantage low-IS sequences); Clip-Cov/KL-Cov (Cui et al.)",
    evidence_sql="ppo_kl_k3_sum", evidence_where="true",
)

DETECTORS = [PPO_KL_SPIKE, KL_REF_DRIFT, KL_CONCENTRATION]
