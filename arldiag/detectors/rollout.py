"""Rollout-side detectors: format-validity collapse, zero-variance groups, response length growth and truncation,
and reward/success collapse (the lagging outcome signal that also defines the collapse label)."""
from __future__ import annotations

import math

from arldiag.aliases import TASK_SCORE
from arldiag.detectors.advice import (LOWER_LR, MASK_TRUNCATED, Remedy, dynamic_filter, format_penalty, gigpo, kl_loss,
                                      nalis_mask, token_mean)
from arldiag.detectors.base import Detector, Signal, strongest
from arldiag.detectors.context import REWARD_COLUMN, outcome_of
from arldiag.detectors.window import (count_finite, early_baseline, first_available, grade_above, grade_below,
                                      move_baseline,
                                      running_max, running_min, tail_mean)

SUCCESS_COLUMNS = ("success_rate", "success_frac", "success")


def _drop_from_peak(w, state, p, col) -> tuple[int, float, float]:
    """(level, smoothed value, running peak of the smoothed value): falls below fractions of the peak."""
    x = w.series(col)
    cur = tail_mean(x, p["smooth"])
    n = count_finite(state, "n_" + col, x[-1])
    if n < p["smooth"]:  # the peak is taken over full smoothing windows only
        return 0, cur, math.nan
    peak = running_max(state, "peak_" + col, cur)
    if n < p["warmup"] or not (math.isfinite(cur) and math.isfinite(peak)) or peak < p["min_peak"]:
        return 0, cur, peak
    return grade_below(cur / peak, p["frac_levels"]), cur, peak


def format_collapse_rule(w, state, p) -> Signal | None:
    lv, cur, peak = _drop_from_peak(w, state, p, "format_valid_frac")
    if not lv:
        return None
    return Signal(lv, cur, "format_valid_frac", f"valid-format ratio {cur:.2f} (peak {peak:.2f})")


FORMAT_COLLAPSE = Detector(
    name="format_collapse",
    loop_role="broken", loop_priority=1,
    title="Valid-format ratio collapses",
    summary="The valid-format ratio falls well below its peak (ARLArena: it drops to ~0 at collapse).",
    rule_doc=("level = grade_below(mean_k(format_valid_frac) / peak(format_valid_frac), frac_levels) once the peak >= "
              "min_peak and at least warmup steps were seen (peaks are taken over full smoothing windows only)."),
    remedies=(Remedy("check the response texts of the latest step"),
              Remedy("add a format penalty for unparseable actions", format_penalty,
                 "keep the format penalty ({has})"), LOWER_LR,
              Remedy("mask negative-advantage low-IS sequences", nalis_mask, None)),
    inputs=("format_valid_frac",),
    rule=format_collapse_rule,
    params=dict(smooth=5, warmup=10, min_peak=0.3, frac_levels=(0.75, 0.5, 0.25)),
    explanation="The share of responses that parse as a valid action fell well below its peak. In ARLArena's "
                "collapsed runs the valid-format ratio drops to ~0 together with success.",
    recommendation="Check the response texts of the latest step; keep the format penalty, lower the learning "
                   "rate, mask negative-advantage low-IS sequences.",
    source="ARLArena (finding 1)",
)


def zero_std_groups_rule(w, state, p) -> Signal | None:
    x = w.series("zero_std_group_frac")
    cur = tail_mean(x, p["smooth"])
    n = count_finite(state, "n", x[-1])
    if n < p["smooth"]:
        return None
    low = running_min(state, "min", cur)
    if n < p["warmup"] or not (math.isfinite(cur) and math.isfinite(low)) or cur - low < p["min_rise"]:
        return None
    # an all-fail group needs every one of its rollouts to fail, so all-fail groups are at most the share 1 - s of
    # failed trajectories: min(x, 1 - s) bounds the starved share. Groups that agree because every rollout
    # succeeds are mastery, not starvation.
    col = first_available(w, ("success_frac", "success_rate"))
    s = tail_mean(w.series(col), p["smooth"]) if col else math.nan
    ctx = outcome_of(w)
    if col is None and ctx.source in (REWARD_COLUMN, TASK_SCORE) and ctx.known:
        # a reward (or task score) on [0, 1] bounds the all-zero groups the same way: their share z gives
        # mean <= 1 - z
        col, s = ctx.source, ctx.level
    starved = min(cur, 1.0 - s) if math.isfinite(s) else cur
    lv = grade_above(starved, p["levels"])
    if not lv:
        return None
    note = f"{cur:.0%} of groups have identical returns (lowest so far {low:.0%})"
    if math.isfinite(s):
        what = {REWARD_COLUMN: "mean reward", TASK_SCORE: "task score"}.get(col, "success")
        note += f"; {what} {s:.2f}, so at most {starved:.0%} of groups fail throughout"
    return Signal(lv, starved, "zero_std_group_frac", note)


ZERO_STD_GROUPS = Detector(
    name="zero_std_groups",
    title="Groups without reward variance grow",
    summary="More groups have identical returns for all rollouts: no GRPO signal (TRL frac_reward_zero_std).",
    rule_doc=("x = mean_k(zero_std_group_frac); fires when x - running_min(x) >= min_rise after warmup steps; level = "
              "grade(min(x, 1 - s), levels) with s = mean_k(success_frac, else success_rate), else the outcome "
              "context's mean reward when it is in [0, 1] (all-zero groups z then give mean <= 1 - z, the same bound)."
              " The rise condition keeps the all-fail cold start quiet. An all-fail group needs all its rollouts to "
              "fail, so the all-fail share is at most 1 - s: groups that agree because every rollout succeeds are "
              "**mastery**, not starvation."),
    remedies=(Remedy("use dynamic sampling (DAPO)", dynamic_filter, None),
              Remedy("use a fine-grained advantage (GiGPO)", gigpo, None),
              Remedy("use harder or easier tasks"),
              Remedy("check the success rate to tell collapse from saturation")),
    dimension="dynamic_filtering",
    inputs=("zero_std_group_frac",),
    columns=("success_frac", "success_rate"),
    rule=zero_std_groups_rule,
    params=dict(smooth=8, warmup=10, min_rise=0.3, levels=(0.7, 0.85, 0.95)),
    explanation="More and more groups have identical returns for all rollouts, so group-relative advantages are "
                "zero and carry no learning signal (TRL frac_reward_zero_std). A rise after training started "
                "usually means all rollouts fail (collapse) or all succeed (saturation).",
    recommendation="Use dynamic sampling (DAPO) with a fine-grained advantage (GiGPO), or harder/easier tasks; "
                   "check the success rate to tell collapse from saturation.",
    source="DAPO dynamic sampling; TRL frac_reward_zero_std; ARLArena finding 5",
)


def length_growth_rule(w, state, p) -> Signal | None:
    parts = []
    x = w.series("response_length_mean")
    cur = tail_mean(x, p["smooth"])
    base = early_baseline(state, "len", x[-1] if x.size else math.nan, p["baseline_steps"])
    if math.isfinite(cur) and math.isfinite(base) and base > 0:
        lv = grade_above(cur / base, p["ratio_levels"])
        note = f"mean response length {cur:.0f} = {cur / base:.1f}x its early level"
        ctx = outcome_of(w)
        if lv > 1 and ctx.near_peak(p["healthy_keep"]):
            # longer answers while the outcome holds its best: reasoning that grows with the reward, as in
            # DeepSeek-R1-Zero and DAPO's training curves, is learning; at most watch (the cap is the other part)
            lv, note = 1, f"{note}; {ctx.describe()}"
        parts.append((lv, cur, "response_length_mean", note))
    t = w.series("truncated_frac")
    tr = tail_mean(t, p["smooth"])
    n_tr = count_finite(state, "n_trunc", t[-1])
    tr_low = running_min(state, "trunc_min", tr) if n_tr >= p["smooth"] else math.nan
    # the rise counts from the higher of the lowest level so far and the early level: a run that starts at the
    # length cap (an untrained model that rambles) and learns to stop has not "grown" when it drifts back up
    tr_base = early_baseline(state, "trunc", t[-1], p["baseline_steps"])
    if math.isfinite(tr_base) and math.isfinite(tr_low):
        tr_low = max(tr_low, tr_base)
    if n_tr >= p["warmup"] and math.isfinite(tr) and math.isfinite(tr_low) and tr - tr_low >= p["trunc_min_rise"]:
        parts.append((grade_above(tr, p["trunc_levels"]), tr, "truncated_frac", f"{tr:.0%} of responses truncated"))
    return strongest(parts)


LENGTH_GROWTH = Detector(
    name="length_growth",
    loop_role="length",
    title="Response length growth and truncation",
    summary="Responses grow much longer than early in training, or hit the length limit more often.",
    rule_doc=("level = max(grade(mean_k(response_length_mean) / base(response_length_mean), ratio_levels), "
              "grade(mean_k(truncated_frac), trunc_levels) if it rose >= trunc_min_rise above the higher of its "
              "running minimum and its early level (a run that starts at the length cap and learns to stop has not "
              "grown when it drifts back up)); the mean-length part stays at watch while the outcome is within "
              "healthy_keep of its peak (reasoning that grows with the reward)."),
    param_docs={
        "healthy_keep": "the length part stays at watch while the outcome is within this share of its peak",
    },
    remedies=(MASK_TRUNCATED, Remedy("use an overlong penalty (DAPO)"),
              Remedy("use token-mean loss aggregation", token_mean, None),
              Remedy("read the longest responses")),
    dimension="loss_aggregation",
    inputs=("response_length_mean", "truncated_frac"),
    rule=length_growth_rule,
    # healthy_keep: the length part stays at watch while the outcome is within healthy_keep of its peak
    params=dict(smooth=5, warmup=10, baseline_steps=10, ratio_levels=(1.75, 2.5, 4.0), trunc_min_rise=0.05,
                trunc_levels=(0.15, 0.3, 0.6), healthy_keep=0.9),
    explanation="Responses got much longer than early in training or hit the length limit more often; "
                "repetition loops and truncated (invalid) answers often precede a format collapse.",
    recommendation="Use an overlong penalty (DAPO), token-mean loss aggregation, and read the longest responses.",
    source="DAPO (overlong reward shaping); verl response_length/clip_ratio",
    evidence_sql="response_length", evidence_where="response_length is not null",
)


def length_shrink_rule(w, state, p) -> Signal | None:
    x = w.series("response_length_mean")
    cur = tail_mean(x, p["smooth"])
    base = early_baseline(state, "len", x[-1] if x.size else math.nan, p["baseline_steps"])
    t = w.series("truncated_frac")
    trunc0 = early_baseline(state, "trunc", t[-1] if t.size else math.nan, p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)) or base <= 0:
        return None
    if math.isfinite(trunc0) and trunc0 > p["trunc_max"]:
        return None  # it started at the length cap: getting shorter is learning to stop, not a collapse
    lv = grade_below(cur / base, p["frac_levels"])
    if not lv:
        return None
    if lv < 3 and outcome_of(w).climbing(p["improve_keep"], p["improve_rise"], p["improve_z"]):
        # shorter answers while the score still climbs: the policy learns to be concise (verl's GSM8K example:
        # 234 -> 155 tokens as the score rises 0.01 -> 0.6); that length is the reference from now on
        move_baseline(state, "len", cur)
        return None
    return Signal(lv, cur, "response_length_mean",
                  f"mean response length {cur:.0f} = {cur / base:.0%} of its early level {base:.0f}")


LENGTH_SHRINK = Detector(
    name="length_shrink",
    title="Responses shrink",
    summary="Responses become much shorter than early in training, while few were cut at the length limit then.",
    rule_doc=("level = grade_below(mean_k(response_length_mean) / base(response_length_mean), frac_levels), quiet when"
              " the early level of `truncated_frac` exceeds trunc_max (a run that starts at the cap and learns to "
              "stop); below critical, quiet while the outcome climbs (as `entropy_blowup`: answers that get concise as"
              " the score rises), and the length reached then becomes base(response_length_mean)."),
    param_docs={
        "trunc_max": "quiet when the early share of truncated responses was above this",
    },
    remedies=(Remedy("read the shortest responses and check the reward for a shortcut that scores without "
                 "reasoning"), LOWER_LR,
              Remedy("keep a KL loss to the reference (verl actor_rollout_ref.actor.use_kl_loss=True, TRL beta)",
                 kl_loss, None)),
    dimension="loss_aggregation",
    inputs=("response_length_mean",),
    columns=("truncated_frac",),
    rule=length_shrink_rule,
    # improve_*: below critical, quiet while the outcome is within improve_keep of its peak and rose by
    # improve_rise and by improve_z of the rise's noise sds over the trend span (as entropy_blowup), and the
    # length it has then becomes the reference
    params=dict(smooth=5, baseline_steps=10, trunc_max=0.3, frac_levels=(0.6, 0.5, 0.3), improve_keep=0.9,
                improve_rise=0.1, improve_z=2.0),
    explanation="Responses became much shorter than early in training although few were cut at the length limit "
                "then: the policy is learning to answer without reasoning (or with an empty answer), which the "
                "reward soon punishes. A run that starts at the length cap and learns to stop is not flagged.",
    recommendation="Read the shortest responses; check the reward for a shortcut (an answer-only or empty "
                   "completion that scores); lower the learning rate; keep a length floor or KL to the reference.",
    source="real development runs (TRL GRPO rho sweep: 230 -> 110 tokens 25 steps before the collapse)",
    evidence_sql="-response_length", evidence_where="response_length is not null",
)


def success_collapse_rule(w, state, p) -> Signal | None:
    col = first_available(w, SUCCESS_COLUMNS)
    if col is None:
        return None
    lv, cur, peak = _drop_from_peak(w, state, p, col)
    if not lv:
        return None
    return Signal(lv, cur, col, f"{col} {cur:.2f} (peak {peak:.2f})")


SUCCESS_COLLAPSE = Detector(
    name="success_collapse",
    loop_role="broken", loop_priority=0,
    title="Reward / success collapse",
    summary="The lagging outcome: the success rate falls well below its peak. Also the basis of the collapse label.",
    rule_doc=("x = success_rate (user metric; fallback success_frac). level = grade_below(mean_k(x) / peak(x), "
              "frac_levels) once the peak >= min_peak and at least warmup steps were seen. It counts towards the risk "
              "like any detector, so a run is at least in warning once it has collapsed; the leading detectors above "
              "are meant to fire first."),
    remedies=(Remedy("roll back to the last checkpoint before the first warning and apply the leading "
                 "detectors' recommendations"),),
    inputs=SUCCESS_COLUMNS,
    rule=success_collapse_rule,
    params=dict(smooth=10, warmup=10, min_peak=0.2, frac_levels=(0.5, 0.25, 0.1)),
    explanation="The success rate fell well below its peak. This is the lagging outcome: by the time it fires "
                "the run has collapsed; the leading detectors above should have fired earlier.",
    recommendation="Roll back to the last checkpoint before the first warning and apply the leading detectors' "
                   "recommendations.",
    source="ARLArena (finding 1); label rule in docs/detectors.md",
    lagging=True,
)

DETECTORS = [FORMAT_COLLAPSE, ZERO_STD_GROUPS, LENGTH_GROWTH, LENGTH_SHRINK, SUCCESS_COLLAPSE]
