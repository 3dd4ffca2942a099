"""The run store schema: the one contract between the write wing and the read wing.

Every stored column is declared here once, with its Arrow type and its glossary entry (docs/schema.md is checked
against this module by tests/test_docs.py). Step metrics are *derived* from mergeable raw aggregates (sums,
counts, maxima) so that updates inside a step and ranks of a data-parallel job combine exactly: a step metric is
never a mean of means. The same derivation runs in two evaluators: SQL (``steps`` view, store/reader.py) and
Python (``derive_step_metrics``, used online by the Collector/Monitor).

Formulas: ../shared/spec/ALGORITHMS.md (verl/TRL metric definitions, KL estimators, mismatch, ARLArena).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import pyarrow as pa

from arldiag.levels import LEVELS, SEVERITIES

SCHEMA_VERSION = "1.0"  # major.minor; readers refuse a newer major, read any older one
TABLES = ("tokens", "sequences", "turns", "groups", "steps", "alerts", "actions")
USER_METRIC_PREFIX = "m/"  # user metrics from record_step(metrics=...) are stored as "m/<name>" in raw step files

F32, F64, I16, I32, I64, BOOL, STR = pa.float32(), pa.float64(), pa.int16(), pa.int32(), pa.int64(), pa.bool_(), pa.string()


@dataclass(frozen=True)
class Col:
    name: str
    type: pa.DataType
    doc: str
    unit: str = ""


# ---------------------------------------------------------------- per-row tables ---------------------------------
_KEYS = [
    Col("step", I64, "training step (one rollout batch and its policy updates)"),
    Col("update", I32, "policy update inside the step: PPO epoch x mini-batch index, 0-based"),
    Col("rank", I32, "data-parallel rank that wrote the row"),
]

TOKENS = _KEYS + [
    Col("sample_id", I64, "stable id of the sample (one response: a turn's response or a whole trajectory)"),
    Col("pos", I32, "token position in the padded [B, T] response row"),
    Col("turn", I16, "turn index of the token inside its trajectory (-1 if unknown)"),
    Col("token_id", I32, "token id the trainer optimised (-1 if not given)"),
    Col("token_id_rollout", I32, "token id the rollout engine sampled at this position (-1 if not given)"),
    Col("logp", F32, "log-prob under the policy being updated (lp)", "nats"),
    Col("logp_old", F32, "log-prob under the behaviour policy as recomputed by the trainer (lp_old)", "nats"),
    Col("logp_rollout", F32, "log-prob reported by the rollout engine (lp_roll); null if not given", "nats"),
    Col("logp_ref", F32, "log-prob under the frozen reference policy; null if not given", "nats"),
    Col("entropy", F32, "entropy of the full next-token distribution; null if not given", "nats"),
    Col("advantage", F32, "advantage A of the token (per-sample advantages broadcast over tokens)"),
    Col("log_ratio", F32, "lp - lp_old, clamped to +-20 (log of the token IS ratio r_t)", "nats"),
    Col("sampled", BOOL, "true: kept by the deterministic hash sample (unbiased); false: kept only because its "
                         "sequence is anomalous (non-finite, negative-advantage low-IS, top-KL)"),
]

SEQUENCES = _KEYS + [
    Col("sample_id", I64, "stable id of the sample; the same id across tables"),
    Col("group_id", I64, "group (task) id for group-relative advantages; -1 if not given"),
    Col("trajectory_id", I64, "episode id the sample belongs to (step-wise multi-turn training); -1 if not given"),
    Col("turn", I16, "turn index when the sample is one turn of a trajectory; -1 when tokens carry their own turns"),
    Col("n_tokens", I32, "number of masked (policy-generated) tokens |y_i|", "tokens"),
    Col("advantage", F32, "mean advantage over the sample's masked tokens"),
    Col("seq_log_ratio", F32, "(1/|y_i|) sum_t m_t (lp - lp_old): log of the GSPO sequence ratio", "nats"),
    Col("seq_ratio", F32, "GSPO sequence IS ratio s_i = exp(seq_log_ratio)"),
    Col("log_ratio_min", F32, "min over tokens of lp - lp_old", "nats"),
    Col("log_ratio_max", F32, "max over tokens of lp - lp_old", "nats"),
    Col("tok_oob_low_frac", F32, "fraction of the sample's tokens with r_t < 1 - eps_low"),
    Col("tok_oob_high_frac", F32, "fraction of the sample's tokens with r_t > 1 + eps_high"),
    Col("ppo_kl", F32, "mean over tokens of lp_old - lp (k1 policy-update KL)", "nats"),
    Col("ppo_kl_k3_sum", F32, "sum over tokens of r - log r - 1 (k3 policy-update KL); its share of the batch "
                              "total is the sample's KL contribution", "nats"),
    Col("kl_ref_k3", F32, "mean k3 KL to the reference, exp(x) - x - 1 with x = lp_ref - lp clamped to +-10; "
                          "null without logp_ref", "nats"),
    Col("mismatch_k1", F32, "mean of lp_roll - lp_old (training-inference mismatch); null without logp_rollout",
        "nats"),
    Col("mismatch_log_abs_max", F32, "max over tokens of |lp_old - lp_roll|; null without logp_rollout", "nats"),
    Col("seq_mismatch_ratio", F32, "sequence geometric mismatch exp(mean_t (lp_old - lp_roll)); verl accepts "
                                   "0.999-1.001"),
    Col("entropy_mean", F32, "mean token entropy; null if not given", "nats"),
    Col("logp_mean", F32, "mean lp over the sample's tokens", "nats"),
    Col("neg_adv_low_is", BOOL, "ARLArena set: advantage < 0 and seq_ratio < 1 - eps_low (sequence band)"),
    Col("neg_adv_low_is_delta", BOOL, "advantage < 0 and mean(lp_old - lp) > delta, i.e. seq_ratio < exp(-delta) "
                                      "(the mask of ALGORITHMS.md; delta = manifest neg_adv_delta)"),
    Col("nonfinite", I32, "number of the sample's masked tokens with a NaN/Inf input (excluded from aggregates)"),
    Col("retok_mismatch", I32, "tokens whose trainer id differs from the rollout engine's id (retokenization "
                               "drift); -1 when ids were not given to both hooks"),
    Col("n_turns", I16, "number of turns among the sample's tokens (1 for a per-turn sample)"),
    Col("turn_entropy", F32, "AT2PO turn entropy H_turn: normalised entropy of the softmax over turns of "
                             "(turn sum of lp - lp_old)/(sequence sum); 0 for single-turn samples"),
    Col("reward", F32, "reward of the sample from record_rollout; null if not given"),
    Col("format_valid", BOOL, "the response parsed as a valid action; null if not given"),
    Col("truncated", BOOL, "the response hit the length limit; null if not given"),
    Col("success", BOOL, "the sample's episode solved the task; null if not given"),
    Col("response_length", I32, "masked response tokens at rollout time; null if not given", "tokens"),
    Col("text", STR, "decoded response text if given to record_rollout(texts=...); null otherwise"),
]

TURNS = _KEYS + [
    Col("sample_id", I64, "sample the turn belongs to"),
    Col("turn", I16, "turn index k inside the trajectory"),
    Col("n_tokens", I32, "masked tokens of the turn", "tokens"),
    Col("advantage", F32, "mean advantage over the turn's tokens"),
    Col("turn_log_ratio", F32, "mean over the turn's tokens of lp - lp_old", "nats"),
    Col("turn_ratio", F32, "ATPO turn IS ratio s_{i,k} = exp(turn_log_ratio)"),
    Col("mismatch_log_abs_max", F32, "max |lp_old - lp_roll| over the turn's tokens; null without logp_rollout",
        "nats"),
    Col("retok_mismatch", I32, "trainer/rollout token-id differences in the turn; -1 when unknown"),
]

GROUPS = [
    Col("step", I64, "training step"),
    Col("rank", I32, "rank that wrote the row"),
    Col("group_id", I64, "group (task) id"),
    Col("n_samples", I32, "samples of the group in the rollout"),
    Col("n_trajectories", I32, "distinct trajectories of the group (= n_samples without trajectory ids)"),
    Col("reward_mean", F32, "mean return of the group's trajectories (sum of their samples' rewards)"),
    Col("reward_std", F32, "population std of those returns"),
    Col("zero_std", BOOL, "all returns equal: the group carries no GRPO signal (DAPO dynamic sampling drops it)"),
    Col("success_frac", F32, "fraction of the group's trajectories that succeeded; null without success"),
    Col("format_valid_frac", F32, "fraction of the group's samples with a valid format; null if not given"),
]

ALERTS = [
    Col("step", I64, "step at which the alert was raised"),
    Col("time", pa.timestamp("us", tz="UTC"), "wall-clock time the alert was raised"),
    Col("detector", STR, "name of the detector (see docs/detectors.md)"),
    Col("severity", STR, " | ".join(SEVERITIES)),
    Col("state", STR, "alert state of the run after this alert: " + " | ".join(LEVELS)),
    Col("risk", F64, "collapse risk in [0, 1] at this step"),
    Col("title", STR, "one-line summary"),
    Col("message", STR, "plain-language explanation and recommendation"),
    Col("evidence", STR, "JSON evidence (series values, top sequences)"),
    Col("source", STR, "online (in the training process) | watch (arldiag watch) | detect"),
]

# What --auto-stabilize did (arldiag.stabilize): one row per applied action, with what triggered it.
ACTIONS = [
    Col("step", I64, "step after which the action was applied (it acts from the next step on)"),
    Col("time", pa.timestamp("us", tz="UTC"), "wall-clock time the action was applied"),
    Col("action", STR, "nalis_mask | clip | seq_clip | lr_scale | rollback | stop (docs: README, Auto-stabilize)"),
    Col("params", STR, "JSON parameters as applied (e.g. {\"factor\": 0.5, \"lr\": 1e-4}, {\"to_step\": 35})"),
    Col("detector", STR, "the finding (detector name) that triggered the action"),
    Col("state", STR, "alert state of the run when the action was taken: " + " | ".join(LEVELS)),
    Col("risk", F64, "collapse risk in [0, 1] at that step"),
    Col("reason", STR, "the policy's one-line reason"),
    Col("policy", STR, "the policy that proposed it (registered name or module:function)"),
    Col("outcome", STR, "JSON of what changed in the trainer: before / after values"),
    Col("evidence", STR, "JSON: the triggering finding (level, metric, value), every firing finding, the alert"),
]


# ---------------------------------------------------------------- step aggregates --------------------------------
@dataclass(frozen=True)
class Agg:
    """A raw, mergeable per-step aggregate, stored per (step, rank) in steps/ files."""
    name: str
    merge: str  # "sum" | "max" | "min"
    doc: str


def _s(name: str, doc: str) -> Agg:
    return Agg(name, "sum", doc)


STEP_AGGS: list[Agg] = [
    Agg("n_updates", "max", "policy updates recorded in the step (per rank; max over ranks)"),
    # token level, over masked finite tokens of all updates of the step
    _s("n_tok", "masked finite tokens"),
    _s("sum_ratio", "sum r_t"),
    _s("sum_log_ratio", "sum (lp - lp_old)"),
    _s("sum_log_ratio_sq", "sum (lp - lp_old)^2"),
    Agg("max_abs_log_ratio", "max", "max |lp - lp_old|"),
    _s("sum_ppo_kl", "sum (lp_old - lp)"),
    _s("sum_ppo_kl_k3", "sum (r - log r - 1)"),
    _s("n_pg_clip", "tokens where verl's clipped term is active"),
    _s("n_pg_clip_lower", "tokens where verl's dual-clip bound is active"),
    _s("n_tok_low_neg", "tokens with r < 1-eps_low and A < 0"),
    _s("n_tok_low_pos", "tokens with r < 1-eps_low and A > 0"),
    _s("n_tok_high_neg", "tokens with r > 1+eps_high and A < 0"),
    _s("n_tok_high_pos", "tokens with r > 1+eps_high and A > 0"),
    _s("sum_logp", "sum lp"),
    _s("sum_adv_tok", "sum A over tokens"),
    _s("sum_adv_tok_sq", "sum A^2 over tokens"),
    _s("sum_logp_adv", "sum lp * A over tokens"),
    _s("n_tok_ref", "tokens with a finite lp_ref"),
    _s("sum_kl_ref_k1", "sum (lp - lp_ref)"),
    _s("sum_kl_ref_k2", "sum 0.5 (lp_ref - lp)^2"),
    _s("sum_kl_ref_k3", "sum exp(x) - x - 1, x = clamp(lp_ref - lp, +-10)"),
    _s("n_tok_mis", "tokens with a finite lp_roll"),
    _s("sum_mis_k1", "sum (lp_roll - lp_old)"),
    _s("sum_mis_k3", "sum exp(d) - d - 1, d = lp_old - lp_roll"),
    _s("sum_mis_rho_sq", "sum rho^2, rho = exp(d)"),
    _s("sum_mis_prob_abs", "sum |p_old - p_roll|"),
    Agg("max_mis_prob_abs", "max", "max |p_old - p_roll|"),
    Agg("max_mis_abs_log", "max", "max |lp_old - lp_roll|"),
    _s("sum_p_old", "sum p_old"),
    _s("sum_p_roll", "sum p_roll"),
    _s("sum_p_old_sq", "sum p_old^2"),
    _s("sum_p_roll_sq", "sum p_roll^2"),
    _s("sum_p_old_p_roll", "sum p_old p_roll"),
    _s("n_tok_ent", "tokens with a finite entropy"),
    _s("sum_entropy", "sum H_t"),
    _s("n_tok_retok", "tokens whose trainer and rollout ids were both given"),
    _s("n_tok_retok_mismatch", "of those, tokens whose ids differ"),
    _s("n_nonfinite_tok", "masked tokens with a NaN/Inf input"),
    _s("n_nonfinite_seq", "sequences with at least one such token"),
    # sequence level, over sequence rows of all updates
    _s("n_seq", "sequence rows (sample x update)"),
    _s("n_seq_adv_pos", "sequences with mean A > 0"),
    _s("n_seq_adv_neg", "sequences with mean A < 0"),
    _s("n_seq_adv_zero", "sequences with mean A == 0"),
    _s("sum_seq_ratio", "sum s_i"),
    _s("sum_seq_log_ratio", "sum log s_i"),
    _s("sum_seq_log_ratio_sq", "sum (log s_i)^2"),
    Agg("min_seq_ratio", "min", "min s_i"),
    Agg("max_seq_ratio", "max", "max s_i"),
    _s("n_seq_low_neg", "sequences with s_i < 1-seq_eps_low and A < 0"),
    _s("n_seq_low_pos", "sequences with s_i < 1-seq_eps_low and A > 0"),
    _s("n_seq_high_neg", "sequences with s_i > 1+seq_eps_high and A < 0"),
    _s("n_seq_high_pos", "sequences with s_i > 1+seq_eps_high and A > 0"),
    _s("n_nalis", "negative-advantage low-IS sequences (band)"),
    _s("sum_nalis_ppo_kl_k3", "k3 policy-update KL summed over their tokens"),
    _s("n_nalis_delta", "negative-advantage low-IS sequences (delta)"),
    _s("sum_nalis_delta_ppo_kl_k3", "k3 policy-update KL summed over their tokens"),
    _s("n_turn", "turn rows"),
    _s("n_turn_low", "turns with s_ik < 1-seq_eps_low"),
    _s("n_turn_high", "turns with s_ik > 1+seq_eps_high"),
    Agg("min_turn_ratio", "min", "min s_ik"),
    Agg("max_turn_ratio", "max", "max s_ik"),
    _s("n_seq_multiturn", "sequences with more than one turn"),
    Agg("kl_top_share", "max", "share of the step's k3 policy-update KL carried by the top 1% of sequences "
                               "(ceil(1%) of them, at least 1), computed per rank; max over ranks"),
    _s("sum_turn_entropy", "sum of H_turn over those"),
    # rollout level, from record_rollout
    _s("n_roll", "rollout samples"),
    _s("n_roll_reward", "rollout samples with a reward"),
    _s("sum_reward", "sum of sample rewards"),
    _s("sum_reward_sq", "sum of squared sample rewards"),
    _s("n_format_known", "samples with format validity given"),
    _s("n_format_valid", "samples with a valid format"),
    _s("n_trunc_known", "samples with truncation given"),
    _s("n_truncated", "truncated samples"),
    _s("n_resp_len", "samples with a response mask"),
    _s("sum_resp_len", "sum of response lengths"),
    Agg("max_resp_len", "max", "longest response"),
    Agg("min_resp_len", "min", "shortest response"),
    _s("n_traj", "distinct trajectories with success given"),
    _s("n_traj_success", "of those, successful"),
    _s("n_groups", "groups in the rollout"),
    _s("n_groups_zero_std", "groups whose returns all agree"),
    _s("sum_group_reward_std", "sum of group return stds"),
]
STEP_AGG_NAMES = [a.name for a in STEP_AGGS]


@dataclass(frozen=True)
class Metric:
    """A step metric derived from raw aggregates. kind:
    sum(a) | mean(nums, den, scale=1, offset=0) = scale*sum(nums)/den + offset | max(a) | min(a)
    | std(s, ss, n) population std | cov(sxy, sx, sy, n) | corr(sxy, sx, sy, sxx, syy, n) | exp_mean(num, den)
    | logged() no aggregate: only a trainer metric of that name fills it (what trainers log, arldiag does not
    compute from tensors)"""
    name: str
    kind: str
    args: tuple
    doc: str
    unit: str = ""
    source: str = "arldiag"
    scale: float = 1.0
    offset: float = 0.0


M = Metric
STEP_METRICS: list[Metric] = [
    M("n_updates", "max", ("n_updates",), "policy updates recorded in the step"),
    M("n_tokens", "sum", ("n_tok",), "masked finite tokens over all updates and ranks", "tokens"),
    M("n_sequences", "sum", ("n_seq",), "sequence rows (sample x update) over all updates and ranks"),
    M("ratio_mean", "mean", (("sum_ratio",), "n_tok"), "token-mean IS ratio r_t = exp(lp - lp_old)"),
    M("log_ratio_mean", "mean", (("sum_log_ratio",), "n_tok"), "token-mean lp - lp_old", "nats"),
    M("log_ratio_std", "std", ("sum_log_ratio", "sum_log_ratio_sq", "n_tok"), "token std of lp - lp_old", "nats"),
    M("log_ratio_abs_max", "max", ("max_abs_log_ratio",), "max |lp - lp_old|", "nats"),
    M("ppo_kl", "mean", (("sum_ppo_kl",), "n_tok"), "token-mean lp_old - lp (k1 policy-update KL; can be negative)",
      "nats", "verl actor/ppo_kl"),
    M("ppo_kl_k3", "mean", (("sum_ppo_kl_k3",), "n_tok"), "token-mean r - log r - 1 (k3 policy-update KL, >= 0)",
      "nats"),
    M("pg_clipfrac", "mean", (("n_pg_clip",), "n_tok"),
      "fraction of tokens where -A clip(r, 1-eps_low, 1+eps_high) > -A r", "", "verl actor/pg_clipfrac"),
    M("pg_clipfrac_lower", "mean", (("n_pg_clip_lower",), "n_tok"),
      "dual-clip fraction: A < 0 and max(-A r, -A clip(r)) > -A c (c = manifest dual_clip_c)", "",
      "verl actor/pg_clipfrac_lower"),
    M("clip_ratio_low_mean", "mean", (("n_tok_low_neg",), "n_tok"), "fraction with r < 1-eps_low and A < 0", "",
      "TRL clip_ratio/low_mean"),
    M("clip_ratio_high_mean", "mean", (("n_tok_high_pos",), "n_tok"), "fraction with r > 1+eps_high and A > 0", "",
      "TRL clip_ratio/high_mean"),
    M("clip_ratio_region_mean", "mean", (("n_tok_low_neg", "n_tok_high_pos"), "n_tok"),
      "clip_ratio_low_mean + clip_ratio_high_mean", "", "TRL clip_ratio/region_mean"),
    M("tok_oob_low_neg_frac", "mean", (("n_tok_low_neg",), "n_tok"), "tokens below the band with A < 0"),
    M("tok_oob_low_pos_frac", "mean", (("n_tok_low_pos",), "n_tok"), "tokens below the band with A > 0"),
    M("tok_oob_high_neg_frac", "mean", (("n_tok_high_neg",), "n_tok"), "tokens above the band with A < 0"),
    M("tok_oob_high_pos_frac", "mean", (("n_tok_high_pos",), "n_tok"), "tokens above the band with A > 0"),
    M("tok_oob_frac", "mean", (("n_tok_low_neg", "n_tok_low_pos", "n_tok_high_neg", "n_tok_high_pos"), "n_tok"),
      "tokens outside [1-eps_low, 1+eps_high] with a non-zero advantage"),
    M("seq_ratio_mean", "mean", (("sum_seq_ratio",), "n_seq"), "mean GSPO sequence ratio s_i"),
    M("seq_ratio_min", "min", ("min_seq_ratio",), "min s_i"),
    M("seq_ratio_max", "max", ("max_seq_ratio",), "max s_i"),
    M("seq_log_ratio_std", "std", ("sum_seq_log_ratio", "sum_seq_log_ratio_sq", "n_seq"), "std of log s_i", "nats"),
    M("seq_oob_low_neg_frac", "mean", (("n_seq_low_neg",), "n_seq"), "sequences below the sequence band, A < 0"),
    M("seq_oob_low_pos_frac", "mean", (("n_seq_low_pos",), "n_seq"), "sequences below the sequence band, A > 0"),
    M("seq_oob_high_neg_frac", "mean", (("n_seq_high_neg",), "n_seq"), "sequences above the sequence band, A < 0"),
    M("seq_oob_high_pos_frac", "mean", (("n_seq_high_pos",), "n_seq"), "sequences above the sequence band, A > 0"),
    M("neg_adv_low_is_count", "sum", ("n_nalis",), "sequences with A < 0 and s_i < 1 - seq_eps_low (ARLArena)"),
    M("neg_adv_low_is_frac", "mean", (("n_nalis",), "n_seq"), "their fraction of the step's sequences"),
    M("neg_adv_low_is_kl_share", "mean", (("sum_nalis_ppo_kl_k3",), "sum_ppo_kl_k3"),
      "their share of the step's k3 policy-update KL"),
    M("neg_adv_low_is_delta_count", "sum", ("n_nalis_delta",), "sequences with A < 0 and s_i < exp(-delta)"),
    M("neg_adv_low_is_delta_frac", "mean", (("n_nalis_delta",), "n_seq"), "their fraction of the sequences"),
    M("neg_adv_low_is_delta_kl_share", "mean", (("sum_nalis_delta_ppo_kl_k3",), "sum_ppo_kl_k3"),
      "their share of the k3 policy-update KL"),
    M("kl_top1pct_share", "max", ("kl_top_share",), "share of the k3 policy-update KL carried by the top 1% of "
                                                      "sequences (per rank, max over ranks; exact on one rank)"),
    M("kl_ref_k1", "mean", (("sum_kl_ref_k1",), "n_tok_ref"), "token-mean lp - lp_ref (k1 KL to the reference)",
      "nats"),
    M("kl_ref_k2", "mean", (("sum_kl_ref_k2",), "n_tok_ref"), "token-mean 0.5 (lp_ref - lp)^2 (k2)", "nats"),
    M("kl_ref_k3", "mean", (("sum_kl_ref_k3",), "n_tok_ref"), "token-mean k3 = exp(x) - x - 1, x = lp_ref - lp",
      "nats", "verl actor/kl_loss with low_var_kl"),
    M("mismatch_k1", "mean", (("sum_mis_k1",), "n_tok_mis"), "token-mean lp_roll - lp_old", "nats",
      "verl rollout_corr/kl"),
    M("mismatch_k3", "mean", (("sum_mis_k3",), "n_tok_mis"), "token-mean exp(d) - d - 1, d = lp_old - lp_roll",
      "nats", "verl rollout_corr/k3_kl"),
    M("mismatch_chi2", "mean", (("sum_mis_rho_sq",), "n_tok_mis"), "chi2_token = E[rho^2] - 1, rho = exp(d)",
      offset=-1.0, source="verl rollout_corr/chi2_token"),
    M("mismatch_prob_abs_mean", "mean", (("sum_mis_prob_abs",), "n_tok_mis"), "mean |p_old - p_roll|", "",
      "verl training/rollout_probs_diff_mean"),
    M("mismatch_prob_abs_max", "max", ("max_mis_prob_abs",), "max |p_old - p_roll|", "",
      "verl training/rollout_probs_diff_max"),
    M("mismatch_log_abs_max", "max", ("max_mis_abs_log",), "max |lp_old - lp_roll|", "nats",
      "TRL sampling/sampling_logp_difference/max"),
    M("mismatch_prob_corr", "corr", ("sum_p_old_p_roll", "sum_p_old", "sum_p_roll", "sum_p_old_sq", "sum_p_roll_sq",
                                     "n_tok_mis"), "Pearson correlation of p_old and p_roll", "",
      "verl training/rollout_probs_pearson_corr"),
    # Training-inference mismatch as trainers log it (kind "logged": arldiag does not compute these from tensors;
    # a trainer's metric of that name fills them, docs/integrations/importers.md "Mismatch"). d = lp_old - lp_roll
    # per response token (trainer's recomputed log-prob minus the rollout engine's), rho = exp(d), i a sequence.
    M("mismatch_log_abs_mean", "logged", (), "token-mean |d| (TRL: per-rank token mean, averaged over ranks)",
      "nats", "TRL sampling/sampling_logp_difference/mean"),
    M("mismatch_log_abs_seq_mean", "logged", (), "mean over sequences of the sequence's token-mean |d|", "nats",
      "slime train_rollout_logprob_abs_diff"),
    M("mismatch_chi2_seq", "logged", (), "chi2_seq = mean_i exp(2 sum_t d) - 1 (sequence-level IS weight "
      "variance; verl clamps sum_t d to [-20, 20])", "", "verl rollout_corr/chi2_seq"),
    M("mismatch_log_ppl_diff", "logged", (), "mean_i (mean_t lp_roll - mean_t lp_old) = log(training ppl / rollout "
      "ppl) averaged over sequences", "nats", "verl rollout_corr/log_ppl_diff"),
    M("mismatch_log_ppl_abs_diff", "logged", (), "mean_i |mean_t lp_roll - mean_t lp_old|", "nats",
      "verl rollout_corr/log_ppl_abs_diff"),
    M("mismatch_ppl_ratio", "logged", (), "mean_i exp(mean_t lp_roll - mean_t lp_old) (training ppl / rollout ppl)",
      "", "verl rollout_corr/ppl_ratio"),
    M("mismatch_is_mean", "logged", (), "mean of the rollout-correction IS weight the trainer applied (rho per "
      "token, or exp(sum_t d) per sequence in sequence modes) after its truncation or mask (masked = 0)", "",
      "TRL sampling/importance_sampling_ratio/mean"),
    M("mismatch_is_max", "logged", (), "max of that IS weight (TRL, verl token mode: after truncation/mask; verl "
      "sequence mode: before)", "", "TRL sampling/importance_sampling_ratio/max"),
    M("mismatch_is_min", "logged", (), "min of that IS weight (0 when the trainer masked a token or sequence)", "",
      "TRL sampling/importance_sampling_ratio/min"),
    M("mismatch_is_high_frac", "logged", (), "fraction of tokens (sequences, in sequence-level IS) whose IS ratio "
      "before truncation is above the upper threshold", "", "verl rollout_corr/rollout_is_ratio_fraction_high"),
    M("mismatch_is_low_frac", "logged", (), "fraction of tokens (sequences, in sequence-level IS) whose IS ratio "
      "before truncation is below the lower threshold", "", "verl rollout_corr/rollout_is_ratio_fraction_low"),
    M("mismatch_masked_frac", "logged", (), "fraction of response tokens the trainer removed from the loss for "
      "their mismatch (rejection sampling, or IcePop's zeroed IS weights)", "",
      "verl rollout_corr/rollout_rs_masked_fraction"),
    M("entropy", "mean", (("sum_entropy",), "n_tok_ent"), "token-mean entropy H", "nats", "verl actor/entropy"),
    M("logp_mean", "mean", (("sum_logp",), "n_tok"), "token-mean lp", "nats"),
    M("cov_logp_adv", "cov", ("sum_logp_adv", "sum_logp", "sum_adv_tok", "n_tok"),
      "token covariance Cov(lp, A); sustained > 0 predicts entropy collapse (Cui et al.)"),
    M("adv_mean", "mean", (("sum_adv_tok",), "n_tok"), "token-mean advantage"),
    M("adv_std", "std", ("sum_adv_tok", "sum_adv_tok_sq", "n_tok"), "token std of the advantage"),
    M("adv_pos_frac", "mean", (("n_seq_adv_pos",), "n_seq"), "sequences with mean A > 0"),
    M("adv_neg_frac", "mean", (("n_seq_adv_neg",), "n_seq"), "sequences with mean A < 0"),
    M("adv_zero_frac", "mean", (("n_seq_adv_zero",), "n_seq"), "sequences with A == 0 (no learning signal)"),
    M("nonfinite_tokens", "sum", ("n_nonfinite_tok",), "masked tokens with a NaN/Inf input (excluded elsewhere)"),
    M("nonfinite_seqs", "sum", ("n_nonfinite_seq",), "sequences with at least one non-finite token"),
    M("retok_mismatch_tokens", "sum", ("n_tok_retok_mismatch",), "trainer/rollout token-id differences"),
    M("retok_mismatch_frac", "mean", (("n_tok_retok_mismatch",), "n_tok_retok"), "their fraction of the compared "
                                                                                 "tokens"),
    M("turn_ratio_min", "min", ("min_turn_ratio",), "min ATPO turn ratio s_ik"),
    M("turn_ratio_max", "max", ("max_turn_ratio",), "max ATPO turn ratio s_ik"),
    M("turn_oob_low_frac", "mean", (("n_turn_low",), "n_turn"), "turns with s_ik < 1 - seq_eps_low"),
    M("turn_oob_high_frac", "mean", (("n_turn_high",), "n_turn"), "turns with s_ik > 1 + seq_eps_high"),
    M("turn_entropy_mean", "mean", (("sum_turn_entropy",), "n_seq_multiturn"), "mean AT2PO H_turn over "
                                                                                 "multi-turn samples"),
    M("n_samples", "sum", ("n_roll",), "rollout samples"),
    M("reward_mean", "mean", (("sum_reward",), "n_roll_reward"), "mean sample reward", "", "verl critic/rewards/mean"),
    M("reward_std", "std", ("sum_reward", "sum_reward_sq", "n_roll_reward"), "population std of sample rewards"),
    M("format_valid_frac", "mean", (("n_format_valid",), "n_format_known"), "valid-format ratio of the responses"),
    M("truncated_frac", "mean", (("n_truncated",), "n_trunc_known"), "responses cut at the length limit", "",
      "verl response_length/clip_ratio"),
    M("response_length_mean", "mean", (("sum_resp_len",), "n_resp_len"), "mean response length", "tokens",
      "verl response_length/mean"),
    M("response_length_max", "max", ("max_resp_len",), "longest response", "tokens", "verl response_length/max"),
    M("response_length_min", "min", ("min_resp_len",), "shortest response", "tokens", "verl response_length/min"),
    M("success_frac", "mean", (("n_traj_success",), "n_traj"), "successful trajectories (from success flags)"),
    M("n_groups", "sum", ("n_groups",), "groups in the rollout"),
    M("zero_std_group_frac", "mean", (("n_groups_zero_std",), "n_groups"), "groups whose returns all agree", "",
      "TRL frac_reward_zero_std"),
    M("group_reward_std_mean", "mean", (("sum_group_reward_std",), "n_groups"), "mean within-group return std"),
]
STEP_METRIC_NAMES = [m.name for m in STEP_METRICS]

# Raw per-(step, rank) steps file: keys + aggregates (+ "m/<name>" user metrics, added per file as float64).
STEPS_RAW = [Col("step", I64, "training step"), Col("rank", I32, "rank that wrote the row"),
             Col("time", pa.timestamp("us", tz="UTC"), "wall-clock time the step was finalised")] + \
            [Col(a.name, I64 if a.name.startswith("n_") else F64, a.doc) for a in STEP_AGGS]

TABLE_COLUMNS: dict[str, list[Col]] = {
    "tokens": TOKENS, "sequences": SEQUENCES, "turns": TURNS, "groups": GROUPS, "steps": STEPS_RAW, "alerts": ALERTS,
    "actions": ACTIONS,
}


def arrow_schema(table: str) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type) for c in TABLE_COLUMNS[table]])


# ---------------------------------------------------------------- the two evaluators ------------------------------
def _f(x) -> float:
    return float("nan") if x is None else float(x)


def derive_step_metrics(aggs: Mapping[str, float]) -> dict[str, float]:
    """Python evaluator: raw aggregates of one step (already merged over updates/ranks) -> metrics (NaN when the
    denominator is 0 or the inputs were not recorded). Mirrors ``metric_sql``."""
    out: dict[str, float] = {}
    # values converted once and read with dict.get (runs once per step in the collector, on the trainer's thread)
    get = {k: _f(v) for k, v in aggs.items()}.get
    nan = math.nan
    g = lambda k: get(k, nan)  # noqa: E731
    for m in STEP_METRICS:
        a = m.args
        if m.kind == "logged":  # no aggregate: the trainer's own value of that name fills it (collectors/steps.py)
            v = nan
        elif m.kind in ("sum", "max", "min"):
            v = get(a[0], nan)
        elif m.kind == "mean":
            den = get(a[1], nan)
            if den and den == den:
                nums = a[0]
                num = 0.0 + get(nums[0], nan) if len(nums) == 1 else sum(g(n) for n in nums)  # 0.0 + as sum()
                v = m.scale * num / den + m.offset
            else:
                v = nan
        elif m.kind == "std":
            s, ss, n = g(a[0]), g(a[1]), g(a[2])
            v = math.sqrt(max(ss / n - (s / n) ** 2, 0.0)) if n and n == n else math.nan
        elif m.kind == "cov":
            sxy, sx, sy, n = (g(x) for x in a)
            v = sxy / n - (sx / n) * (sy / n) if n and n == n else math.nan
        elif m.kind == "corr":
            sxy, sx, sy, sxx, syy, n = (g(x) for x in a)
            if n and n == n:
                cov = sxy / n - sx * sy / n**2
                vx, vy = sxx / n - (sx / n) ** 2, syy / n - (sy / n) ** 2
                v = cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else math.nan
            else:
                v = math.nan
        else:  # pragma: no cover - guarded by tests
            raise ValueError(f"unknown metric kind {m.kind!r}")
        out[m.name] = v
    return out


def metric_sql(m: Metric) -> str:
    """SQL evaluator of one metric over merged aggregates named like the raw columns (see store/reader.py)."""
    a = m.args
    q = lambda c: f'"{c}"'  # noqa: E731
    nz = lambda c: f"nullif({q(c)}, 0)"  # noqa: E731
    if m.kind == "logged":  # no aggregate: coalesced with the trainer's value of that name (store/reader.py)
        e = "NULL"
    elif m.kind in ("sum", "max", "min"):
        e = f"{q(a[0])}::DOUBLE"
    elif m.kind == "mean":
        num = " + ".join(q(n) for n in a[0])
        e = f"{m.scale!r} * ({num}) / {nz(a[1])} + {m.offset!r}"
    elif m.kind == "std":
        s, ss, n = a
        # CASE, not greatest(): DuckDB's greatest() skips NULLs, which would turn "not recorded" into 0
        e = f"CASE WHEN {q(n)} > 0 THEN sqrt(greatest({q(ss)} / {q(n)} - pow({q(s)} / {q(n)}, 2), 0)) END"
    elif m.kind == "cov":
        sxy, sx, sy, n = a
        e = f"{q(sxy)} / {nz(n)} - ({q(sx)} / {nz(n)}) * ({q(sy)} / {nz(n)})"
    elif m.kind == "corr":
        sxy, sx, sy, sxx, syy, n = a
        cov = f"({q(sxy)} / {nz(n)} - {q(sx)} * {q(sy)} / pow({nz(n)}, 2))"
        vx = f"({q(sxx)} / {nz(n)} - pow({q(sx)} / {nz(n)}, 2))"
        vy = f"({q(syy)} / {nz(n)} - pow({q(sy)} / {nz(n)}, 2))"
        e = f"CASE WHEN {vx} > 0 AND {vy} > 0 THEN {cov} / sqrt({vx} * {vy}) END"
    else:  # pragma: no cover
        raise ValueError(f"unknown metric kind {m.kind!r}")
    return f"({e})::DOUBLE"


def merge_aggs(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Merge raw aggregates of several updates/ranks exactly (sum / max / min per aggregate)."""
    out: dict[str, float] = {}
    for a in STEP_AGGS:
        vals = [r[a.name] for r in rows if r.get(a.name) is not None and r[a.name] == r[a.name]]
        if not vals:
            continue
        out[a.name] = sum(vals) if a.merge == "sum" else (max(vals) if a.merge == "max" else min(vals))
    return out
