"""Metric names read by their words: ``entropy_avg`` -> ``entropy``, ``avg_response_len`` ->
``response_length_mean``, ``actor/reward_kl_penalty`` -> ``kl_ref_k1``.

The exact table of ``arldiag/aliases.py`` is the first, authoritative step; this module places what the table does
not know (``aliases.MetricResolver`` composes the two with arldiag.toml ``[aliases]``). Standard library only: it
runs in the training process.

A name is tokenised (``tokens``: split on ``/ _ . - @ :`` and camelCase, lower-cased, glued words such as
``clipfrac`` or ``approxkl`` split, abbreviations normalised: avg/average -> mean, len/lens -> length,
resp/completion -> response, ent -> entropy, adv -> advantage, frac/fraction/ratio/rate -> frac, grad/gradient,
kld/kl_div -> kl). ``read_words`` then places it by the quantity its words name, in the order of ``RULES``, with
its statistic (mean / max / min / std) taken from its words and a missing statistic read as the mean. Every word
of the name must be understood (``CONTEXT`` words such as ``train``, ``actor``, ``critic`` name where a metric was
logged, not what it is); a name with a word the rules do not know is left as it is, a name that fits two
placements is *ambiguous*, and a name that is understood but has no arldiag column (a prompt length, a clip
fraction's maximum over ranks, a KL coefficient) is *not placed* with the reason. The word rules never place a
task score, a validation metric or an outcome (accuracy, success, score): choosing the task score stays with
``aliases.task_score_source``.

Decisions, from what the trainers log (docs/integrations/importers.md "Metric names"):

* KL to the reference without a named estimator (``kl``, ``kl_loss``, ``kl_div``, ``ref_kl``) -> ``kl_ref_k3``:
  verl, slime, ROLL, SkyRL and OpenRLHF log the KL loss term *before* its coefficient, and k1 and k3 are unbiased
  estimates of the same KL (E_pi[exp(x) - x - 1] = E_pi[-x] with x = lp_ref - lp). An estimator in the name wins
  (``k1`` -> ``kl_ref_k1``, ``k2``/``mse`` -> ``kl_ref_k2``). The KL penalty *in the reward* (``reward_kl_penalty``)
  is the per-token log-ratio verl, TRL's PPO and OpenRLHF add to the reward, k1 -> ``kl_ref_k1``. A sum of KL
  over a response (TRL's PPO ``objective/kl``) or a coefficient is not a token mean: not placed.
* PPO's KL between the old and the updated policy (``ppo_kl``, ``approx_kl``, ``kl_pre_post``) -> ``ppo_kl``
  (TRL's and ROLL's ``approxkl`` is 0.5 mean d^2, which estimates the same KL to second order; a name that says
  ``k2`` / ``mse`` / ``v2`` is not placed). The mismatch KL without a named estimator is k1 (verl's
  ``rollout_corr/kl``, ms-swift's, Tinker's ``kl_sample_train_v1``) -> ``mismatch_k1``; with ``k3`` ->
  ``mismatch_k3``.
* A clip fraction's bound: ``low`` / ``high`` -> ``clip_ratio_low_mean`` / ``clip_ratio_high_mean`` (the tokens
  the bound acts on, as TRL's ``clip_ratio/low_mean``), ``region`` -> ``clip_ratio_region_mean``, ``dual`` ->
  ``pg_clipfrac_lower`` (verl's dual-clip count), none -> ``pg_clipfrac``. Its min or max (TRL's
  ``clip_ratio/low_min``, ``clip_ratio/high_max``: the extreme over processes of each process's fraction) has no
  column: arldiag keeps the mean over all tokens, which TRL logs beside it.
* Lengths: a response's (response, completion, generation, non-prompt) mean, max and min. A sequence length
  (verl's ``global_seqlen``, AReaL's ``seq_len``: prompt + response), a prompt length or the length of a subset
  (terminated, aborted, correct answers) is not placed.
* A format check: ``format``, ``format_accuracy``, ``format_valid``, a format rate, and a reward named only
  ``format_reward`` (the 0/1 format check of CS336's r1_zero reward, EasyR1, DeepSeek-R1) -> ``format_valid_frac``;
  a format reward with more words (``soft_format``, ``xmlcount``) has its own scale and is not placed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

# how a placement was made, in the order the resolver tries them (aliases.MetricResolver)
HOW_TOML, HOW_TABLE, HOW_WORDS = "arldiag.toml", "exact table", "by words"
# a placement's value in arldiag.toml [aliases] (or --rename) that leaves the name unplaced
IGNORE_VALUES = ("", "ignore")
# the arldiag columns the word rules never fill: the run's outcome and its validation score are chosen by
# aliases.task_score_source / val_score_source, never by a word
NEVER_BY_WORDS = frozenset({"task_score", "val_score", "success_rate", "success_frac", "success", "eval_success"})


@dataclass(frozen=True)
class Reading:
    """What a logged name was read as. ``metric``: the arldiag column it is placed in (None: unplaced);
    ``how``: HOW_TOML / HOW_TABLE / HOW_WORDS, or "" when unplaced; ``read_as``: the quantity in words;
    ``why``: for an unplaced name, why (the candidates of an ambiguous name, the column arldiag lacks)."""
    name: str
    metric: str | None
    how: str = ""
    read_as: str = ""
    why: str = ""
    ambiguous: bool = False

    @property
    def placed(self) -> bool:
        return self.metric is not None


# ------------------------------------------------------------------------------------------------ tokenising
_SPLIT = re.compile(r"[/_.\-@:\s]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# glued words trainers write as one (verl pg_clipfrac, TRL approxkl, ROLL policykl, verl global_seqlen)
_GLUED = {"clipfrac": ("clip", "frac"), "clipratio": ("clip", "frac"), "approxkl": ("approx", "kl"),
          "policykl": ("policy", "kl"), "ppokl": ("ppo", "kl"), "seqlen": ("seq", "length"),
          "seqlens": ("seq", "length"), "kldiv": ("kl",), "logprob": ("logp",), "logprobs": ("logp",),
          "logps": ("logp",), "gradnorm": ("grad", "norm"), "entropyloss": ("entropy", "loss"),
          "chi2": ("chi2",), "nonprompt": ("response",), "klloss": ("kl", "loss")}
# one spelling per meaning; only where the meanings agree in every trainer read (module doc)
_SAME = {
    "avg": "mean", "average": "mean", "averaged": "mean", "mean": "mean", "means": "mean",
    "len": "length", "lens": "length", "length": "length", "lengths": "length",
    "resp": "response", "response": "response", "responses": "response", "completion": "response",
    "completions": "response", "generation": "response", "generations": "response", "gen": "response",
    "ent": "entropy", "entropy": "entropy", "entropies": "entropy",
    "adv": "advantage", "advantage": "advantage", "advantages": "advantage", "advs": "advantage",
    "frac": "frac", "fraction": "frac", "fractions": "frac", "ratio": "frac", "rate": "frac", "pct": "frac",
    "proportion": "frac", "share": "frac",
    "grad": "grad", "grads": "grad", "gradient": "grad", "gradients": "grad",
    "kl": "kl", "kld": "kl", "kls": "kl", "div": "kl", "divergence": "kl",
    "lr": "lr", "reward": "reward", "rewards": "reward", "rew": "reward",
    "std": "std", "stddev": "std", "stdev": "std", "max": "max", "maximum": "max", "min": "min", "minimum": "min",
    "clip": "clip", "clipped": "clip", "clipping": "clip", "clips": "clip",
    "truncated": "truncated", "truncation": "truncated", "trunc": "truncated", "truncate": "truncated",
    "tokens": "token", "token": "token", "tok": "token", "toks": "token",
    "prob": "prob", "probs": "prob", "probability": "prob", "probabilities": "prob",
    "logp": "logp", "lp": "logp", "diff": "diff", "difference": "diff", "differences": "diff", "delta": "diff",
    "corr": "corr", "correlation": "corr", "pearson": "corr", "correction": "correction",
    "ref": "ref", "reference": "ref", "base": "ref", "init": "ref", "sft": "ref",
    "coef": "coef", "coeff": "coef", "coefficient": "coef", "beta": "coef",
    "lower": "low", "low": "low", "higher": "high", "high": "high", "upper": "high",
    "seq": "seq", "sequence": "seq", "sequences": "seq", "sample": "sample", "samples": "sample",
    "sampling": "sampling", "sampled": "sampling", "rollout": "rollout", "rollouts": "rollout",
    "importance": "is", "is": "is", "weight": "weight", "weights": "weight", "valid": "valid", "validity": "valid",
    "format": "format", "formatted": "format", "acc": "accuracy", "accuracy": "accuracy", "accuracies": "accuracy",
    "number": "num", "num": "num", "n": "num", "count": "num", "counts": "num", "cnt": "num",
}
# words that say where a metric was logged (a trainer's namespace), not what it is
CONTEXT = frozenset({"train", "training", "trainer", "actor", "act", "policy", "critic", "metrics", "metric",
                     "batch", "env", "all", "objective", "ppo", "grpo", "update", "optim", "stats", "step",
                     "rollout", "generate", "mean", "per", "token", "raw", "data", "loss", "pg", "avg",
                     "model", "online", "agent", "iter", "global", "debug", "vs"})
# a first path segment that names where a metric was logged (the mismatch rule reads past it)
_NAMESPACES = ("training", "train", "policy", "optim", "actor", "rollout", "metrics")
_STAT_WORDS = {"max": "max", "min": "min", "std": "std", "var": "var", "median": "median", "sum": "sum",
               "total": "sum", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}


# two words that are one (raw spellings, before normalising): ROLL's non_prompt length, verl's non_aborted
# responses, a "policy / probs / importance / sampling / is ratio" (an importance ratio, not a fraction; beside a
# rollout-engine word it is the mismatch IS weight), "learning rate", k3's "low_var_kl"
_PAIRS = {("non", "prompt"): "response", ("non", "aborted"): "nonaborted", ("policy", "ratio"): "isratio",
          ("ppo", "ratio"): "isratio", ("probs", "ratio"): "isratio", ("prob", "ratio"): "isratio",
          ("importance", "ratio"): "isratio", ("sampling", "ratio"): "isratio", ("is", "ratio"): "isratio",
          ("learning", "rate"): "lr", ("low", "var"): "lowvar", ("no", "eos"): "noeos",
          ("wo", "obs"): "woobs", ("non", "score"): "nonscore"}


def tokens(name: str) -> list[str]:
    """The words of a logged name, normalised (module doc): ``rollout/avg_response_token_length`` ->
    ``['rollout', 'mean', 'response', 'token', 'length']``; ``actor/pg_clipfrac`` -> ``['actor', 'pg', 'clip',
    'frac']``."""
    raw = [w.lower() for part in _SPLIT.split(name.strip()) for w in _CAMEL.split(part) if w]
    out: list[str] = []
    i = 0
    while i < len(raw):
        pair = _PAIRS.get((raw[i], raw[i + 1])) if i + 1 < len(raw) else None
        if pair is not None:
            out.append(pair)
            i += 2
            continue
        out.extend(_SAME.get(g, g) for g in _GLUED.get(raw[i], (raw[i],)))
        i += 1
    return out


# ------------------------------------------------------------------------------------------------ word rules
@dataclass(frozen=True)
class Words:
    """A name's words: ``all`` in order, ``stat`` the statistic its words name (the last of mean/max/min/std/...,
    "mean" when none) and ``has`` for membership."""
    all: tuple[str, ...]
    stat: str
    ns: str = ""  # the first path segment when it is one namespace word (``training/``, ``policy/``, ``rollout/``)

    def has(self, *ws: str) -> bool:
        return all(w in self.all for w in ws)

    def any(self, *ws: str) -> bool:
        return any(w in self.all for w in ws)


def words_of(name: str) -> Words:
    ws = tuple(tokens(name))
    stat = "mean"
    for w in ws:
        if w in _STAT_WORDS:
            stat = _STAT_WORDS[w]
    head, slash, _ = name.partition("/")
    first = tokens(head) if slash else []
    return Words(ws, stat, first[0] if len(first) == 1 and first[0] in _NAMESPACES else "")


# an outcome: the task score's business (aliases.task_score_source), never placed by words
_OUTCOME = frozenset({"accuracy", "correct", "success", "successes", "solved", "solve", "pass", "score", "scores",
                      "win", "em", "exact", "match", "answer"})
# a column no detector reads and arldiag has no name for: said plainly, not guessed
_NOT_METRICS = {
    "timing": "a time", "time": "a time", "throughput": "a throughput", "mfu": "a utilisation", "perf": "a throughput",
    "memory": "a memory figure", "tflops": "a throughput", "seconds": "a time", "s": "a time", "ms": "a time",
    "epoch": "a progress counter", "prompt": "a prompt statistic", "query": "a prompt statistic",
    "queries": "a prompt statistic", "ob": "an observation statistic", "obs": "an observation statistic",
    "value": "a value-function statistic", "values": "a value-function statistic", "vf": "a value-function statistic",
    "vpred": "a value-function statistic", "returns": "a return statistic", "return": "a return statistic",
    "turns": "a turn count", "turn": "a turn statistic", "num": "a count", "coef": "a coefficient",
    "threshold": "a threshold", "bound": "a bound", "target": "a target",
}


def _by_stat(w: Words, what: str, cols: dict) -> tuple:
    """(column of this statistic, read_as, why): the column the schema has for ``w.stat``, else unplaced."""
    read = f"{what}, {w.stat}"
    col = cols.get(w.stat)
    if col is None:
        have = ", ".join(sorted(cols)) or "none"
        return None, read, f"no column for this statistic: arldiag keeps the {have} of {what}"
    return col, read, ""


def _entropy(w: Words) -> tuple:
    if w.any("turn", "seq", "coef", "threshold", "bonus", "reg", "normalized", "norm", "sample"):
        return None, "an entropy variant", "not the token-mean entropy of the policy"
    return _by_stat(w, "token entropy", {"mean": "entropy"})


def _length(w: Words) -> tuple:
    if w.any("prompt", "query", "queries", "ob", "obs", "observation", "input", "total"):
        return None, "a prompt or total length", "a prompt or total length, not the response's"
    subset = [x for x in ("terminated", "aborted", "nonaborted", "correct", "incorrect", "zero", "nonzero", "woobs",
                          "positive", "negative", "clip", "truncated") if x in w.all]
    if subset:
        return None, "the length of a subset of responses", f"the length of {' '.join(subset)} responses only"
    if w.any("seq") and not w.any("response"):
        return None, "a sequence length", "ambiguous: prompt + response (verl, AReaL) or the response?"
    if not w.any("response"):
        return None, "a length of something unnamed", "ambiguous: too few words (whose length?)"
    if not w.any("length") and not any(x in w.all for x in ("mean", "max", "min", "std")):
        # response tokens without a statistic: the step's total (the reference trainer's gen_tokens) or a mean?
        return None, "a response token count", "ambiguous: a total or a mean per response?"
    cols = {"mean": "response_length_mean", "max": "response_length_max", "min": "response_length_min"}
    return _by_stat(w, "response length", cols)


def _is_length(w: Words) -> bool:
    return w.any("length") or (w.has("token") and w.any("response") and not w.any("entropy", "kl", "frac"))


def _truncated(w: Words) -> tuple:
    if w.any("prompt", "query", "aborted", "nonaborted", "seq"):
        return None, "a prompt or subset truncation", "a prompt's or a subset's truncation, not all responses'"
    if w.stat not in ("mean",):
        return None, f"truncated responses, {w.stat}", "arldiag keeps the truncated fraction only"
    return "truncated_frac", "responses cut at the length limit, fraction", ""


def _is_truncated(w: Words) -> bool:
    return w.any("truncated", "noeos") or (w.any("clip") and w.any("length", "response") and not w.any("entropy"))


_MISMATCH_MARKS = ("mismatch", "vllm", "sglang", "inference", "infer", "engine", "tis", "mis", "behave")
_ROLLOUT_SIDE = ("rollout", "sampling", "sample")
_TRAINER_SIDE = ("train", "training", "trainer", "actor", "old")


def _mismatch_context(w: Words) -> bool:
    """The words speak of the rollout engine against the trainer: a mismatch marker, verl's ``rollout_corr`` or
    ms-swift's ``rollout_correction`` namespace, or both sides named after the namespace word
    (``policy/rollout_train_logprobs_abs_diff_mean``, ``optim/kl_sample_train_v1``; verl's ``training/`` namespace
    is the trainer's side: ``training/rollout_probs_diff_max``)."""
    if w.any(*_MISMATCH_MARKS) or w.has("rollout", "correction") or w.has("rollout", "corr"):
        return True
    first, rest = (w.ns, w.all[1:]) if w.ns else ("", w.all)
    return any(x in rest for x in _ROLLOUT_SIDE) and (
        any(x in rest for x in _TRAINER_SIDE) or first in ("training", "train"))


def _kl(w: Words) -> tuple:
    if w.any("coef", "target", "ctl", "controller", "threshold"):
        return None, "a KL coefficient or target", "a setting, not a KL"
    if w.stat in ("sum", "max", "min", "std", "var") or w.any("sum", "total"):
        return None, f"a KL, {w.stat}", "arldiag keeps token means of KL only"
    if _mismatch_context(w) or w.has("sampling") or w.has("sample", "train"):
        est = _estimator(w)
        if est == "k2":
            return None, "training-inference mismatch, k2 KL", "arldiag keeps the k1 and k3 mismatch only"
        col = "mismatch_k3" if est == "k3" else "mismatch_k1"
        return col, f"training-inference mismatch KL ({est or 'k1'}), token mean", ""
    if w.any("reward"):
        return "kl_ref_k1", "the KL penalty in the reward (k1 to the reference), token mean", ""
    if w.any("penalty"):
        return None, "a KL penalty", "ambiguous: the KL or the coefficient times it?"
    if w.any("ppo", "approx", "old", "pre", "post"):
        if _estimator(w) == "k2":
            return None, "PPO old/new policy KL, k2", "arldiag keeps the k1 and k3 policy-update KL only"
        return ("ppo_kl_k3" if _estimator(w) == "k3" else "ppo_kl"), "PPO KL between old and updated policy", ""
    extra = [x for x in w.all if x not in CONTEXT and x not in _KL_WORDS and x not in _STAT_WORDS]
    if extra:
        return None, "a KL", f"words not understood: {' '.join(extra)}"
    est = _estimator(w)
    col = {"k1": "kl_ref_k1", "k2": "kl_ref_k2"}.get(est, "kl_ref_k3")
    return col, f"KL to the reference ({est or 'estimator not named: k3'}), token mean", ""


_KL_WORDS = frozenset({"kl", "ref", "k1", "k2", "k3", "low", "var", "mse", "loss", "policy", "lowvar", "v1", "v2"})


def _estimator(w: Words) -> str:
    if w.any("k3", "lowvar") or w.has("low", "var"):
        return "k3"
    if w.any("k2", "mse", "v2"):
        return "k2"
    if w.any("k1", "v1"):
        return "k1"
    return ""


def _clip(w: Words) -> tuple:
    if w.any("grad", "value", "vf", "reward", "advantage", "is", "tis", "mis", "weight", "cispo", "sample"):
        return None, "a clip fraction of something else", "the clip fraction of a value, gradient or weight"
    if w.stat in ("max", "min", "std"):
        bound = "low-bound " if w.any("low") else "high-bound " if w.any("high") else ""
        return None, f"{bound}clip fraction, {w.stat} over processes", \
            "a clip fraction's extreme over processes: arldiag keeps its mean over all tokens, logged beside it"
    if w.any("dual"):
        return "pg_clipfrac_lower", "dual-clip fraction", ""
    if w.any("region"):
        return "clip_ratio_region_mean", "clip fraction, both bounds (tokens the clip acts on)", ""
    if w.any("low") and not w.any("high"):
        return "clip_ratio_low_mean", "low-bound clip fraction", ""
    if w.any("high") and not w.any("low"):
        return "clip_ratio_high_mean", "high-bound clip fraction", ""
    return "pg_clipfrac", "policy-ratio clip fraction, two-sided", ""


def _grad(w: Words) -> tuple:
    if w.any("critic", "value", "vf", "clip"):
        return None, "the critic's gradient norm", "the critic's, not the policy's"
    if w.stat != "mean":
        return None, f"gradient norm, {w.stat}", "arldiag keeps the step's gradient norm only"
    return "grad_norm", "gradient norm", ""


def _lr(w: Words) -> tuple:
    if w.any("critic", "value", "vf"):
        return None, "the critic's learning rate", "the critic's, not the policy's"
    return "lr", "learning rate", ""


def _advantage(w: Words) -> tuple:
    if w.any("raw", "abs", "clip", "norm", "normalized", "positive", "negative"):
        return None, "an advantage variant", "not the token advantage arldiag keeps"
    return _by_stat(w, "advantage", {"mean": "adv_mean", "std": "adv_std"})


def _reward(w: Words) -> tuple:
    if w.stat == "mean" and "mean" not in w.all:
        return None, "a reward", "no statistic named: the total reward is a task-score candidate, not placed by words"
    return _by_stat(w, "reward", {"mean": "reward_mean", "std": "reward_std"})


def _format(w: Words) -> tuple:
    if w.any("error", "invalid", "penalty", "fail", "failure", "wrong"):
        return None, "a format failure", "the complement of the valid-format fraction"
    if w.stat != "mean":
        return None, f"format check, {w.stat}", "arldiag keeps the valid-format fraction only"
    return "format_valid_frac", "valid-format fraction", ""


def _zero_std(w: Words) -> tuple:
    return "zero_std_group_frac", "groups whose rewards all agree, fraction", ""


def _mismatch(w: Words) -> tuple:
    """Training-inference mismatch that is not a KL (those are ``_kl``'s): probabilities, |log-prob| differences,
    their correlation, IS weights, perplexities and chi-square (schema.STEP_METRICS, detectors/mismatch.py)."""
    seq = w.any("seq")
    if w.has("chi2"):
        if w.any("token"):
            return "mismatch_chi2", "chi-square of the token IS ratio", ""
        if seq:
            return "mismatch_chi2_seq", "chi-square of the sequence IS weight", ""
        return None, "a chi-square mismatch", "ambiguous: token or sequence level?"
    if w.any("ppl"):
        if w.has("diff") and w.any("abs"):
            return _stat_only(w, "mismatch_log_ppl_abs_diff", "|log perplexity difference| per sequence")
        if w.has("diff"):
            return _stat_only(w, "mismatch_log_ppl_diff", "log perplexity difference per sequence")
        if w.has("frac"):
            return _stat_only(w, "mismatch_ppl_ratio", "perplexity ratio per sequence")
        return None, "a perplexity", "one side's perplexity, not the mismatch"
    if w.has("corr"):
        return ("mismatch_prob_corr", "correlation of trainer and rollout probabilities", "") if w.any("prob") \
            else (None, "a correlation", "ambiguous: of what?")
    if w.has("prob", "diff") and not w.any("logp"):
        if w.any("valid"):
            return None, "a validity flag of the probability difference", "a flag, not a statistic"
        cols = {"mean": "mismatch_prob_abs_mean", "max": "mismatch_prob_abs_max"}
        return _by_stat(w, "|p_trainer - p_rollout|", cols)
    if w.has("logp", "diff"):
        if not w.any("abs") and not w.has("sampling"):
            return None, "a log-prob difference", "ambiguous: signed or absolute?"
        if seq:
            return None, "|log-prob difference| per sequence", "arldiag keeps token-level ones"
        cols = {"mean": "mismatch_log_abs_mean", "max": "mismatch_log_abs_max"}
        return _by_stat(w, "|lp_trainer - lp_rollout|", cols)
    if w.any("is", "weight", "isratio") and not seq and not w.any("ess", "eff", "batch", "norm"):
        if w.any("masked", "mask", "oob", "rejected", "rs"):
            return "mismatch_masked_frac", "tokens removed for their mismatch, fraction", ""
        if w.has("frac") and w.any("high", "low"):
            return ("mismatch_is_high_frac" if w.any("high") else "mismatch_is_low_frac"), \
                "IS ratios beyond a threshold, fraction", ""
        if w.any("frac", "clip", "truncated"):
            return None, "a clipped or truncated share of IS weights", "ambiguous: which bound, before or after?"
        return _by_stat(w, "rollout-correction IS weight", {"mean": "mismatch_is_mean", "max": "mismatch_is_max",
                                                            "min": "mismatch_is_min"})
    if w.any("masked", "rs") and w.has("frac") and not seq:
        return "mismatch_masked_frac", "tokens removed for their mismatch, fraction", ""
    return None, "a training-inference mismatch statistic", "no arldiag column of that definition"


def _stat_only(w: Words, col: str, what: str) -> tuple:
    return _by_stat(w, what, {"mean": col})


def _is_mismatch(w: Words) -> bool:
    return _mismatch_context(w) or (w.has("sampling") and w.any("logp", "is", "weight", "diff", "isratio")) or \
        (w.any("chi2", "ppl") and w.any("rollout", "correction", "mismatch", "token", "seq", "diff"))


def _ratio(w: Words) -> tuple:
    return _by_stat(w, "PPO importance ratio", {"mean": "ratio_mean"})


RULES: tuple[tuple[str, Callable[[Words], bool], Callable[[Words], tuple]], ...] = (
    ("kl", lambda w: w.any("kl"), _kl),
    ("mismatch", _is_mismatch, _mismatch),
    ("zero_std", lambda w: w.has("zero", "std") and w.any("frac", "group", "reward"), _zero_std),
    ("truncated", _is_truncated, _truncated),
    ("clip", lambda w: w.any("clip"), _clip),
    ("entropy", lambda w: w.any("entropy"), _entropy),
    ("ratio", lambda w: w.any("isratio") or (w.has("is") and w.any("weight", "frac")), _ratio),
    ("length", _is_length, _length),
    ("grad_norm", lambda w: w.has("grad", "norm"), _grad),
    ("lr", lambda w: w.any("lr") or w.has("learning", "frac"), _lr),
    ("format", lambda w: w.any("format"), _format),
    ("advantage", lambda w: w.any("advantage"), _advantage),
    ("reward", lambda w: w.any("reward"), _reward),
)
# the words each quantity may carry; any other word (outside CONTEXT and the statistics) leaves the name unplaced
QUANTITY_WORDS = {
    "kl": _KL_WORDS | {"approx", "old", "pre", "post", "reward", "penalty", "non", "mismatch", "vllm", "sglang",
                       "inference", "infer", "sampling", "sample", "train", "correction", "corr", "coef", "target",
                       "lowvar",
                       "ctl", "div", "tis", "mis", "rollout"},
    "mismatch": frozenset({"rollout", "correction", "corr", "mismatch", "vllm", "sglang", "inference", "infer",
                           "engine", "sampling", "sample", "old", "train", "prob", "logp", "diff", "abs", "valid",
                           "chi2", "seq", "ppl", "log", "is", "weight", "frac", "high", "low", "masked", "mask",
                           "oob", "rs", "tis", "mis", "clip", "truncated", "ess", "eff", "size", "norm", "factor",
                           "behave", "deviation", "isratio"}),
    "zero_std": frozenset({"zero", "std", "frac", "group", "groups", "reward"}),
    "truncated": frozenset({"truncated", "frac", "clip", "length", "response", "prompt", "query", "aborted",
                            "nonaborted", "seq", "noeos"}),
    "clip": frozenset({"clip", "frac", "low", "high", "region", "dual", "grad", "value", "vf", "reward",
                       "advantage", "is", "tis", "mis", "weight", "cispo", "sample", "isratio"}),
    "entropy": frozenset({"entropy", "approx", "turn", "seq", "coef", "threshold", "bonus", "reg", "normalized",
                          "norm", "sample", "policy"}),
    "length": frozenset({"length", "response", "token", "prompt", "query", "queries", "ob", "obs", "observation",
                         "input", "total", "terminated", "aborted", "non", "correct", "incorrect", "zero",
                         "nonzero", "woobs", "positive", "negative", "clip", "truncated", "seq", "num", "nonaborted"}),
    "grad_norm": frozenset({"grad", "norm", "critic", "value", "vf", "clip"}),
    "lr": frozenset({"lr", "learning", "frac", "critic", "value", "vf"}),
    "format": frozenset({"format", "valid", "frac", "reward", "check", "error", "invalid", "penalty", "fail", "think",
                         "failure", "wrong", "ok", "follow", "accuracy", "correct"}),
    "advantage": frozenset({"advantage", "raw", "abs", "clip", "norm", "normalized", "positive", "negative"}),
    "reward": frozenset({"reward"}),
    "ratio": frozenset({"isratio", "is", "weight", "frac"}),
}


def read_words(name: str) -> Reading:
    """Place ``name`` by its words (module doc); never into the task score or an outcome."""
    w = words_of(name)
    if not w.all:
        return Reading(name, None, read_as="no words", why="empty name")
    if name.lower().startswith(("val/", "val-", "eval", "test/", "test_", "validation")) and not \
            name.lower().startswith(("val/clip", "val/ratio", "val/num_eos")):
        return Reading(name, None, read_as="a validation metric", why="validation metrics are read as val_score only")
    hits = [(q, place) for q, match, place in RULES if match(w)]
    outcome = [x for x in w.all if x in _OUTCOME and not (x in ("accuracy", "correct") and w.any("format"))]
    if outcome and not (hits and hits[0][0] in ("kl", "mismatch", "length", "entropy")):
        return Reading(name, None, read_as="an outcome", why="the task score is chosen by aliases.task_score_source")
    not_metric = [_NOT_METRICS[x] for x in w.all if x in _NOT_METRICS]
    if not hits and "loss" in w.all and w.stat in ("mean", "sum") and not w.any("critic", "sum") \
            and all(x in CONTEXT or x == "total" for x in w.all):
        # a loss with no other quantity named: the policy loss when the policy is named, else the total loss
        pg = w.any("pg", "policy") and not w.any("total")
        return Reading(name, "pg_loss" if pg else "loss", HOW_WORDS, "policy loss" if pg else "total loss")
    if not hits:
        if not_metric:
            return Reading(name, None, read_as=not_metric[0], why="not a detector input")
        return Reading(name, None, read_as="not understood", why="no quantity arldiag keeps")
    q, place = hits[0]
    unknown = [x for x in w.all if x not in CONTEXT and x not in _STAT_WORDS and x not in QUANTITY_WORDS[q]
               and x not in _NOT_METRICS]
    if unknown:
        return Reading(name, None, read_as=f"a {q} metric with other words", why=f"words not understood: "
                       f"{' '.join(dict.fromkeys(unknown))}")
    blocked = [x for x in w.all if x in _NOT_METRICS and x not in QUANTITY_WORDS[q]]
    if blocked:
        return Reading(name, None, read_as=_NOT_METRICS[blocked[0]], why="not a detector input")
    metric, read_as, why = place(w)
    if metric in NEVER_BY_WORDS:  # pragma: no cover - no rule returns one; kept as the declared guarantee
        metric = None
    amb = why.startswith("ambiguous")
    return Reading(name, metric, HOW_WORDS if metric else "", read_as, why, amb)


def group_readings(readings: Iterable[Reading]) -> dict[str, list[Reading]]:
    """Readings by what the import prints on one line each: placed by HOW_TOML / HOW_TABLE / HOW_WORDS,
    "ambiguous", "not placed" (understood, no arldiag column or a toml "ignore")."""
    out: dict[str, list[Reading]] = {}
    for r in readings:
        key = r.how if r.placed else ("ambiguous" if r.ambiguous else "not placed")
        out.setdefault(key, []).append(r)
    return out
