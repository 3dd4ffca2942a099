"""Policy-gradient losses as registered pure functions (formulas: ../shared/spec/ALGORITHMS.md).

Every loss has the signature ``(logp, logp_old, advantages, mask, cfg, turn_ids=None) -> (loss, stats)``:
``logp`` [B, T] has gradient, ``logp_old`` [B, T] is the trainer's recompute before the update, ``advantages`` is
[B] or [B, T], ``mask`` [B, T] is 1 on policy-generated tokens. ``turn_ids`` [B, T] (turn index per token) is only
read by ATPO. ``cfg`` is anything with the TrainConfig attributes the loss reads. ``stats`` are detached floats.

The losses are minimised. ``aggregate`` applies the config's loss aggregation. ``CORRECTIONS`` are the always-on
off-policy mitigations trainers ship, applicable to any loss (registered pure functions, switched on by their config
field): the negative-advantage low-IS sequence mask (ARLArena, ``nalis_sample_mask``), the off-policy sequence mask
of DeepSeek-V3.2 (``opsm_sample_mask``) and truncated importance sampling (``tis_token_weight``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

LOG_RATIO_CLAMP = 20.0   # clamp log-ratios before exp (ALGORITHMS.md)
SEQ_LOG_RATIO_MAX = 10.0  # GSPO-token form clamps log s at 10

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
LOSSES: dict[str, LossFn] = {}


def register(name: str) -> Callable[[LossFn], LossFn]:
    def deco(fn: LossFn) -> LossFn:
        LOSSES[name] = fn
        return fn
    return deco


def get_loss(name: str) -> LossFn:
    if name not in LOSSES:
        raise ValueError(f"loss={name!r}: choose from {', '.join(LOSSES)}")
    return LOSSES[name]


# --- helpers ---------------------------------------------------------------------------------------------------------
def _token_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if advantages.dim() == 1:
        return advantages[:, None].expand_as(mask)  # [B, T]
    if advantages.shape != mask.shape:
        raise ValueError(f"advantages shape {tuple(advantages.shape)} does not match mask {tuple(mask.shape)}")
    return advantages


def aggregate(loss_t: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Aggregate token losses [B, T] into a scalar (ALGORITHMS.md, "Loss aggregation")."""
    mask = mask.to(loss_t.dtype)
    if mode == "token-mean":
        return (loss_t * mask).sum() / mask.sum().clamp_min(1.0)
    per_seq_sum = (loss_t * mask).sum(-1)  # [B]
    n_tok = mask.sum(-1)  # [B]
    has = n_tok > 0
    if not bool(has.any()):
        return (loss_t * mask).sum()  # zero with a graph
    if mode == "seq-mean-token-mean":
        return (per_seq_sum[has] / n_tok[has]).mean()
    if mode == "seq-mean-token-sum":
        return per_seq_sum[has].mean()
    raise ValueError(f"loss_agg={mode!r}: choose from token-mean, seq-mean-token-mean, seq-mean-token-sum")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    m = mask.to(x.dtype)
    return float((x * m).sum() / m.sum().clamp_min(1.0))


def token_log_ratio(logp: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    return (logp - logp_old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]


def seq_log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = (1/|y_i|) sum_t m_t (lp_t - lp_old_t)  (GSPO geometric mean), [B]."""
    m = mask.to(logp.dtype)
    return ((logp - logp_old) * m).sum(-1) / m.sum(-1).clamp_min(1.0)


def turn_log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Per token, log s_{i,k} of the token's turn k: the geometric-mean log-ratio over the masked tokens of that
    turn (ATPO), [B, T]."""
    m = mask.to(logp.dtype)
    turn_ids = turn_ids.long().clamp_min(0)
    n_turns = int(turn_ids.max()) + 1 if turn_ids.numel() else 1
    onehot = torch.nn.functional.one_hot(turn_ids, n_turns).to(logp.dtype) * m[..., None]  # [B, T, K]
    sums = torch.einsum("bt,btk->bk", logp - logp_old, onehot)  # [B, K]
    counts = onehot.sum(1).clamp_min(1.0)  # [B, K]
    return torch.gather(sums / counts, 1, turn_ids)  # [B, T]


def _clip_stats(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, lo: float, hi: float) -> dict[str, float]:
    clipped_low = (ratio < lo) & (adv < 0)
    clipped_high = (ratio > hi) & (adv > 0)
    return {"clipfrac_low": _masked_mean(clipped_low.float(), mask),
            "clipfrac_high": _masked_mean(clipped_high.float(), mask)}


def _sequence_clip_token_form(logp, logp_old, adv, mask, cfg, log_s):
    """GSPO-token form: log s_{i,t} = sg[log s] + lp_t - sg[lp_t] (value = the sequence/turn ratio, gradient per
    token), then the PPO clip on s with eps = (clip_low, clip_high)."""
    log_s_tok = (log_s.detach() + logp - logp.detach()).clamp(max=SEQ_LOG_RATIO_MAX)  # [B, T]
    s = torch.exp(log_s_tok)  # [B, T]
    lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    loss_t = torch.maximum(-adv * s, -adv * s.clamp(lo, hi))  # [B, T]
    stats = {"ratio_mean": _masked_mean(s.detach(), mask), **_clip_stats(s.detach(), adv, mask, lo, hi)}
    return aggregate(loss_t, mask, cfg.loss_agg), stats


# --- the losses --------------------------------------------------------------------------------------------------------
@register("grpo")
def grpo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """PPO-clip at token level, L_t = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); for A<0 and c>0 the dual clip
    L_t = min(L_t, -A c)."""
    adv = _token_advantages(advantages, mask)
    r = torch.exp(token_log_ratio(logp, logp_old))  # [B, T]
    lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    loss_t = torch.maximum(-adv * r, -adv * r.clamp(lo, hi))  # [B, T]
    stats = {"ratio_mean": _masked_mean(r.detach(), mask), **_clip_stats(r.detach(), adv, mask, lo, hi)}
    c = getattr(cfg, "dual_clip_c", 0.0) or 0.0
    if c > 0:
        dual = torch.minimum(loss_t, -adv * c)
        loss_t = torch.where(adv < 0, dual, loss_t)
    return aggregate(loss_t, mask, cfg.loss_agg), stats


@register("dapo")
def dapo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """DAPO's loss is the GRPO token clip; clip-higher, token-mean and dynamic sampling come from its preset."""
    return grpo_loss(logp, logp_old, advantages, mask, cfg)


@register("gspo")
def gspo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """GSPO: L_i = max(-A s_i, -A clip(s_i, 1-eps_low, 1+eps_high)) with the sequence ratio s_i."""
    adv = _token_advantages(advantages, mask)
    log_s = seq_log_ratio(logp, logp_old, mask)[:, None].expand_as(logp)  # [B, T]
    return _sequence_clip_token_form(logp, logp_old, adv, mask, cfg, log_s)


@register("sampo")
def sampo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """SAMPO's loss term is GSPO's sequence clip; its other parts (GiGPO step advantages, dynamic filtering, the
    low-IS mask, format penalty, k3 KL) are configured by its preset and applied by the loop."""
    return gspo_loss(logp, logp_old, advantages, mask, cfg)


@register("atpo")
def atpo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """ATPO (AT^2PO): GSPO-token form with the turn ratio s_{i,k} of each token's turn. Without turn ids (one turn
    per sample) it equals GSPO."""
    adv = _token_advantages(advantages, mask)
    if turn_ids is None:
        log_s = seq_log_ratio(logp, logp_old, mask)[:, None].expand_as(logp)
    else:
        if turn_ids.dim() == 1:
            turn_ids = turn_ids[:, None].expand_as(mask)
        log_s = turn_log_ratio(logp, logp_old, mask, turn_ids)
    return _sequence_clip_token_form(logp, logp_old, adv, mask, cfg, log_s)


@register("cispo")
def cispo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """CISPO: L_t = -sg[clip(r_t, 1-eps_low, 1+eps_high)] * A * lp_t. Tolerant: every token keeps a gradient."""
    adv = _token_advantages(advantages, mask)
    r = torch.exp(token_log_ratio(logp, logp_old)).detach()  # [B, T]
    lo, hi = max(0.0, 1.0 - cfg.clip_low), 1.0 + cfg.clip_high
    weight = r.clamp(lo, hi)
    loss_t = -weight * adv * logp  # [B, T]
    stats = {"ratio_mean": _masked_mean(r, mask), **_clip_stats(r, adv, mask, lo, hi)}
    return aggregate(loss_t, mask, cfg.loss_agg), stats


@register("sapo")
def sapo_loss(logp, logp_old, advantages, mask, cfg, turn_ids=None):
    """SAPO: L_t = -(4/tau) sigmoid(tau (r_t - 1)) A, tau = tau_pos if A > 0 else tau_neg (a soft gate whose
    gradient weight 4 p (1-p) decays smoothly away from r = 1)."""
    adv = _token_advantages(advantages, mask)
    r = torch.exp(token_log_ratio(logp, logp_old))  # [B, T]
    tau = torch.where(adv > 0, torch.full_like(r, cfg.tau_pos), torch.full_like(r, cfg.tau_neg))
    loss_t = -(4.0 / tau) * torch.sigmoid(tau * (r - 1.0)) * adv  # [B, T]
    stats = {"ratio_mean": _masked_mean(r.detach(), mask)}
    return aggregate(loss_t, mask, cfg.loss_agg), stats


# --- pieces the loop adds to any loss ----------------------------------------------------------------------------------
def nalis_sample_mask(logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      delta: float) -> torch.Tensor:
    """Negative-advantage low-IS sequence mask (ARLArena; DeepSeek-V3.2 off-policy mask): 0 for sample i when
    mean_t A_{i,t} < 0 and mean_t (lp_old - lp) > delta (i.e. s_i < exp(-delta)), else 1. Returns [B] float."""
    m = mask.to(logp.dtype)
    n = m.sum(-1).clamp_min(1.0)
    adv = _token_advantages(advantages, mask)
    mean_adv = (adv * m).sum(-1) / n  # [B]
    mean_drift = ((logp_old - logp).detach() * m).sum(-1) / n  # [B]
    drop = (mean_adv < 0) & (mean_drift > delta)
    return (~drop).to(logp.dtype)


def opsm_sample_mask(logp: torch.Tensor, logp_behaviour: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     delta: float) -> torch.Tensor:
    """Off-policy sequence mask of DeepSeek-V3.2 (section 3.1, "Off-Policy Sequence Masking"): 0 for sample i when
    its advantage is negative (mean_t A_{i,t} < 0) and (1/|y_i|) sum_t (lp_behaviour - lp) > delta, else 1. [B] float.

    The formula is the one of ``nalis_sample_mask``; what differs is the old policy it measures against: DeepSeek's
    pi_old is the *sampling* policy (the inference engine's log-probs, as ms-swift and slime take it when rollout
    log-probs exist), so the drift counts every source of off-policyness, the rollout lag and the sampler's precision
    included, where ARLArena's mask measures it from the trainer's recompute (only the updates within the step)."""
    m = mask.to(logp.dtype)
    n = m.sum(-1).clamp_min(1.0)
    mean_adv = (_token_advantages(advantages, mask) * m).sum(-1) / n  # [B]
    mean_drift = ((logp_behaviour - logp).detach() * m).sum(-1) / n  # [B] a k1 estimate of KL(pi_behaviour || pi)
    return (~((mean_adv < 0) & (mean_drift > delta))).to(logp.dtype)


def tis_token_weight(logp_old: torch.Tensor, logp_rollout: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
    RL training"; verl's rollout_is=token, TRL's vllm_importance_sampling_correction): the token weight
    w_t = min(pi_old(y_t) / pi_sampler(y_t), C) = min(exp(lp_old - lp_rollout), C), no gradient, [B, T].

    The policy-gradient estimator assumes the samples came from pi_old; when they came from a different sampler
    (reduced precision, or weights some updates old as with --rollout-lag) w re-weights them towards pi_old, and the
    cap C bounds the variance a rare token with a tiny sampler probability would bring. Weights only ever scale a
    token's loss (w > 0), so every loss here takes them as a scaling of the advantage."""
    return torch.exp((logp_old - logp_rollout).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(max=cap).detach()


# --- the always-on corrections, in the order they apply ------------------------------------------------------------------
@dataclass(frozen=True)
class CorrectionInputs:
    """What a correction may read: [B, T] tensors of one mini-batch (``logp`` has gradient; ``logp_rollout`` is the
    sampler's own log-probs, None when the caller has none) and ``advantages`` [B] or [B, T]."""
    logp: torch.Tensor
    logp_old: torch.Tensor
    logp_rollout: Optional[torch.Tensor]
    advantages: torch.Tensor
    mask: torch.Tensor
    truncated: Optional[torch.Tensor] = None  # [B] bool: the response hit the length cap (None: unknown)


CorrectionFn = Callable[[CorrectionInputs, Any], tuple[torch.Tensor, torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Correction:
    """An always-on off-policy mitigation: ``enabled(cfg)`` reads its config field; ``apply(inputs, cfg)`` returns
    the new (token mask [B, T], token advantages [B, T], stats); ``off`` are its stats when it is off (logged either
    way, so runs with and without it have the same columns)."""
    enabled: Callable[[Any], bool]
    apply: CorrectionFn
    off: dict[str, float]


CORRECTIONS: dict[str, Correction] = {}


def register_correction(name: str, enabled: Callable[[Any], bool], off: dict[str, float]
                        ) -> Callable[[CorrectionFn], CorrectionFn]:
    def deco(fn: CorrectionFn) -> CorrectionFn:
        CORRECTIONS[name] = Correction(enabled, fn, dict(off))
        return fn
    return deco


def _masked_share(keep: torch.Tensor, mask: torch.Tensor) -> float:
    has = mask.sum(-1) > 0
    return float(((1 - keep) * has).sum() / has.sum().clamp_min(1))


def _nalis_on(cfg: Any) -> bool:
    return cfg.resolved_nalis_mask() if hasattr(cfg, "resolved_nalis_mask") else bool(getattr(cfg, "nalis_mask", False))


@register_correction("nalis", _nalis_on, {"nalis_masked_frac": 0.0})
def nalis_correction(x: CorrectionInputs, cfg: Any):
    """ARLArena's negative-advantage low-IS mask against the trainer's logp_old (config: nalis_mask, nalis_delta)."""
    keep = nalis_sample_mask(x.logp, x.logp_old, x.advantages, x.mask, cfg.nalis_delta)  # [B]
    return x.mask * keep[:, None], x.advantages, {"nalis_masked_frac": _masked_share(keep, x.mask)}


@register_correction("opsm", lambda cfg: getattr(cfg, "opsm_delta", None) is not None, {"opsm_masked_frac": 0.0})
def opsm_correction(x: CorrectionInputs, cfg: Any):
    """DeepSeek-V3.2's off-policy sequence mask against the sampler's log-probs (config: opsm_delta); without them
    (a caller that has none) against logp_old, as ms-swift falls back."""
    behaviour = x.logp_rollout if x.logp_rollout is not None else x.logp_old
    keep = opsm_sample_mask(x.logp, behaviour, x.advantages, x.mask, cfg.opsm_delta)  # [B]
    return x.mask * keep[:, None], x.advantages, {"opsm_masked_frac": _masked_share(keep, x.mask)}


@register_correction("overlong", lambda cfg: bool(getattr(cfg, "mask_truncated", False)),
                     {"truncated_masked_frac": 0.0})
def overlong_correction(x: CorrectionInputs, cfg: Any):
    """DAPO's overlong filtering (config: mask_truncated; TRL mask_truncated_completions): a response cut off at the
    length cap is left out of the policy-gradient term, whatever its advantage, so that a truncated answer is
    neither reinforced nor punished for a length it was not allowed to finish. Without flags nothing is masked."""
    if x.truncated is None:
        return x.mask, x.advantages, {"truncated_masked_frac": 0.0}
    keep = (~x.truncated.bool()).to(x.mask.dtype)  # [B]
    return x.mask * keep[:, None], x.advantages, {"truncated_masked_frac": _masked_share(keep, x.mask)}


@register_correction("tis", lambda cfg: getattr(cfg, "tis_cap", None) is not None,
                     {"tis_weight_mean": 1.0, "tis_truncated_frac": 0.0})
def tis_correction(x: CorrectionInputs, cfg: Any):
    """Truncated IS (config: tis_cap): the advantage of every token scaled by min(pi_old / pi_sampler, C). Without
    sampler log-probs there is nothing to correct (w = 1)."""
    rollout = x.logp_rollout if x.logp_rollout is not None else x.logp_old
    raw = torch.exp((x.logp_old - rollout).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # [B, T]
    w = tis_token_weight(x.logp_old, rollout, cfg.tis_cap)  # [B, T]
    adv = _token_advantages(x.advantages, x.mask) * w
    return x.mask, adv, {"tis_weight_mean": _masked_mean(w, x.mask),
                         "tis_truncated_frac": _masked_mean((raw > cfg.tis_cap).float(), x.mask)}


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k3 = exp(x) - x - 1 with x = lp_ref - lp, clamped to +-10 (verl low_var_kl), [B, T]."""
    x = (logp_ref - logp).clamp(-10.0, 10.0)
    return (torch.exp(x) - x - 1.0).clamp(-10.0, 10.0)


def policy_loss(cfg: Any, logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                logp_ref: torch.Tensor | None = None, turn_ids: torch.Tensor | None = None,
                logp_rollout: torch.Tensor | None = None, entropy: torch.Tensor | None = None,
                truncated: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The full training loss of one mini-batch: the algorithm's loss after the enabled CORRECTIONS (masks and
    weights, each computed from the uncorrected advantages' signs) plus kl_coef * k3 KL to the reference, minus
    ent_coef * the aggregated token ``entropy`` [B, T] (with gradient; verl's entropy bonus) when given.
    ``truncated`` [B] flags responses cut off at the length cap (the overlong correction reads it)."""
    mask = kl_mask = mask.to(logp.dtype)
    stats: dict[str, float] = {}
    for correction in CORRECTIONS.values():
        if correction.enabled(cfg):
            mask, advantages, extra = correction.apply(
                CorrectionInputs(logp, logp_old, logp_rollout, advantages, mask, truncated), cfg)
            stats.update(extra)
        else:
            stats.update(correction.off)
    loss, loss_stats = get_loss(cfg.algo)(logp, logp_old, advantages, mask, cfg, turn_ids=turn_ids)
    stats.update(loss_stats)
    stats["pg_loss"] = float(loss.detach())
    if logp_ref is not None and cfg.kl_coef > 0:
        # the KL anchor applies to every sample, also those the low-IS mask drops from the policy-gradient term
        kl = aggregate(k3_kl(logp, logp_ref), kl_mask, cfg.loss_agg)
        loss = loss + cfg.kl_coef * kl
        stats["kl_loss"] = float(kl.detach())
    ent_coef = float(getattr(cfg, "ent_coef", 0.0) or 0.0)
    if entropy is not None and ent_coef > 0:
        # the bonus, like the KL anchor, covers every sample (verl adds it over the response mask)
        ent = aggregate(entropy, kl_mask, cfg.loss_agg)
        loss = loss - ent_coef * ent
        stats["entropy_bonus"] = float(ent.detach())
    return loss, stats
