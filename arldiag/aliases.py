"""Names other trainers log -> arldiag's step metric names, and which logged series is the run's task score.

One table serves `arldiag import` (a log written elsewhere) and a live ``Collector.record_step(metrics=...)`` from
a trainer that logs those names, so both give the detectors the same columns (docs/integrations/importers.md
"Metric names" lists it). Standard library only: it runs inside the training process.

* ``ALIASES``: an exact logged name -> the arldiag name (verl, TRL, OpenRLHF and common hand-written loops).
  A name that is not in the table is looked up once more without a leading ``train/``, ``train_``, ``rollout/``,
  ``metrics/`` or ``policy/`` (``train/entropy`` -> ``entropy``).
* The *task score* (``task_score``): what the run is trained to raise, on whatever scale it is logged (0/1
  accuracy, +1/-1 as verl's ReTool recipe, a reward model's score). ``task_score_source`` picks ONE column per run
  from the logged names (and values, where known): verl's ``critic/score/mean``; TRL's ``rewards/<fn>/mean`` of
  the accuracy-like reward function when several are logged (``mc_idx_reward``, not ``think_format_reward``); an
  accuracy or success rate; else the total reward when it is not a sum of several logged terms; else a validation
  score, for a loop that scores only at evaluation. Never a count (tool calls, turns, ``num_*``), a total of
  several reward terms, or a rate-named column whose values leave [-1, 1]. ``val_score_source`` picks a validation
  score the same way (``val-core/*/acc/mean@1``, ``eval/answer_accuracy``, ``val/test_score/*``). A row without
  the chosen column has no score: no other column fills in (``LiveResolver`` keeps the choice for a live run).
* ``score_bounds``: the scale of a score from the values seen: [0, 1], [-1, 1], or unknown (None).
* ``MetricResolver``: one logged name -> its ``names.Reading``: arldiag.toml ``[aliases]`` (a name mapped to
  "" or "ignore" stays unplaced), then the exact table (``NOT_PLACED``, then ``ALIASES`` and the schema's sources),
  then the name's words (arldiag/names.py). ``arldiag import`` and ``LiveResolver`` both use it.
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator, Mapping

from arldiag.names import HOW_TABLE, HOW_TOML, IGNORE_VALUES, Reading, read_words
from arldiag.schema import STEP_METRICS
from arldiag.settings import file_aliases

TASK_SCORE = "task_score"
VAL_SCORE = "val_score"

# exact logged name -> arldiag step metric. The schema's own sources (schema.STEP_METRICS[*].source, "verl
# actor/ppo_kl") are added by ``alias_table``; this table holds the names the schema does not cite.
ALIASES: dict[str, str] = {
    # entropy of the policy's next-token distribution (token mean)
    "actor/entropy": "entropy", "entropy": "entropy", "policy/entropy": "entropy", "entropy_mean": "entropy",
    "mean_entropy": "entropy", "token_entropy": "entropy", "policy/entropy_avg": "entropy",
    # the positive mean token entropy under the name of the loss term it feeds (verl <= 0.4.0, EasyR1, OpenRLHF,
    # slime's train/entropy_loss), not -coef x H; ms-swift, SkyRL, NeMo-RL, AReaL, ROLL, TRL's legacy PPO
    "actor/entropy_loss": "entropy", "entropy_loss": "entropy", "entropy/mean": "entropy",
    "policy_entropy": "entropy", "approx_entropy": "entropy", "ppo_actor/update/entropy/avg": "entropy",
    "critic/entropy/mean": "entropy", "ppo/policy/entropy": "entropy",
    # gradient norm and learning rate
    "actor/grad_norm": "grad_norm", "grad_norm": "grad_norm", "gradient_norm": "grad_norm",
    "policy/grad_norm": "grad_norm", "actor_grad_norm": "grad_norm",
    "actor/lr": "lr", "learning_rate": "lr", "lr": "lr", "actor_lr": "lr", "policy_lr": "lr",
    # KL to the reference policy: TRL's `kl` is the token-mean k3 (exp(x) - x - 1, x = lp_ref - lp)
    "kl": "kl_ref_k3", "kl_ref": "kl_ref_k3", "ref_kl": "kl_ref_k3",
    # the KL to the reference as the token-mean log-ratio lp - lp_ref (k1): old verl's and ROLL's critic/kl (the KL
    # in the reward, apply_kl_penalty), OpenRLHF's logprobs_diff, Tinker's kl_policy_base (sampler vs base model)
    "critic/kl": "kl_ref_k1", "logprobs_diff": "kl_ref_k1", "kl_policy_base": "kl_ref_k1",
    # ROLL: policykl is the k1 KL between the old and the updated policy (approxkl, its mse, stays ppo_kl below);
    # its ratio_mean the token-mean PPO ratio
    "actor/policykl": "ppo_kl", "actor/ratio_mean": "ratio_mean",
    # Tinker: generated tokens per turn (one turn = one response); SkyRL's generate/* response token counts
    "ac_tokens_per_turn": "response_length_mean", "env/all/ac_tokens_per_turn": "response_length_mean",
    "generate/max_num_tokens": "response_length_max", "generate/min_num_tokens": "response_length_min",
    "pg_clipfrac_lower": "pg_clipfrac_lower",
    # TRL's PPO (0.12-0.19) and legacy PPO: the policy loss and the PPO ratio's mean (logged under val/)
    "loss/policy_avg": "pg_loss", "ppo/loss/policy": "pg_loss", "val/ratio": "ratio_mean",
    # OpenRLHF: each sample's group reward std, averaged
    "group_reward_std": "group_reward_std_mean",
    # the batch's mean reward under the name of the task's reward: slime's raw reward (before the group
    # normalisation of rollout/rewards), Tinker's mean episode reward, AReaL's task reward before its shaping
    "rollout/raw_reward": "reward_mean", "env/all/reward/total": "reward_mean",
    "ppo_actor/task_reward/avg": "reward_mean",
    # verl's KL loss to the reference: its default kl_loss_type low_var_kl is the k3 estimator (clamped at 10)
    "actor/kl_loss": "kl_ref_k3",
    "actor/pg_loss": "pg_loss", "policy_loss": "pg_loss", "pg_loss": "pg_loss", "loss": "loss",
    # the PPO approximate KL between the updated and the old policy and the clip fraction
    "actor/ppo_kl": "ppo_kl", "approx_kl": "ppo_kl", "ppo_kl": "ppo_kl", "policy/approxkl_avg": "ppo_kl",
    "actor/pg_clipfrac": "pg_clipfrac", "clipfrac": "pg_clipfrac", "clip_frac": "pg_clipfrac",
    "policy/clipfrac_avg": "pg_clipfrac", "pg_clipfrac": "pg_clipfrac", "clip_ratio": "pg_clipfrac",
    "actor/pg_clipfrac_lower": "pg_clipfrac_lower",
    # the two-sided PPO clip fraction under other trainers' names: OpenRLHF, SkyRL, ROLL, AReaL, TRL's legacy PPO,
    # and EasyR1's actor/pg_clipfrac_higher (its _lower counts dual-clip events, as verl's)
    "ppo_clip_ratio": "pg_clipfrac", "actor/pg_clipfrac_higher": "pg_clipfrac",
    "actor/ppo_ratio_clipfrac": "pg_clipfrac", "ppo/policy/clipfrac": "pg_clipfrac",
    "approxkl": "ppo_kl", "actor/approxkl": "ppo_kl", "ppo/policy/approxkl": "ppo_kl",
    # responses cut at the length limit, and their mean length
    "response_length/clip_ratio": "truncated_frac", "completions/clipped_ratio": "truncated_frac",
    "clipped_ratio": "truncated_frac", "truncated_ratio": "truncated_frac", "truncation_rate": "truncated_frac",
    "truncated_frac": "truncated_frac", "response_clip_ratio": "truncated_frac",
    "truncated": "truncated_frac", "token/total_response_length/clip": "truncated_frac",
    "ppo_actor/no_eos_ratios/avg": "truncated_frac",
    "response_length/mean": "response_length_mean", "completions/mean_length": "response_length_mean",
    "response_length": "response_length_mean", "mean_response_length": "response_length_mean",
    "avg_response_length": "response_length_mean", "completion_length": "response_length_mean",
    "response_length_mean": "response_length_mean", "gen_len": "response_length_mean",
    "response_lengths": "response_length_mean", "response_len/mean": "response_length_mean",
    "token/response_length/mean": "response_length_mean", "mean_gen_tokens_per_sample": "response_length_mean",
    "generate/avg_num_tokens": "response_length_mean",
    "response_length/max": "response_length_max", "completions/max_length": "response_length_max",
    "response_length/min": "response_length_min", "completions/min_length": "response_length_min",
    # groups whose rollouts all got the same reward (no group-relative signal)
    "frac_reward_zero_std": "zero_std_group_frac", "zero_std_group_frac": "zero_std_group_frac",
    # the mean reward of the batch (verl's critic/rewards/mean includes the KL penalty when it is in the reward)
    "reward": "reward_mean", "critic/rewards/mean": "reward_mean", "reward_mean": "reward_mean",
    "mean_reward": "reward_mean", "avg_reward": "reward_mean", "rewards/mean": "reward_mean",
    "reward/mean": "reward_mean", "env/reward_mean": "reward_mean", "reward_std": "reward_std",
    # training-inference mismatch (schema.py "logged" metrics; the verl rollout_corr/* and TRL sampling/* names the
    # schema cites are added by alias_table). verl's rollout-correction IS weight statistics, its IcePop
    # out-of-band fraction (those weights are zeroed: masked), OpenRLHF's vllm_kl (token-mean lp_roll - lp_old, as
    # verl's rollout_corr/kl) and slime's per-sample mean |lp_old - lp_roll|
    "rollout_corr/rollout_is_mean": "mismatch_is_mean", "rollout_corr/rollout_is_max": "mismatch_is_max",
    "rollout_corr/rollout_is_min": "mismatch_is_min", "rollout_corr/rollout_is_oob_ratio": "mismatch_masked_frac",
    "vllm_kl": "mismatch_k1", "train_rollout_logprob_abs_diff": "mismatch_log_abs_seq_mean",
}
# names the words would place where their meaning is not the column's, read in the trainers' sources: left unplaced
NOT_PLACED: dict[str, str] = {
    # TRL's PPO/RLOO (and legacy PPO): the KL and entropy summed over each response's tokens, not token means
    "objective/kl": "KL to the reference summed over a response's tokens (TRL PPO), not a token mean",
    "objective/entropy": "entropy summed over a response's tokens (TRL PPO), not a token mean",
    # AReaL logs lp - lp_prox: the PPO KL with its sign reversed
    "ppo_actor/update/approx_kl/avg": "lp - lp_old (AReaL): the PPO KL with the sign reversed",
    # ROLL counts tokens beyond a bound whatever the advantage's sign (TRL's low/high count only those it acts on)
    "actor/ppo_ratio_low_clipfrac": "tokens below 1 - eps whatever the advantage (ROLL), not clip_ratio_low_mean",
    "actor/ppo_ratio_high_clipfrac": "tokens above 1 + eps whatever the advantage (ROLL), not clip_ratio_high_mean",
    # slime's mismatch statistics are means over samples of each sample's token mean (mismatch_log_abs_seq_mean is
    # the one arldiag keeps); ms-swift's chi2_seq is of the geometric-mean ratio, not verl's exp(sum_t d)
    "train/mismatch_kl": "a mean over samples of token means (slime), not a token mean",
    "train/mismatch_k3_kl": "a mean over samples of token means (slime), not a token mean",
    "train/tis": "a mean over samples of token means (slime), not a token mean",
    "rollout_correction/chi2_seq": "chi-square of the geometric-mean ratio (ms-swift), not verl's chi2_seq",
    # slime's group-normalised reward (about 0): not the reward
    "rollout/rewards": "the group-normalised reward (slime), not the reward",
}
# arldiag's own outcome columns: they feed success_collapse and the collapse label already, so a live trainer
# that logs them (the reference trainer) gets no task_score copy of them (LiveResolver(skip_sources=...))
OWN_OUTCOMES = ("success_rate", "success_frac", "success", "reward_mean", "eval_success")
PREFIXES = ("train/", "train_", "rollout/", "metrics/", "policy/", "training/", "train_rollouts/", "train_optim/")

# task score candidates, in order of preference (exact names; then the patterns below)
TASK_SCORE_NAMES = (
    # EasyR1 logs its reward's accuracy term beside critic/score/mean (= reward/overall, with the format term)
    "reward/accuracy",
    "critic/score/mean",  # verl: the task score before any KL penalty
    "success_rate", "success", "train/success_rate", "rollout/success_rate", "env/success_rate",
    "accuracy", "acc", "train/accuracy", "train/acc", "rollout/accuracy", "score", "train/score", "rollout/score",
    "correct", "pass_rate", "solve_rate",
)
# totals, used when nothing more specific is logged
# slime's rollout/raw_reward before its rollout/rewards (the group-normalised reward, about 0)
REWARD_TOTALS = ("reward", "rollout/raw_reward", "reward/overall", "reward/avg_raw_reward",
                 "ppo_actor/task_reward/avg", "rollout/reward", "train/reward", "reward_mean", "mean_reward",
                 "avg_reward", "rewards/mean", "reward/mean", "env/reward_mean", "critic/rewards/mean", "rollout/rewards",
                 "train/rewards", "rewards")
# one reward function's batch mean: TRL >= 0.16 logs rewards/<fn>/mean (and /std); TRL before it and Unsloth's
# GRPO notebooks log rewards/<fn> alone (rewards/correctness_reward_func)
_REWARD_FN = re.compile(r"^(?:train/)?rewards/(?P<fn>(?!(?:mean|std|min|max)$)[^/]+)(?:/mean)?$")
_TASKLIKE = re.compile(r"acc|correct|answer|exact|match|math|gsm|solve|success|pass|verif|task|mc|score|idx|em\b",
                       re.I)
_AUXLIKE = re.compile(r"format|think|tag|length|len\b|repeti|style|mdi|attention|penalty|cosine|xml|lang", re.I)
_GENERIC = re.compile(r"(^|[/_.])(reward|rewards|score|scores|accuracy|acc|success|correct|solved|pass)"
                      r"([/_.](mean|avg|average|rate))?$|(^|[/_.])(mean|avg|average)[/_.]?(reward|score|accuracy)$", re.I)
# declared exclusions (docs/integrations/importers.md "The task score"): a name that counts things is never the
# score, whatever its values: verl's multi-turn agent loop logs rollout/tool_success_avg (mean successful tool calls
# per sample, 1.79, 4.11) and num_turns/*, SkyRL/Tinker log turn and token counts, ms-swift num_* counters
_COUNTLIKE = re.compile(r"count|num_|(^|[/_.])(num|n|number|calls?|turns?)([/_.@]|$)|tool", re.I)
# a name that claims a rate: its values lie in [-1, 1] (0/1 or +1/-1 outcomes), else it is no rate (``admissible``)
_RATELIKE = re.compile(r"acc|correct|success|pass|solve|rate|frac", re.I)
# ... unless it names a reward or a score, which keeps its own scale (Unsloth's rewards/correctness_reward_func
# gives 2.0 for a correct answer)
_OWN_SCALE = re.compile(r"reward|score", re.I)
# a total over reward terms (TRL's user-logged rewards/total_reward, EasyR1's reward/overall)
_SUMLIKE = re.compile(r"total|overall|(^|[/_.])sum([/_.]|$)|combined", re.I)
# EasyR1's per-term reward (reward/accuracy, reward/format): a term beside its total
_REWARD_TERM = re.compile(r"^(?:train/)?reward/(?P<fn>(?!(?:mean|std|min|max|avg_raw_reward)$)[^/]+)$")
_NOT_SCORE = re.compile(r"std|min|max|var|loss|penalty|format|length|kl|advantage|value|return", re.I)
# validation scores: a name that starts like an evaluation and ends like a score
_VAL_PREFIX = re.compile(r"^(val-core|val|validation|eval|evaluation|test)[/_-]", re.I)
# verl's MLflow backend writes mean@1 as mean_at_1
_VAL_SCORE = re.compile(r"(acc|accuracy|score|success|reward|pass|correct|solve)[^/]*(/mean((@|_at_)\d+)?)?$", re.I)
# verl before val-core: val/test_score/<data_source> (one score per data source, named after it)
_VAL_SOURCE_SCORE = re.compile(r"^val/test_score/[^/]+(?:/[^/]+)*$")


def alias_table(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full table: the schema's cited sources (verl / TRL names), ``ALIASES``, then ``extra`` (arldiag.toml
    ``[import.aliases]`` or ``--rename``), later entries winning. Imports the schema (pyarrow) lazily."""
    out = {}
    for m in STEP_METRICS:
        tool, _, name = m.source.partition(" ")
        if tool in ("verl", "TRL") and name and " " not in name:
            out[name] = m.name
    return {**out, **ALIASES, **dict(extra or {})}


class MetricResolver:
    """Logged name -> ``names.Reading`` (module doc): ``extra`` (arldiag.toml ``[aliases]``, given to
    ``LiveResolver``) first, then the exact table, then the words. ``toml`` None: read the active arldiag.toml."""

    def __init__(self, extra: Mapping[str, str] | None = None, toml: Mapping[str, str] | None = None) -> None:
        given = {**(file_aliases() if toml is None else dict(toml)), **dict(extra or {})}
        self.ignored = {k for k, v in given.items() if str(v).strip().lower() in IGNORE_VALUES}
        self.given = {k: v for k, v in given.items() if k not in self.ignored}
        self.table = alias_table()
        self._memo: dict[str, Reading] = {}

    def read(self, name: str) -> Reading:
        hit = self._memo.get(name)
        if hit is None:
            if len(self._memo) > 4096:  # a trainer with ever-new names: keep the memory bounded
                self._memo.clear()
            hit = self._memo[name] = self._read(name)
        return hit

    def _read(self, name: str) -> Reading:
        if name in self.ignored:
            return Reading(name, None, HOW_TOML, "ignored", "arldiag.toml [aliases] leaves it unplaced")
        to = resolve_name(name, self.given)
        if to is not None:
            return Reading(name, to, HOW_TOML, to)
        if name in NOT_PLACED:
            return Reading(name, None, HOW_TABLE, "known, not placed", NOT_PLACED[name])
        to = resolve_name(name, self.table)
        if to is not None:
            return Reading(name, to, HOW_TABLE, to)
        return read_words(name)

    def resolve(self, name: str) -> str | None:
        """The arldiag name of ``name``, or None."""
        return self.read(name).metric


def resolve_name(name: str, table: Mapping[str, str]) -> str | None:
    """The arldiag name of a logged name (exact, then without a common prefix); None when unknown."""
    hit = table.get(name)
    if hit is not None:
        return hit
    for p in PREFIXES:
        if name.startswith(p) and name[len(p):] in table:
            return table[name[len(p):]]
    return None


def task_score_source(names: Iterable[str], validation_fallback: bool = True,
                      values: Mapping[str, Iterable[float]] | None = None) -> str | None:
    """The logged name that is the run's task score, or None (see the module doc): the first of
    ``task_score_candidates`` that ``admissible`` accepts. ``values``: the column's values where they are known (the
    whole file at import, the first step live), so a rate-named column that holds counts is passed over.
    ``validation_fallback``: when nothing else is found, the validation score (an import sees every column of the
    log at once; a live trainer's validation-only step must not turn its validation score into the training score)."""
    values = values or {}
    for n in task_score_candidates(names, validation_fallback):
        if admissible(n, values.get(n, ())):
            return n
    return None


def task_score_candidates(names: Iterable[str], validation_fallback: bool = True) -> Iterator[str]:
    """The logged names that may be the task score, most specific first. Never a count (``_COUNTLIKE``: tool calls,
    turns, ``num_*``) and never a total of several reward terms (``reward_terms``: TRL's ``reward`` beside two or
    more ``rewards/<fn>/mean``, EasyR1's ``reward/overall``, a ``*total*`` column)."""
    names = [n for n in dict.fromkeys(names) if n == TASK_SCORE or not _COUNTLIKE.search(n)]
    have = set(names)
    summed = len(reward_terms(names)) >= 2
    if TASK_SCORE in have:
        yield TASK_SCORE
    yield from (n for n in TASK_SCORE_NAMES if n in have)
    fns = [(m.group("fn"), n) for n in names if (m := _REWARD_FN.match(n)) and not _SUMLIKE.search(m.group("fn"))]
    yield from (n for fn, n in fns if _TASKLIKE.search(fn) and not _AUXLIKE.search(fn))
    plain = [n for fn, n in fns if not _AUXLIKE.search(fn)]
    if len(fns) > 1 and len(plain) == 1:
        yield plain[0]  # one reward function that is not a format/length term: the task
    if not summed:
        yield from (n for n in REWARD_TOTALS if n in have)
        if len(fns) == 1:
            yield fns[0][1]
    # last resort, a hand-written loop's own name: a training-side mean of an accuracy, success, score or reward
    # (``train/reward_mean``, ``avg_score``, ``episode/success``), accuracy-like names first, the shortest first
    generic = [n for n in names if _GENERIC.search(n) and not _NOT_SCORE.search(n) and not is_validation(n)
               and not (summed and (n in REWARD_TOTALS or _SUMLIKE.search(n)))]
    yield from sorted(generic, key=lambda n: (not _TASKLIKE.search(n.rsplit("/", 1)[-1]), len(n), n))
    # a loop that logs its score only at evaluation (``eval/answer_accuracy`` every N steps): that is its score
    if validation_fallback:
        val = val_score_source(names)
        if val is not None:
            yield val


def reward_terms(names: Iterable[str]) -> list[str]:
    """The per-term reward columns a trainer logs beside its total: TRL's ``rewards/<fn>/mean`` (``rewards/<fn>``
    before 0.16) and EasyR1's ``reward/<term>`` (``reward/accuracy``, ``reward/format``); totals excluded."""
    out = []
    for n in names:
        m = _REWARD_FN.match(n) or _REWARD_TERM.match(n)
        if m and not _SUMLIKE.search(m.group("fn")):
            out.append(n)
    return out


def admissible(name: str, values: Iterable[float]) -> bool:
    """Whether ``name`` may be the task score given its values: a name that claims a rate (accuracy, success, pass
    rate) whose values leave [-1, 1] is a count or a sum under a rate's name (a mean number of successful tool
    calls, 1.79), not a rate. A reward or a score (``rewards/correctness_reward_func`` giving 2.0) and any other name
    keep their own scale."""
    if name == TASK_SCORE or not _RATELIKE.search(name) or _OWN_SCALE.search(name):
        return True
    return all(-1.0 <= v <= 1.0 for v in values if v == v)


def in_scale(name: str, value: float) -> bool:
    """One value of the chosen score column, live: a rate-named column's value outside [-1, 1] is no score value
    (``admissible`` on one value), and the step's score stays empty."""
    return admissible(name, (value,))


def val_score_source(names: Iterable[str], values: Mapping[str, Iterable[float]] | None = None) -> str | None:
    """The logged name of a validation score, or None: ``val-core`` before other prefixes, an accuracy before a
    reward, ``@1`` / the shortest name first; never a count (``_COUNTLIKE``) nor a rate-named column whose
    ``values`` leave [-1, 1] (``admissible``)."""
    names = list(dict.fromkeys(names))
    if VAL_SCORE in set(names):
        return VAL_SCORE
    values = values or {}
    cands = [n for n in names if _VAL_PREFIX.match(n)
             and (_VAL_SCORE.search(n) or _VAL_SOURCE_SCORE.match(n))
             and not re.search(r"(std|min|max|num_turns|length)", n, re.I) and not _COUNTLIKE.search(n)
             and admissible(n, values.get(n, ()))]

    def key(n: str):
        return (not n.lower().startswith("val-core"), not re.search(r"acc|correct|success|pass", n, re.I),
                "@1" not in n and "@" in n, len(n), n)

    return min(cands, key=key) if cands else None


def is_validation(name: str) -> bool:
    """A validation/evaluation metric (logged on evaluation steps only)."""
    return bool(_VAL_PREFIX.match(name)) or name in ("eval_success", VAL_SCORE)


def score_bounds(values: Iterable[float]) -> tuple[float, float] | None:
    """The scale of a score from its finite values: (0, 1) when all lie in [0, 1], (-1, 1) when all lie in
    [-1, 1] and one is negative (+1/-1 rewards), None for any other scale (a sum of reward functions)."""
    lo, hi, n = float("inf"), float("-inf"), 0
    for v in values:
        if v == v and abs(v) != float("inf"):
            lo, hi, n = min(lo, v), max(hi, v), n + 1
    return bounds_of_range(lo, hi) if n else None


def bounds_of_range(lo: float, hi: float) -> tuple[float, float] | None:
    """(0, 1) or (-1, 1) when [lo, hi] fits in it, else None (the score's own scale)."""
    if lo >= 0.0 and hi <= 1.0:
        return (0.0, 1.0)
    if lo >= -1.0 and hi <= 1.0:
        return (-1.0, 1.0)
    return None


class LiveResolver:
    """``record_step(metrics)`` -> the same metrics plus the arldiag names and ``task_score`` / ``val_score`` the
    table resolves, for a trainer that logs verl/TRL names live. The mapping is computed once per distinct set
    of logged names (a trainer logs the same keys every step), so a step costs a dict lookup and a few copies.
    A name the trainer already logs under arldiag's own name is never overwritten.

    The task score's column is chosen ONCE, at the first step that carries a candidate (``task_score_source`` on
    that step's names and values), and the validation score's at the first step with one; ``sources`` holds the
    choice (the Collector keeps it in run.json). A later step without that column gets no ``task_score``: another
    column never fills in (verl's validation line lacks critic/score/mean but carries rollout/tool_success_avg).
    ``sources`` given (a resumed run, or ``arldiag import``, which chose over the whole file): those columns, and
    None for "no such score", are fixed from the start."""

    def __init__(self, extra: Mapping[str, str] | None = None, skip_sources: Iterable[str] = (),
                 sources: Mapping[str, str | None] | None = None) -> None:
        self._extra = dict(extra or {})
        self._skip = frozenset(skip_sources)
        self._resolver: MetricResolver | None = None
        self._plans: dict[frozenset, list[tuple[str, str]]] = {}
        self.sources: dict[str, str | None] = dict(sources or {})  # task_score / val_score -> logged column
        self._barren: set[tuple[str, frozenset]] = set()  # (score, key set) without any candidate name

    def _plan(self, names: Iterable[str]) -> list[tuple[str, str]]:
        """(logged, arldiag) pairs for a step's names, in the trainer's order: of two names for one metric the
        first wins, as the first column of a file does at ``arldiag import`` (importers.steps.plan_names)."""
        if self._resolver is None:  # arldiag.toml [aliases] and the names given here, the table, the words
            self._resolver = MetricResolver(self._extra)
        names = list(names)
        plan, taken = [], {k for k in names if self._resolver.resolve(k) in (None, k)}
        for k in names:
            to = self._resolver.resolve(k)
            if to is not None and to != k and to not in taken:
                plan.append((k, to))
                taken.add(to)
        return plan

    def _choose(self, metrics: Mapping[str, float], keys: frozenset) -> None:
        """Fix each score's column at the first step that has one (once per run). A key set without any candidate
        name is remembered, so a run that never logs a validation score pays one lookup per distinct key set."""
        values = {k: (v,) for k, v in metrics.items()}
        names = list(metrics)  # the trainer's order (a frozenset's would change with the hash seed)
        for to, pick in ((TASK_SCORE, lambda v: task_score_source(names, False, v)),
                         (VAL_SCORE, lambda v: val_score_source(names, v))):
            if to in self.sources or (to, keys) in self._barren:
                continue
            if pick(None) is None:  # no candidate name at all, whatever the values
                if len(self._barren) > 512:
                    self._barren.clear()
                self._barren.add((to, keys))
                continue
            src = pick(values)
            if src is not None:
                self.sources[to] = src

    def __call__(self, metrics: Mapping[str, float]) -> dict[str, float]:
        keys = frozenset(metrics)
        plan = self._plans.get(keys)
        if plan is None:
            if len(self._plans) > 256:  # a trainer with ever-changing keys: keep the memory bounded
                self._plans.clear()
            plan = self._plans[keys] = self._plan(metrics)
        if len(self.sources) < 2:
            self._choose(metrics, keys)
        out = dict(metrics)
        for src, to in plan:
            out[to] = metrics[src]
        for to, src in self.sources.items():
            if (src is not None and src != to and to not in out and src in metrics and src not in self._skip
                    and in_scale(src, metrics[src])):
                out[to] = metrics[src]
        return out
