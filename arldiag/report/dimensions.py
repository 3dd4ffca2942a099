"""The four ARLArena policy-gradient dimensions as report sections: loss aggregation, IS clipping, advantage design,
dynamic filtering. Each says what the run did (from the manifest: algorithm, clip settings, trainer config) and what
the data shows (step series summaries and the related findings). Pure functions of the gathered data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from arldiag.detectors.registry import REGISTRY
from arldiag.findings import Finding
from arldiag.nested import flatten
from arldiag.report.recommend import evidence_line
from arldiag.views.series import series

TOLERANT_ALGOS = ("cispo", "sapo")
SEQUENCE_CLIP_ALGOS = ("gspo", "atpo", "sampo")


def config_value(config: Mapping[str, Any], aliases: Sequence[str]) -> Any:
    """First alias found in the flattened config, matched exactly or as the last dotted component(s)."""
    flat = flatten(config, ".")  # verl/hydra configs are nested
    for a in aliases:
        if a in flat:
            return flat[a]
        for k, v in flat.items():
            if k.endswith("." + a):
                return v
    return None


@dataclass
class Dimension:
    key: str
    title: str
    did: list[str]                        # what the run did (manifest)
    shows: list[str]                      # what the data shows
    findings: list[str]                   # related fired findings, one line each
    signals: list[str] = field(default_factory=list)  # signal keys plotted with the section
    has_data: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def describe(steps: pd.DataFrame, col: str | None, label: str, fmt: str = ".3g") -> str | None:
    """'label: mean M, max X at step S; first fifth F -> last fifth L' over the full (not downsampled) series."""
    if col is None or col not in steps:
        return None
    x, y = series(steps, col)
    if y.size == 0:
        return None
    k = max(1, y.size // 5)
    i = int(np.argmax(y))
    return (f"{label} ({col}): mean {y.mean():{fmt}}, max {y[i]:{fmt}} at step {int(x[i])}; "
            f"first fifth {y[:k].mean():{fmt}} -> last fifth {y[-k:].mean():{fmt}}")


def _mean(steps: pd.DataFrame, col: str | None) -> float | None:
    if col is None or col not in steps:
        return None
    y = series(steps, col)[1]
    return float(y.mean()) if y.size else None


def _related(findings: Sequence[Finding], dimension: str) -> list[str]:
    """The fired findings of the detectors that declare this dimension (Detector.dimension)."""
    return [evidence_line(f) for f in findings
            if f.fired and getattr(REGISTRY.get(f.detector), "dimension", None) == dimension]


def _fmt_setting(name: str, value: Any, default: bool = False) -> str:
    """``default``: the value is a default the run store filled in (an import), not a setting of the run."""
    if value is None:
        return f"{name}: not recorded"
    return f"{name}: default {value}, not recorded" if default else f"{name}: {value}"


def algorithm_of(manifest: Mapping[str, Any]) -> str | None:
    algo = manifest.get("algorithm") or config_value(manifest.get("config") or {}, ("algo", "algorithm", "loss_mode",
                                                                                    "policy_loss"))
    return None if algo is None else str(algo)


def _loss_aggregation(manifest: Mapping[str, Any], cfg: Mapping[str, Any], unset: set, algo: str | None,
                      steps: pd.DataFrame, c, findings: Sequence[Finding]) -> Dimension:
    """Loss aggregation: the aggregation mode, the mini-batch and epoch count, and the response lengths."""
    agg = config_value(cfg, ("loss_agg", "loss_agg_mode"))
    nmb = config_value(cfg, ("n_minibatches", "ppo_mini_batches"))
    epochs = config_value(cfg, ("ppo_epochs",))
    did = [_fmt_setting("algorithm", algo), _fmt_setting("loss aggregation", agg),
           _fmt_setting("mini-batches per step", nmb), _fmt_setting("PPO epochs", epochs)]
    if agg == "token-mean":
        did.append("token-mean weights every token equally, so long responses dominate the gradient.")
    elif agg and str(agg).startswith("seq-mean"):
        did.append("seq-mean aggregation weights every sample equally (the ARLArena / SAMPO choice).")
    if isinstance(nmb, (int, float)) and isinstance(epochs, (int, float)):
        did.append(f"off-policy degree (updates per rollout batch - 1): {int(nmb) * int(epochs) - 1}")
    shows = [s for s in (describe(steps, c("response_length_mean"), "response length"),
                         describe(steps, c("truncated_frac"), "truncated fraction")) if s]
    trunc = _mean(steps, c("truncated_frac"))
    if trunc is not None and trunc > 0.1 and agg == "token-mean":
        shows.append(f"{trunc:.0%} of responses hit the length limit on average; under token-mean aggregation "
                     "their tokens dominate the loss.")
    return Dimension("loss_aggregation", "Loss aggregation", did, shows,
                     _related(findings, "loss_aggregation"), ["response_length_mean", "truncated_frac"])


def _is_clipping(manifest: Mapping[str, Any], cfg: Mapping[str, Any], unset: set, algo: str | None,
                 steps: pd.DataFrame, c, findings: Sequence[Finding]) -> Dimension:
    """IS clipping: the token / sequence / dual clip settings and where the out-of-band tokens sit."""
    clip = manifest.get("clip")
    seq_clip = manifest.get("seq_clip")
    did = [_fmt_setting("algorithm", algo), _fmt_setting("token clip [eps_low, eps_high]", clip, "clip" in unset),
           _fmt_setting("sequence clip", seq_clip, "seq_clip" in unset),
           _fmt_setting("dual-clip c", manifest.get("dual_clip_c"), "dual_clip_c" in unset)]
    if algo in TOLERANT_ALGOS:
        did.append(f"{algo} is a tolerant loss: gradients keep flowing for tokens outside the clip band "
                   "(ARLArena: fast learning, then collapse).")
    elif algo in SEQUENCE_CLIP_ALGOS or (seq_clip and clip and list(seq_clip) != list(clip)):
        did.append("sequence-level clipping on the geometric-mean ratio s_i (ARLArena: steady improvement).")
    shows = [s for s in (describe(steps, c("pg_clipfrac"), "pg_clipfrac"),
                         describe(steps, c("clip_low_neg"), "tokens below the band with A < 0"),
                         describe(steps, c("clip_high_pos"), "tokens above the band with A > 0"),
                         describe(steps, c("seq_low_neg"), "sequences below the band with A < 0")) if s]
    low_neg, total = c("clip_low_neg"), c("tok_oob_frac")
    if low_neg and total:
        ln, tt = series(steps, low_neg)[1].sum(), series(steps, total)[1].sum()
        if tt > 0:
            shows.append(f"{ln / tt:.0%} of out-of-band tokens sit at the lower bound with a negative advantage "
                         "(ARLArena: this share grows before a collapse).")
    return Dimension("is_clipping", "IS clipping", did, shows, _related(findings, "is_clipping"),
                     ["pg_clipfrac", "clip_low_neg", "clip_high_pos", "seq_low_neg"])


def _advantage_design(manifest: Mapping[str, Any], cfg: Mapping[str, Any], unset: set, algo: str | None,
                      steps: pd.DataFrame, c, findings: Sequence[Finding]) -> Dimension:
    """Advantage design: the estimator, the neg-adv low-IS mask and the advantage statistics."""
    est = config_value(cfg, ("adv_estimator",))
    mask = config_value(cfg, ("nalis_mask", "neg_adv_low_is_mask"))
    did = [_fmt_setting("advantage estimator", est), _fmt_setting("GiGPO omega", config_value(cfg, ("omega",))),
           _fmt_setting("neg-adv low-IS mask", mask),
           _fmt_setting("mask delta", manifest.get("neg_adv_delta", config_value(cfg, ("nalis_delta",))),
                        "neg_adv_delta" in unset),
           _fmt_setting("KL-to-reference coefficient", config_value(cfg, ("kl_coef", "kl_loss_coef")))]
    shows = [s for s in (describe(steps, c("adv_zero_frac"), "samples with A == 0"),
                         describe(steps, c("adv_neg_frac"), "samples with A < 0"),
                         describe(steps, c("adv_std"), "advantage std"),
                         describe(steps, c("cov_logp_adv"), "Cov(logp, A)"),
                         describe(steps, c("nalis_masked"), "samples masked by the neg-adv low-IS mask")) if s]
    if str(est).lower() == "grpo":
        did.append("episode-level GRPO advantages; ARLArena finds fine-grained (GiGPO step) advantages improve both "
                   "stability and performance.")
    zero = _mean(steps, c("adv_zero_frac"))
    if zero is not None and zero > 0.3:
        shows.append(f"{zero:.0%} of samples carry no learning signal (A == 0) on average.")
    cov = _mean(steps, c("cov_logp_adv"))
    if cov is not None and cov > 0:
        shows.append("Cov(logp, A) is positive on average: confident tokens get positive advantages, which "
                     "drives entropy down (Cui et al.).")
    return Dimension("advantage_design", "Advantage design", did, shows,
                     _related(findings, "advantage_design"),
                     ["adv_zero_frac", "adv_neg_frac", "cov_logp_adv"])


def _dynamic_filtering(manifest: Mapping[str, Any], cfg: Mapping[str, Any], unset: set, algo: str | None,
                       steps: pd.DataFrame, c, findings: Sequence[Finding]) -> Dimension:
    """Dynamic filtering: the filter setting and the zero-variance groups."""
    est = config_value(cfg, ("adv_estimator",))
    dyn = config_value(cfg, ("dynamic_filter", "dynamic_sampling", "filter_groups.enable"))
    did = [_fmt_setting("dynamic filtering", dyn),
           _fmt_setting("cold-start steps (filter off)", config_value(cfg, ("cold_start_steps",)))]
    if dyn and str(est).lower() == "grpo":
        did.append("ARLArena: with plain GRPO advantages, dynamic filtering removes format-learning signal.")
    shows = [s for s in (describe(steps, c("zero_std_group_frac"), "zero-variance groups"),
                         describe(steps, c("group_reward_std_mean"), "within-group return std")) if s]
    zs = _mean(steps, c("zero_std_group_frac"))
    if zs is not None and zs > 0.3 and not dyn:
        shows.append(f"{zs:.0%} of groups have zero reward variance on average and carry no GRPO signal; dynamic "
                     "filtering would drop them (ARLArena: helps with a rich advantage signal such as GiGPO).")
    return Dimension("dynamic_filtering", "Dynamic filtering", did, shows, _related(findings, "dynamic_filtering"),
                     ["zero_std_group_frac", "group_reward_std_mean"])


def sections(manifest: Mapping[str, Any], steps: pd.DataFrame, cols: Mapping[str, str],
             findings: Sequence[Finding]) -> list[Dimension]:
    """The four dimension sections. ``cols`` maps signal keys to resolved step columns (signals.resolve)."""
    cfg = manifest.get("config") or {}
    unset = set(cfg.get("not_recorded") or ())  # written by `arldiag import` (commands.import_steps.DEFAULTS_KEY)
    algo = algorithm_of(manifest)
    c = cols.get

    out = [build(manifest, cfg, unset, algo, steps, c, findings)
           for build in (_loss_aggregation, _is_clipping, _advantage_design, _dynamic_filtering)]
    for s in out:
        s.has_data = bool(s.shows)
        if not s.shows:
            s.shows = ["No data for this dimension: the run recorded none of its step metrics."]
    return out

