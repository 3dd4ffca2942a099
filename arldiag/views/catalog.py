"""The catalog of metric labels and panels both UIs read: what a step metric is called on screen, which columns
hold it in a run (arldiag's own name first, then the names verl / TRL users log), and which metrics each panel of
the report's timeline and of the dashboard's views stacks.

A signal lists candidate column names: arldiag's own name first (schema.STEP_METRICS), then the names verl / TRL
users log through record_step or `arldiag import` (e.g. ``actor/entropy``). The first candidate with at least one
finite value in the run is the one shown, so imported step-only runs render the same panels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Signal:
    key: str                       # stable name used in JSON output and tests
    label: str                     # legend text
    candidates: tuple[str, ...]    # column names in the steps view, preferred first


@dataclass(frozen=True)
class Panel:
    title: str
    signals: tuple[Signal, ...]
    log_y: bool = False


S = Signal
# The list: success, valid-format ratio, KL, grad norm, entropy, clip fractions, neg-adv low-IS frac + share.
TIMELINE: tuple[Panel, ...] = (
    Panel("Task score", (  # the success rate, or the task score a real run logs on its own scale
        S("success", "success rate / task score", ("success_rate", "success_frac", "env/success_rate",
                                                   "episode/success_rate", "val/success_rate", "success",
                                                   "task_score")),
        S("val_score", "validation score", ("val_score",)),
    )),
    Panel("Reward", (  # its own panel: returns can be far from the [0, 1] of the success rate
        S("reward", "reward mean", ("reward_mean", "critic/rewards/mean", "critic/score/mean", "reward")),
    )),
    Panel("Valid-format ratio", (
        S("format_valid", "valid format", ("format_valid_frac", "format_valid_rate", "format_valid",
                                           "valid_format_ratio")),
    )),
    Panel("KL", (
        S("ppo_kl", "ppo_kl (k1, update)", ("ppo_kl", "actor/ppo_kl")),
        S("ppo_kl_k3", "ppo_kl_k3 (update)", ("ppo_kl_k3",)),
        S("kl_ref_k3", "kl_ref_k3 (to reference)", ("kl_ref_k3", "actor/kl_loss", "kl_ref", "kl")),
    )),
    Panel("Grad norm", (
        S("grad_norm", "grad norm", ("grad_norm", "actor/grad_norm", "grad_norm_before_clip")),
    ), log_y=True),
    Panel("Entropy", (
        S("entropy", "entropy", ("entropy", "actor/entropy", "entropy_mean", "policy/entropy")),
    )),
    Panel("Clip fractions", (
        S("pg_clipfrac", "pg_clipfrac", ("pg_clipfrac", "actor/pg_clipfrac")),
        S("pg_clipfrac_lower", "pg_clipfrac_lower (dual clip)", ("pg_clipfrac_lower", "actor/pg_clipfrac_lower")),
        S("clip_low_neg", "tokens r<1-eps, A<0", ("tok_oob_low_neg_frac", "clip_ratio_low_mean",
                                                  "clip_ratio/low_mean")),
        S("clip_high_pos", "tokens r>1+eps, A>0", ("tok_oob_high_pos_frac", "clip_ratio_high_mean",
                                                   "clip_ratio/high_mean")),
        S("seq_low_neg", "sequences s<1-eps, A<0", ("seq_oob_low_neg_frac",)),
    )),
    Panel("Negative-advantage low-IS", (
        S("nalis_frac", "neg-adv low-IS fraction", ("neg_adv_low_is_frac",)),
        S("nalis_kl_share", "their KL share", ("neg_adv_low_is_kl_share",)),
        S("nalis_delta_frac", "fraction (delta rule)", ("neg_adv_low_is_delta_frac",)),
        S("nalis_masked", "masked by the trainer", ("nalis_masked_frac", "neg_adv_low_is_masked_frac")),
    )),
)

# Signals of the detail sections (mismatch, entropy dynamics, turns, ARLArena dimensions).
DETAIL: tuple[Signal, ...] = (
    S("mismatch_k3", "mismatch k3", ("mismatch_k3",)),
    S("mismatch_k1", "mismatch k1", ("mismatch_k1",)),
    S("mismatch_chi2", "mismatch chi2", ("mismatch_chi2",)),
    S("mismatch_log_abs_max", "max |lp_old - lp_roll|", ("mismatch_log_abs_max",)),
    S("mismatch_prob_abs_mean", "mean |p_old - p_roll|", ("mismatch_prob_abs_mean",
                                                           "training/rollout_probs_diff_mean")),
    # the mismatch trainers log (schema.py "logged" metrics: TRL sampling/*, verl rollout_corr/*, slime)
    S("mismatch_log_abs_mean", "mean |lp_old - lp_roll|", ("mismatch_log_abs_mean",)),
    S("mismatch_log_abs_seq_mean", "per-sequence mean |lp_old - lp_roll|", ("mismatch_log_abs_seq_mean",)),
    S("mismatch_chi2_seq", "mismatch chi2 (sequence)", ("mismatch_chi2_seq",)),
    S("mismatch_log_ppl_abs_diff", "|log ppl difference|", ("mismatch_log_ppl_abs_diff",)),
    S("mismatch_is_mean", "IS weight mean", ("mismatch_is_mean",)),
    S("mismatch_is_min", "IS weight min", ("mismatch_is_min",)),
    S("mismatch_is_max", "IS weight max", ("mismatch_is_max",)),
    S("mismatch_is_high_frac", "IS ratio above threshold", ("mismatch_is_high_frac",)),
    S("mismatch_is_low_frac", "IS ratio below threshold", ("mismatch_is_low_frac",)),
    S("mismatch_masked_frac", "masked for mismatch", ("mismatch_masked_frac",)),
    S("retok_mismatch_frac", "retokenization mismatch fraction", ("retok_mismatch_frac",)),
    S("cov_logp_adv", "Cov(logp, A)", ("cov_logp_adv",)),
    S("turn_entropy_mean", "turn entropy H_turn", ("turn_entropy_mean",)),
    S("turn_ratio_min", "min turn ratio", ("turn_ratio_min",)),
    S("turn_ratio_max", "max turn ratio", ("turn_ratio_max",)),
    S("turn_oob_low_frac", "turns below band", ("turn_oob_low_frac",)),
    S("turn_oob_high_frac", "turns above band", ("turn_oob_high_frac",)),
    S("response_length_mean", "response length", ("response_length_mean", "response_length/mean")),
    S("truncated_frac", "truncated fraction", ("truncated_frac", "response_length/clip_ratio")),
    S("adv_zero_frac", "A == 0 fraction", ("adv_zero_frac",)),
    S("adv_neg_frac", "A < 0 fraction", ("adv_neg_frac",)),
    S("adv_pos_frac", "A > 0 fraction", ("adv_pos_frac",)),
    S("adv_std", "advantage std", ("adv_std",)),
    S("zero_std_group_frac", "zero-variance groups", ("zero_std_group_frac", "frac_reward_zero_std")),
    S("group_reward_std_mean", "within-group return std", ("group_reward_std_mean",)),
    S("tok_oob_frac", "tokens out of band", ("tok_oob_frac",)),
    S("tok_oob_low_pos_frac", "tokens r<1-eps, A>0", ("tok_oob_low_pos_frac",)),
    S("tok_oob_high_neg_frac", "tokens r>1+eps, A<0", ("tok_oob_high_neg_frac",)),
    S("seq_oob_high_pos_frac", "sequences s>1+eps, A>0", ("seq_oob_high_pos_frac",)),
    S("kl_top1pct_share", "KL share of top 1% sequences", ("kl_top1pct_share",)),
    S("nalis_count", "neg-adv low-IS count", ("neg_adv_low_is_count",)),
    S("nalis_delta_kl_share", "KL share (delta rule)", ("neg_adv_low_is_delta_kl_share",)),
    S("lr", "learning rate", ("lr", "actor/lr")),
)

ALL_SIGNALS: tuple[Signal, ...] = tuple(s for p in TIMELINE for s in p.signals) + DETAIL
BY_KEY: dict[str, Signal] = {s.key: s for s in ALL_SIGNALS}


def resolve(signals: Sequence[Signal], columns_with_data: set[str]) -> dict[str, str]:
    """signal key -> the first candidate column that holds data; signals without data are left out.

    A user metric logged under a name arldiag derives itself (e.g. ``entropy`` from an imported CSV) appears in the
    steps view as ``user/<name>``; it is tried right after the derived column."""
    out: dict[str, str] = {}
    for s in signals:
        for c in s.candidates:
            hit = c if c in columns_with_data else (f"user/{c}" if f"user/{c}" in columns_with_data else None)
            if hit is not None:
                out[s.key] = hit
                break
    return out


# Step columns a trainer logs through record_step (the Collector cannot derive them from token rows); every other
# column a panel reads is one of schema.STEP_METRICS (tests/views checks this, so a renamed metric cannot leave a
# panel silently empty)
TRAINER_LOGGED = ("grad_norm", "lr", "success_rate", "task_score", "val_score", "nalis_masked_frac")


def label(column: str) -> str:
    """The on-screen name of a step column: the label of the first signal that reads it, else the column itself."""
    return _LABELS.get(column, _LABELS.get(column.removeprefix("user/"), column))


def _labels() -> dict[str, str]:
    out: dict[str, str] = {}
    for s in ALL_SIGNALS:
        for c in s.candidates:
            out.setdefault(c, s.label)
    return out


_LABELS = _labels()


# ---------------------------------------------------------------- the dashboard's views --------------------------
# The dashboard plots step columns under their own names (a live run is read by the people who named them); each
# view is a list of (panel title, step columns).
# The outcome leads every view: the success rate of arldiag's own runs, or the task score a real run logs on its
# own scale (arldiag.aliases: critic/score/mean, the reward, an accuracy) and its validation score
SCORE_PANEL = ("task score (success rate, or the logged task score and validation score on their scale)",
               ["success_rate", "success_frac", "task_score", "val_score"])

DASHBOARD_PANELS: dict[str, list[tuple[str, list[str]]]] = {
    "overview": [
        ("format_valid_frac", ["format_valid_frac"]),
        ("ppo_kl: policy-update KL k1", ["ppo_kl"]),
        ("kl_ref_k3: KL to the reference", ["kl_ref_k3"]),
        ("grad_norm", ["grad_norm"]),
        ("entropy", ["entropy"]),
        ("response length mean", ["response_length_mean"]),
        ("truncated fraction (responses at the length limit)", ["truncated_frac"]),
    ],
    "clipping": [
        ("token ratio outside the band, by bound and advantage sign",
         ["tok_oob_low_neg_frac", "tok_oob_low_pos_frac", "tok_oob_high_neg_frac", "tok_oob_high_pos_frac"]),
        ("sequence ratio outside the band",
         ["seq_oob_low_neg_frac", "seq_oob_low_pos_frac", "seq_oob_high_neg_frac", "seq_oob_high_pos_frac"]),
        ("verl pg_clipfrac / dual-clip pg_clipfrac_lower", ["pg_clipfrac", "pg_clipfrac_lower"]),
        ("sequence ratio s_i: min / mean / max", ["seq_ratio_min", "seq_ratio_mean", "seq_ratio_max"]),
    ],
    "kl": [
        ("policy-update KL: k1 ppo_kl, k3", ["ppo_kl", "ppo_kl_k3"]),
        ("KL to the reference: k1 / k2 / k3", ["kl_ref_k1", "kl_ref_k2", "kl_ref_k3"]),
        ("negative-advantage low-IS: fraction, KL share; top-1% KL share",
         ["neg_adv_low_is_frac", "neg_adv_low_is_kl_share", "kl_top1pct_share"]),
        ("training-inference mismatch: k1 / k3 / chi2", ["mismatch_k1", "mismatch_k3", "mismatch_chi2"]),
        ("mismatch extremes: max |lp_old - lp_roll|, max |p_old - p_roll|",
         ["mismatch_log_abs_max", "mismatch_prob_abs_max"]),
        ("p_old / p_roll Pearson correlation", ["mismatch_prob_corr"]),
        ("retokenization mismatch fraction", ["retok_mismatch_frac"]),
    ],
    "advantages": [
        ("groups with zero reward std (no GRPO signal)", ["zero_std_group_frac"]),
        ("advantage sign fractions", ["adv_pos_frac", "adv_neg_frac", "adv_zero_frac"]),
        ("reward mean / std / mean within-group std", ["reward_mean", "reward_std", "group_reward_std_mean"]),
        ("token advantage mean / std", ["adv_mean", "adv_std"]),
    ],
    "entropy": [
        ("entropy", ["entropy"]),
        ("Cov(logp, A) (sustained > 0 predicts entropy collapse)", ["cov_logp_adv"]),
        ("mean logp", ["logp_mean"]),
        ("response length mean / max", ["response_length_mean", "response_length_max"]),
        ("truncated fraction", ["truncated_frac"]),
    ],
    "turns": [
        ("ATPO turn ratio s_ik: min / max", ["turn_ratio_min", "turn_ratio_max"]),
        ("turns outside the band", ["turn_oob_low_frac", "turn_oob_high_frac"]),
        ("AT2PO turn entropy H_turn", ["turn_entropy_mean"]),
    ],
}


DASHBOARD_PANELS = {view: [SCORE_PANEL] + panels for view, panels in DASHBOARD_PANELS.items()}


def metrics_of(view: str) -> list[str]:
    """The step columns a dashboard view reads, in panel order, once each."""
    return list(dict.fromkeys(m for _, ms in DASHBOARD_PANELS[view] for m in ms))
