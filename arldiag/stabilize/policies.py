"""Built-in stabilizing policies, registered through the same hook a user's policy uses.

    from arldiag.stabilize import register_policy, Action

    @register_policy("mine")
    def mine(s):                       # s: Situation -> list of Action
        if s.state == "critical":
            return [Action("lr_scale", {"factor": 0.5}, detector=s.top or "", reason="critical")]
        return []

``arldiag train --auto-stabilize NAME`` picks a registered policy; ``--auto-stabilize package.module:function``
imports a user's function (no registration needed); ``[stabilize] policy = ...`` in arldiag.toml does the same.

The default policy was designed on the dev seeds (0-2) of the suite's collapsing CISPO setting, where the
neg-adv low-IS mask alone kept every seed learning (sample_runs/README.md) and the collapse of seed 0 shows as a
critical ppo_kl_spike one step before format and success fall to zero (a rollback is the only lever left then).
"""
from __future__ import annotations

import importlib
from typing import Callable

from arldiag.detectors.registry import REGISTRY
from arldiag.levels import rank
from arldiag.stabilize.actions import Action, Policy, Situation

POLICIES: dict[str, Policy] = {}


def with_role(role: str) -> tuple[str, ...]:
    """The registered detectors that declare closed-loop role ``role`` (``Detector.loop_role``), by their
    ``loop_priority`` (then catalog order): the order ``leading`` breaks ties in."""
    names = list(REGISTRY)
    return tuple(sorted((n for n, d in REGISTRY.items() if role in d.loop_roles),
                        key=lambda n: (REGISTRY[n].loop_priority, names.index(n))))


# Findings that mean "the update is too far off-policy" (ARLArena: negative-advantage low-IS sequences drive the
# collapse of tolerant-clipping losses; KL and gradient spikes come with it): the low-IS mask and a smaller
# step answer them.
OFF_POLICY = with_role("off_policy")
# Findings that mean the policy itself has already broken: only a rollback brings the weights back.
BROKEN = with_role("broken")
# Failures the masks do not touch (the real runs in ../shared/real_runs/ collapse through them with few off-policy
# signs): an entropy that runs away (an entropy bonus or clip-higher pushing it) and responses piling up at the
# length cap.
ENTROPY = with_role("entropy")
LENGTH = with_role("length")
NALIS_DELTA = 3e-3     # ARLArena's scripts' delta (the documented 0.223 almost never fires at the suite's scale)
LR_FACTOR = 0.5
CLIP_FACTOR = 0.5
STOP_AFTER = 10        # steps of unbroken critical state after the last rollback before the default policy stops


def register_policy(name: str) -> Callable[[Policy], Policy]:
    """Decorator: make ``fn`` available as ``--auto-stabilize NAME``."""
    if not name or ":" in name:
        raise ValueError(f"policy name must be non-empty and without ':', got {name!r}")

    def deco(fn: Policy) -> Policy:
        if not callable(fn):
            raise ValueError(f"policy {name!r} must be callable, got {type(fn).__name__}")
        POLICIES[name] = fn
        return fn
    return deco


def resolve_policy(spec: str | Policy) -> Policy:
    """A registered name, ``module:function``, or a callable -> the policy callable (one-line errors)."""
    if callable(spec):
        return spec
    spec = str(spec).strip()
    if ":" not in spec:
        if spec not in POLICIES:
            raise ValueError(f"auto_stabilize: unknown policy {spec!r}; registered: {', '.join(sorted(POLICIES))} "
                             "(or give module:function)")
        return POLICIES[spec]
    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"auto_stabilize: cannot load {spec!r} ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise ValueError(f"auto_stabilize: {spec!r} is not callable")
    return fn


# ---- helpers -----------------------------------------------------------------------------------------------------
def leading(s: Situation, names: tuple[str, ...]) -> str | None:
    """The most severe firing finding among ``names`` (ties: the leading detector, then the order of ``names``:
    ``with_role`` gives it by loop_priority)."""
    hits = [n for n in names if n in s.findings]
    if not hits:
        return None
    return max(hits, key=lambda n: (rank(s.findings[n].level, 0), n == s.top, -names.index(n)))


def _why(s: Situation, name: str) -> str:
    f = s.findings.get(name)
    what = f"{name} {f.level}: {f.metric} = {f.value:.4g}" if f else name
    state = s.state if s.acting_state == s.state else f"{s.state} (critical reading)"
    return f"state {state} at step {s.step} ({what})"


# ---- built-in policies ---------------------------------------------------------------------------------------------
@register_policy("default")
def default_policy(s: Situation) -> list[Action]:
    """warning+ with an off-policy finding: switch on the neg-adv low-IS mask (delta 3e-3), or, with the mask
    already on, tighten the clip range by half at critical. warning+ with an entropy finding: switch the entropy bonus
    off, or without one bring an asymmetric clip band's eps_high back to eps_low (undo clip-higher). warning+ with a
    length finding: mask truncated responses out of the policy gradient. critical: roll back to the last calm
    checkpoint and halve the learning rate. Still critical STOP_AFTER steps after the last rollback with no calm checkpoint left: stop."""
    state = s.acting_state  # the alert state, or critical on a critical reading (Situation.acting_state)
    if state not in ("warning", "critical"):
        return []
    out: list[Action] = []
    cause = leading(s, OFF_POLICY)
    if cause is not None:
        if not s.settings.get("nalis_mask"):
            out.append(Action("nalis_mask", {"delta": NALIS_DELTA}, cause, _why(s, cause)))
        elif state == "critical" and not s.settings.get("seq_clip"):
            out.append(Action("clip", {"factor": CLIP_FACTOR}, cause, _why(s, cause)))
    out += entropy_and_length_levers(s, already=out)
    if state == "critical":
        cause = leading(s, BROKEN) or cause or s.top or ""
        if s.checkpoint_step is not None:
            out.append(Action("rollback", {}, cause, _why(s, cause) + f"; back to step {s.checkpoint_step}"))
        out.append(Action("lr_scale", {"factor": LR_FACTOR}, cause, _why(s, cause)))
        rollbacks = s.taken("rollback")
        if (rollbacks and s.state == "critical" and s.checkpoint_step is None
                and s.state_since <= s.step - STOP_AFTER and rollbacks[-1].step <= s.step - STOP_AFTER):
            out.append(Action("stop", {}, cause, _why(s, cause) + f"; critical since step {s.state_since} "
                                                                    "and no calm checkpoint left"))
    return out


def entropy_and_length_levers(s: Situation, already: list[Action] = ()) -> list[Action]:
    """The levers for an entropy finding (the bonus off; else clip-high back to clip-low) and a length finding
    (the truncation mask), each at warning or above, and asked for only when it would change something on a trainer
    that supports it."""
    out: list[Action] = []
    cur = s.settings
    # each lever answers its own finding at warning or above (a watch-level entropy reading while another finding
    # drives the state is no reason to change the entropy settings)
    strong = tuple(n for n, f in s.findings.items() if rank(f.level, 0) >= rank("warning"))
    cause = leading(s, tuple(n for n in ENTROPY if n in strong))
    if cause is not None:
        lo, hi = cur.get("clip_low"), cur.get("clip_high")
        if float(cur.get("ent_coef", 0.0) or 0.0) > 0 and "entropy_coef" in s.supports:
            out.append(Action("entropy_coef", {"factor": 0.0}, cause, _why(s, cause)))
        elif ("clip_high" in s.supports and lo is not None and hi is not None and float(hi) > float(lo) > 0
              and not any(a.kind == "clip" for a in already)):
            out.append(Action("clip_high", {"factor": float(lo) / float(hi)}, cause,
                              _why(s, cause) + f"; eps_high {float(hi):g} -> {float(lo):g}"))
    cause = leading(s, tuple(n for n in LENGTH if n in strong))
    if cause is not None and not cur.get("mask_truncated") and "truncation_mask" in s.supports:
        out.append(Action("truncation_mask", {}, cause, _why(s, cause)))
    return out


@register_policy("conservative")
def conservative_policy(s: Situation) -> list[Action]:
    """Never rolls back or stops: warning+ with an off-policy finding switches on the mask, with an entropy or length
    finding the default policy's levers for them; critical also halves the learning rate."""
    state = s.acting_state
    if state not in ("warning", "critical"):
        return []
    out: list[Action] = []
    cause = leading(s, OFF_POLICY)
    if cause is not None and not s.settings.get("nalis_mask"):
        out.append(Action("nalis_mask", {"delta": NALIS_DELTA}, cause, _why(s, cause)))
    out += entropy_and_length_levers(s)
    if state == "critical":
        c = cause or s.top or ""
        out.append(Action("lr_scale", {"factor": LR_FACTOR}, c, _why(s, c)))
    return out


@register_policy("levers")
def levers_policy(s: Situation) -> list[Action]:
    """Only the levers for the failures the masks do not touch: at warning or above, an entropy finding switches the
    entropy bonus off (else undoes clip-higher) and a length finding masks truncated responses. No mask, rollback,
    learning-rate change or stop: for a run that already has an off-policy correction on from step 0 (what
    `arldiag report` recommends first)."""
    return entropy_and_length_levers(s) if s.acting_state in ("warning", "critical") else []
