"""The actions of the closed loop, one ``ActionSpec`` each (ARLArena's levers, ../shared/spec/ALGORITHMS.md; the
rollback is the last resort). This module is the one place that says which actions exist: ``ACTIONS`` (kind ->
spec, in application order) is what the Stabilizer, its ``Limits``, ``Action``'s validation and arldiag.toml's
``[stabilize]`` section read.

A new action is a spec here (``collect(...)`` below lists it), a method on the controls of each trainer that
supports it (arldiag/trainer/stabilize.py, collectors/trl_stabilize.py, collectors/verl_loss.py) with its kind in
their ``supports``, and its case in tests/stabilize/test_action_declarations.py; docs/stabilize.md's tables are
rendered from these (``python -m arldiag.stabilize.actions_doc --write``).

Application order of one decision: a rollback first (it restores the optimizer, so settings changed afterwards
survive it), stop last. Standard library only: it runs inside the training process.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from arldiag.stabilize.spec import ActionSpec, Limit, collect, count_limit

if TYPE_CHECKING:  # pragma: no cover
    from arldiag.stabilize.actions import Action, Situation


def _factor(a: "Action", zero_ok: bool = False) -> float:
    """The action's ``factor``: in (0, 1), or [0, 1) where 0 switches the setting off (``zero_ok``)."""
    f = float(a.params.get("factor", float("nan")))
    if not (0.0 <= f < 1.0 if zero_ok else 0.0 < f < 1.0):
        raise ValueError(f"{a.kind}: factor must be in {'[0, 1)' if zero_ok else '(0, 1)'}, "
                         f"got {a.params.get('factor')!r}")
    return f


def _cut(bound: float, f: float, limits) -> float:
    """A clip bound times ``f``, floored at min_clip (a bound already below min_clip is not raised to it)."""
    return max(bound * f, min(limits.min_clip, bound))


# ---- rollback ------------------------------------------------------------------------------------------------------
def admit_rollback(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """Only to a calm checkpoint taken since the last rollback, each checkpoint once, at most max_rollbacks."""
    n = len(s.taken(a.kind))
    if s.checkpoint_step is None:
        return None, "no checkpoint taken while the state was ok since the last rollback"
    if n >= limits.max_rollbacks:
        return None, f"already rolled back {n} times (max_rollbacks)"
    if any(t.outcome.get("to_step") == s.checkpoint_step for t in s.taken("rollback")):
        return None, f"already rolled back to step {s.checkpoint_step}"
    return {"to_step": s.checkpoint_step}, ""


ROLLBACK = ActionSpec(
    kind="rollback", order=10, method="rollback", restores_checkpoint=True,
    summary="restore the policy and optimizer state of the last checkpoint taken while the alert state was calm (ok "
            "or watch: `checkpoint_on`; the learning rate and loss settings stay as they are now)",
    limits=(count_limit("max_rollbacks", 2, "rollbacks per run (each checkpoint is restored at most once)"),),
    admit=admit_rollback, apply=lambda t, p, why: t.rollback())


# ---- nalis_mask ----------------------------------------------------------------------------------------------------
def admit_nalis_mask(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """Idempotent: refused while the mask is on with this delta or a smaller (stricter) one."""
    cur = s.settings
    delta = float(a.params.get("delta", cur.get("nalis_delta", 0.223)))
    if not delta > 0 or math.isinf(delta):
        return None, f"delta must be > 0, got {delta!r}"
    if cur.get("nalis_mask") and float(cur.get("nalis_delta", math.inf)) <= delta:
        return None, "the mask is already on with this delta or a smaller one"
    return {"delta": delta}, ""


NALIS_MASK = ActionSpec(
    kind="nalis_mask", order=20, method="set_nalis_mask",
    summary="switch on the negative-advantage low-IS sequence mask (ARLArena; DeepSeek-V3.2 off-policy mask): a "
            "sample with mean A < 0 and mean(logp_old - logp) > delta is left out of the policy-gradient term",
    params={"delta": "the mask's threshold on mean(logp_old - logp), > 0 (default: the trainer's current one)"},
    settings=("nalis_mask", "nalis_delta"),
    admit=admit_nalis_mask, apply=lambda t, p, why: t.set_nalis_mask(p["delta"]))


# ---- truncation_mask -----------------------------------------------------------------------------------------------
def admit_truncation_mask(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """Idempotent: refused while truncated responses are already masked."""
    if s.settings.get("mask_truncated"):
        return None, "truncated responses are already masked"
    return {}, ""


TRUNCATION_MASK = ActionSpec(
    kind="truncation_mask", order=25, method="set_truncation_mask",
    summary="leave responses that hit the length cap out of the policy-gradient term (DAPO's overlong filtering; "
            "TRL `mask_truncated_completions`): a cut-off answer is neither reinforced nor punished for its length",
    settings=("mask_truncated",),
    admit=admit_truncation_mask, apply=lambda t, p, why: t.set_truncation_mask())


# ---- seq_clip ------------------------------------------------------------------------------------------------------
SEQ_CLIP_LOW, SEQ_CLIP_HIGH = 3e-3, 4e-3  # GSPO's sequence-ratio band (its paper's values)


def admit_seq_clip(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    if s.settings.get("seq_clip"):
        return None, "sequence-level clipping is already on"
    return {"clip_low": float(a.params.get("clip_low", SEQ_CLIP_LOW)),
            "clip_high": float(a.params.get("clip_high", SEQ_CLIP_HIGH))}, ""


SEQ_CLIP = ActionSpec(
    kind="seq_clip", order=30, method="use_sequence_clip",
    summary="move to sequence-level clipping (GSPO's sequence ratio) with its own band",
    params={"clip_low": f"lower band of the sequence ratio (default {SEQ_CLIP_LOW:g})",
            "clip_high": f"upper band of the sequence ratio (default {SEQ_CLIP_HIGH:g})"},
    settings=("seq_clip",),
    admit=admit_seq_clip, apply=lambda t, p, why: t.use_sequence_clip(p["clip_low"], p["clip_high"]))


# ---- clip ----------------------------------------------------------------------------------------------------------
def admit_clip(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """eps_low, eps_high *= factor, not below min_clip (nor raised to it), at most max_clip_tightenings times."""
    cur, n = s.settings, len(s.taken(a.kind))
    f = _factor(a)
    if n >= limits.max_clip_tightenings:
        return None, f"clip already tightened {n} times (max_clip_tightenings)"
    lo, hi = _cut(float(cur["clip_low"]), f, limits), _cut(float(cur["clip_high"]), f, limits)
    if (lo, hi) == (float(cur["clip_low"]), float(cur["clip_high"])):
        return None, "the clip range is already at min_clip"
    return {"clip_low": lo, "clip_high": hi}, ""


CLIP = ActionSpec(
    kind="clip", order=40, method="set_clip",
    summary="tighten the clip range: eps_low, eps_high *= factor (not below `min_clip`)",
    params={"factor": "multiplier in (0, 1) (required)"},
    limits=(count_limit("max_clip_tightenings", 2, "clip-range tightenings per run"),
            Limit("min_clip", 0.02, "eps_low / eps_high never go below this", ok=lambda v: v > 0, must="be > 0")),
    settings=("clip_low", "clip_high"),
    admit=admit_clip, apply=lambda t, p, why: t.set_clip(p["clip_low"], p["clip_high"]))


# ---- clip_high -----------------------------------------------------------------------------------------------------
def admit_clip_high(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """eps_high *= factor, not below min_clip (nor raised to it), at most max_clip_high_cuts times."""
    cur, n = float(s.settings["clip_high"]), len(s.taken(a.kind))
    f = _factor(a)
    if n >= limits.max_clip_high_cuts:
        return None, f"clip-high already lowered {n} times (max_clip_high_cuts)"
    hi = _cut(cur, f, limits)
    if hi == cur:
        return None, "eps_high is already at min_clip"
    return {"clip_high": hi}, ""


CLIP_HIGH = ActionSpec(
    kind="clip_high", order=45, method="set_clip_high",
    summary="lower the upper clip bound only: eps_high *= factor (not below `min_clip`); DAPO's clip-higher raises "
            "it for exploration, and an entropy that runs away is the cost of too much of it",
    params={"factor": "multiplier in (0, 1) (required)"},
    limits=(count_limit("max_clip_high_cuts", 2, "clip-high reductions per run (the clip action's `min_clip` bounds "
                                                 "it too)"),),
    settings=("clip_high",),
    admit=admit_clip_high, apply=lambda t, p, why: t.set_clip_high(p["clip_high"]))


# ---- entropy_coef --------------------------------------------------------------------------------------------------
def admit_entropy_coef(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """ent_coef *= factor (factor in [0, 1): 0 switches the bonus off); refused while there is no bonus."""
    cur = float(s.settings.get("ent_coef", 0.0) or 0.0)
    f = _factor(a, zero_ok=True)
    if not cur > 0:
        return None, "there is no entropy bonus to lower (ent_coef is 0)"
    return {"factor": f, "ent_coef": cur * f}, ""


ENTROPY_COEF = ActionSpec(
    kind="entropy_coef", order=47, method="set_entropy_coef",
    summary="lower the entropy bonus: ent_coef *= factor, 0 switches it off (verl `actor.entropy_coeff`); a bonus "
            "that outweighs the advantage drives the policy towards uniform",
    params={"factor": "multiplier in [0, 1) (required; 0: off)"},
    settings=("ent_coef",),
    admit=admit_entropy_coef, apply=lambda t, p, why: t.set_entropy_coef(p["ent_coef"]))


# ---- lr_scale ------------------------------------------------------------------------------------------------------
def admit_lr_scale(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    """lr *= factor, not below lr_floor x the initial rate, at most max_lr_scalings times."""
    cur, n = s.settings, len(s.taken(a.kind))
    f = _factor(a)
    if n >= limits.max_lr_scalings:
        return None, f"learning rate already scaled {n} times (max_lr_scalings)"
    floor = float(s.initial["lr"]) * limits.lr_floor
    lr = max(float(cur["lr"]) * f, floor)
    if not lr < float(cur["lr"]):
        return None, f"the learning rate is at its floor ({floor:g})"
    return {"factor": f, "lr": lr}, ""


LR_SCALE = ActionSpec(
    kind="lr_scale", order=50, method="set_lr",
    summary="multiply the learning rate (at most `max_lr_scalings` times, not below `lr_floor` x the initial rate)",
    params={"factor": "multiplier in (0, 1) (required)"},
    limits=(count_limit("max_lr_scalings", 3, "learning-rate scalings per run"),
            Limit("lr_floor", 0.1, "the learning rate never goes below this share of its initial value",
                  ok=lambda v: 0.0 < v <= 1.0, must="be in (0, 1]")),
    settings=("lr",),
    admit=admit_lr_scale, apply=lambda t, p, why: t.set_lr(p["lr"]))


# ---- stop ----------------------------------------------------------------------------------------------------------
def admit_stop(a: "Action", s: "Situation", limits) -> tuple[dict | None, str]:
    return ({}, "") if not s.taken(a.kind) else (None, "already stopped")


STOP = ActionSpec(
    kind="stop", order=60, method="stop", ends_run=True, summary="end the run",
    admit=admit_stop, apply=lambda t, p, why: t.stop(why))


ACTIONS: dict[str, ActionSpec] = collect(ROLLBACK, NALIS_MASK, TRUNCATION_MASK, SEQ_CLIP, CLIP, CLIP_HIGH, ENTROPY_COEF,
                                          LR_SCALE, STOP)
ACTION_KINDS: tuple[str, ...] = tuple(ACTIONS)  # in application order
