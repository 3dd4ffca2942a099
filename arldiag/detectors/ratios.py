"""Importance-ratio detectors: negative-advantage low-IS accumulation and clip pressure.

ARLArena (../shared/seeds, ALGORITHMS.md "What collapse looks like" 3): before a tolerant-clipping run collapses,
sequences with negative advantage and a low IS ratio accumulate, tokens outside the clip band grow sharply (mostly
at the lower bound of negative-advantage sequences) and these sequences' share of the policy-update KL jumps.
"""
from __future__ import annotations

import math

from arldiag.detectors.advice import CORRECT_FROM_START, LOWER_LR, Remedy, nalis_mask, seq_clip
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.window import (early_baseline, first_available, grade_above, growth_gated_level, slope,
                                      tail_mean, tail_median)


def _nalis_level(w, state, p, col: str):
    """(level, smoothed fraction, ratio to its early baseline, smoothed KL share) for one definition of the set."""
    x = w.series(col)
    level_now = tail_mean(x, p["smooth"])                       # smoothed fraction of the step's sequences
    base = early_baseline(state, col, x[-1], p["baseline_steps"])
    share_col = col.replace("_frac", "_kl_share")
    share = tail_mean(w.series(share_col), p["smooth"])
    share_base = early_baseline(state, share_col, w.last(share_col), p["baseline_steps"])
    if not (math.isfinite(level_now) and math.isfinite(base)):
        return 0, level_now, math.nan, share
    # accumulation is growth: with a tight sequence band (GSPO eps 3e-3) a stable run can sit at a high constant
    # fraction, so the absolute level counts only once the fraction has grown past min_growth x its early level
    lv, ratio = growth_gated_level(level_now, base, p, "frac_levels")
    if slope(x, p["trend_steps"]) > 0:
        lv = max(lv, grade_above(ratio, p["ratio_levels"]))
    share_jump = (math.isfinite(share) and share >= p["kl_share_min"]
                  and (not math.isfinite(share_base) or share >= p["kl_share_ratio"] * share_base))
    if lv and share_jump:
        lv = min(3, lv + 1)  # the KL of the step is concentrating in these sequences: the ARLArena signature
    return lv, level_now, ratio, share


def neg_adv_low_is_rule(w, state, p) -> Signal | None:
    # Two definitions of the set are recorded: the sequence band (s_i < 1 - seq_eps_low; empty for CISPO, whose
    # eps_low is 1) and the mask's delta (s_i < exp(-delta)). Either one accumulating counts; the stronger wins.
    best = None
    for col in ("neg_adv_low_is_frac", "neg_adv_low_is_delta_frac"):
        lv, level_now, ratio, share = _nalis_level(w, state, p, col)
        if lv and (best is None or lv > best[0]):
            best = (lv, level_now, ratio, share, col)
    if best is None:
        return None
    lv, level_now, ratio, share, col = best
    note = f"{col} {level_now:.3f} ({ratio:.1f}x its early baseline)"
    if math.isfinite(share):
        note += f", KL share {share:.2f}"
    return Signal(lv, level_now, col, note)


NEG_ADV_LOW_IS = Detector(
    name="neg_adv_low_is",
    loop_role="off_policy", loop_priority=0,
    title="Negative-advantage low-IS sequences accumulate",
    summary="Sequences with a negative advantage and a low sequence IS ratio accumulate (ARLArena finding 3).",
    rule_doc=("frac = neg_adv_low_is_frac = #{i: A_i < 0 and s_i < 1 - seq_eps_low} / #sequences, and the delta "
              "variant neg_adv_low_is_delta_frac (s_i < exp(-delta), the mask's set; the band is empty for CISPO, "
              "eps_low = 1): the rule below runs on both and the stronger level wins; share = neg_adv_low_is_kl_share "
              "= their share of the step's k3 policy-update KL. With ratio = mean_k(frac) / max(base(frac), floor): "
              "level = max(grade(mean_k(frac), frac_levels) if ratio >= min_growth, grade(ratio, ratio_levels) if the "
              "least-squares slope of frac over trend_steps is > 0) (the absolute level needs growth because a tight "
              "sequence band, GSPO eps 3e-3, can hold a stable run at a high constant fraction); +1 level when "
              "mean_k(share) >= kl_share_min and >= kl_share_ratio * base(share)."),
    remedies=(
        CORRECT_FROM_START,
        Remedy("mask negative-advantage low-IS sequences (SAMPO / DeepSeek-V3.2 off-policy mask, delta 0.05-0.223)",
               nalis_mask, "tighten the negative-advantage low-IS mask ({has}: a smaller delta masks more)"),
        Remedy("switch to sequence-level clipping (GSPO)", seq_clip, None),
        Remedy("use fewer mini-batches per step (less off-policy)")),
    dimension="advantage_design",
    inputs=("neg_adv_low_is_frac", "neg_adv_low_is_delta_frac"),
    columns=("neg_adv_low_is_kl_share", "neg_adv_low_is_delta_kl_share"),
    rule=neg_adv_low_is_rule,
    params=dict(smooth=3, baseline_steps=10, trend_steps=10, floor=0.02, min_growth=1.5, frac_levels=(0.25, 0.4, 0.6),
                ratio_levels=(2.5, 4.0, 8.0), kl_share_min=0.5, kl_share_ratio=1.5),
    explanation="The fraction of sequences with a negative advantage and a sequence IS ratio below the clip band "
                "is growing. ARLArena finds these sequences drive collapse of tolerant-clipping losses "
                "(CISPO, SAPO): their share of the policy-update KL jumps just before the collapse.",
    recommendation="Mask negative-advantage low-IS sequences (SAMPO / DeepSeek-V3.2 off-policy mask, delta "
                   "0.05-0.223), or switch to sequence-level clipping (GSPO); fewer mini-batches per step also "
                   "reduce off-policyness.",
    source="ARLArena (finding 3); DeepSeek-V3.2 off-policy sequence masking",
    evidence_sql="ppo_kl_k3_sum", evidence_where="neg_adv_low_is",
)


def clip_pressure_rule(w, state, p) -> Signal | None:
    col = first_available(w, ("tok_oob_frac", "pg_clipfrac", "clip_ratio_region_mean"))
    if col is None:
        return None
    x = w.series(col)
    # pressure is a level that lasts: the median of the last ``smooth`` steps (for 3: what two of them reach). A
    # mean would stretch one step with many tokens outside the band over three steps; one step is ppo_kl_spike's
    # business (on tiny TRL runs at lr 5e-2 that mastered their task, such single steps every 15-25 steps held
    # clip_pressure at warning for 3 steps each: docs/detectors.md "Outcome context")
    cur = tail_median(x, p["smooth"])
    base = early_baseline(state, col, x[-1], p["baseline_steps"])
    if not (math.isfinite(cur) and math.isfinite(base)):
        return None
    # with a tight token band (GSPO/ATPO eps 3e-3) most tokens sit outside it in a stable run: only growth counts
    lv, ratio = growth_gated_level(cur, base, p, "abs_levels")
    lv = max(lv, grade_above(ratio, p["ratio_levels"]))
    if not lv:
        return None
    note = f"{col} {cur:.3f} ({ratio:.1f}x its early baseline)"
    low_neg = tail_mean(w.series("tok_oob_low_neg_frac"), p["smooth"])
    if col == "tok_oob_frac" and cur > 0 and math.isfinite(low_neg):
        note += f"; {low_neg / cur:.0%} of it at the lower bound with A < 0"
    seq = tail_mean(w.series("seq_oob_low_neg_frac"), p["smooth"])
    if math.isfinite(seq):
        note += f"; sequences below the band with A < 0: {seq:.3f}"
    return Signal(lv, cur, col, note)


CLIP_PRESSURE = Detector(
    name="clip_pressure",
    loop_role="off_policy", loop_priority=2,
    title="Tokens outside the clip band grow (clip pressure)",
    summary="Tokens outside the clip band [1-eps_low, 1+eps_high] grow far above their early level.",
    rule_doc=("x = tok_oob_frac (tokens with r_t outside the band and A != 0; fallback verl pg_clipfrac, then TRL "
              "clip_ratio_region_mean). With ratio = median_k(x) / max(base(x), floor): level = max(grade(median_k(x),"
              " abs_levels) if ratio >= min_growth, grade(ratio, ratio_levels)) (a tight band keeps a stable run at a "
              "high constant level). The median, not the mean: pressure is a level that lasts (two of the last three "
              "steps reach it); a mean stretched one step with half the tokens outside the band over three steps of "
              "warning on tiny TRL runs that had mastered their task (one step is `ppo_kl_spike`'s business). The note"
              " splits it by bound and advantage sign (tok_oob_low_neg_frac ...) and gives the sequence-level "
              "seq_oob_low_neg_frac: ARLArena sees the rise mostly at the lower bound with A < 0."),
    remedies=(LOWER_LR, Remedy("use fewer mini-batches per step"),
              Remedy("use sequence-level clipping (GSPO)", seq_clip, None),
              Remedy("mask negative-advantage low-IS sequences", nalis_mask, None)),
    dimension="is_clipping",
    inputs=("tok_oob_frac", "pg_clipfrac", "clip_ratio_region_mean"),
    columns=("tok_oob_low_neg_frac", "tok_oob_low_pos_frac", "tok_oob_high_neg_frac", "tok_oob_high_pos_frac",
             "seq_oob_low_neg_frac", "seq_oob_high_pos_frac"),
    rule=clip_pressure_rule,
    params=dict(smooth=3, baseline_steps=10, floor=0.01, min_growth=1.5, abs_levels=(0.3, 0.45, 0.6),
                ratio_levels=(3.0, 5.0, 10.0)),
    explanation="The share of tokens whose IS ratio lies outside [1-eps_low, 1+eps_high] rose far above its "
                "early level: the policy moves faster than the clip band allows. ARLArena sees this rise, mostly "
                "at the lower bound of negative-advantage sequences, before tolerant-clipping runs collapse.",
    recommendation="Lower the learning rate or the number of mini-batches per step; use sequence-level clipping "
                   "(GSPO) or mask negative-advantage low-IS sequences.",
    source="ARLArena (finding 3); verl pg_clipfrac; TRL clip_ratio",
    evidence_sql="tok_oob_low_frac + tok_oob_high_frac", evidence_where="true",
)

DETECTORS = [NEG_ADV_LOW_IS, CLIP_PRESSURE]
