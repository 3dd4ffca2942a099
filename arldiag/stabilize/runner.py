"""The Stabilizer: runs a policy after each step and applies what it admits, within limits a policy cannot lift.

    stab = Stabilizer("default", target=trainer_adapter, record=collector.record_action)
    ... after each step:  stab.on_result(monitor_step_result)

Guarantees (checked here, not left to the policy, so a user's policy inherits them):
  * idempotent: an action that would change nothing is refused (the mask already on with that delta or a
    smaller one, sequence clipping already on, the learning rate already at its floor);
  * bounded: the learning rate is scaled down at most ``max_lr_scalings`` times and never below
    ``lr_floor`` x its initial value; the clip range is tightened at most ``max_clip_tightenings`` times and
    never below ``min_clip``; factors must lie in (0, 1);
  * a rollback cannot loop: at most ``max_rollbacks``, each checkpoint is restored at most once (a checkpoint
    taken after a rollback needs the state to be calm again, ok or watch (``checkpoint_on``): progress), and none
    without such a checkpoint;
  * cooldown: after a decision that applied anything, the next ``cooldown`` steps apply nothing.
Every applied action is recorded (``record(**row)``: the run's ``actions`` table) with the alert state and the
finding that triggered it. A failing trainer method is logged and skipped: stabilizing never kills the run.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from arldiag.stabilize.actions import ACTION_KINDS, Action, Firing, Policy, Situation, Stabilizable, Taken
from arldiag.stabilize.policies import resolve_policy

log = logging.getLogger("arldiag")
LEVEL_NAMES = ("ok", "watch", "warning", "critical")


@dataclass(frozen=True)
class Limits:
    cooldown: int = 5                 # steps after a decision that applied anything during which nothing is applied
    max_lr_scalings: int = 3          # learning-rate scalings per run
    lr_floor: float = 0.1             # the learning rate never goes below this share of its initial value
    max_clip_tightenings: int = 2     # clip-range tightenings per run
    min_clip: float = 0.02            # eps_low / eps_high never go below this
    max_rollbacks: int = 2            # rollbacks per run
    checkpoint_every: int = 5         # steps between in-memory checkpoints while the state is at most checkpoint_on
    # the highest alert state in which a checkpoint may be taken. "watch" (one weak signal) is common on healthy
    # runs under the calibrated defaults (89 of stress seed 4's 200 steps): with "ok" only, the checkpoint a
    # rollback restores can be 90 steps old (stress seed 0 rolled back to step 0 at step 91)
    checkpoint_on: str = "watch"

    def __post_init__(self) -> None:
        for name in ("cooldown", "max_lr_scalings", "max_clip_tightenings", "max_rollbacks"):
            if getattr(self, name) < 0:
                raise ValueError(f"stabilize.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.checkpoint_every < 1:
            raise ValueError(f"stabilize.checkpoint_every must be >= 1, got {self.checkpoint_every!r}")
        if self.checkpoint_on not in ("ok", "watch"):
            raise ValueError(f"stabilize.checkpoint_on must be 'ok' or 'watch', got {self.checkpoint_on!r}")
        if not 0.0 < self.lr_floor <= 1.0:
            raise ValueError(f"stabilize.lr_floor must be in (0, 1], got {self.lr_floor!r}")
        if not self.min_clip > 0:
            raise ValueError(f"stabilize.min_clip must be > 0, got {self.min_clip!r}")


def _factor(a: Action) -> float:
    f = float(a.params.get("factor", float("nan")))
    if not 0.0 < f < 1.0:
        raise ValueError(f"{a.kind}: factor must be in (0, 1), got {a.params.get('factor')!r}")
    return f


def admit(a: Action, s: Situation, limits: Limits) -> tuple[dict | None, str]:
    """(the resolved parameters to apply, "") when ``a`` may run now, else (None, why not). Pure."""
    if a.kind not in s.supports:
        return None, f"the trainer does not support {a.kind}"
    cur, n = s.settings, len(s.taken(a.kind))
    try:
        if a.kind == "nalis_mask":
            delta = float(a.params.get("delta", cur.get("nalis_delta", 0.223)))
            if not delta > 0 or math.isinf(delta):
                return None, f"delta must be > 0, got {delta!r}"
            if cur.get("nalis_mask") and float(cur.get("nalis_delta", math.inf)) <= delta:
                return None, "the mask is already on with this delta or a smaller one"
            return {"delta": delta}, ""
        if a.kind == "clip":
            f = _factor(a)
            if n >= limits.max_clip_tightenings:
                return None, f"clip already tightened {n} times (max_clip_tightenings)"
            lo = max(float(cur["clip_low"]) * f, min(limits.min_clip, float(cur["clip_low"])))
            hi = max(float(cur["clip_high"]) * f, min(limits.min_clip, float(cur["clip_high"])))
            if (lo, hi) == (float(cur["clip_low"]), float(cur["clip_high"])):
                return None, "the clip range is already at min_clip"
            return {"clip_low": lo, "clip_high": hi}, ""
        if a.kind == "seq_clip":
            if cur.get("seq_clip"):
                return None, "sequence-level clipping is already on"
            return {"clip_low": float(a.params.get("clip_low", 3e-3)),
                    "clip_high": float(a.params.get("clip_high", 4e-3))}, ""
        if a.kind == "lr_scale":
            f = _factor(a)
            if n >= limits.max_lr_scalings:
                return None, f"learning rate already scaled {n} times (max_lr_scalings)"
            floor = float(s.initial["lr"]) * limits.lr_floor
            lr = max(float(cur["lr"]) * f, floor)
            if not lr < float(cur["lr"]):
                return None, f"the learning rate is at its floor ({floor:g})"
            return {"factor": f, "lr": lr}, ""
        if a.kind == "rollback":
            if s.checkpoint_step is None:
                return None, "no checkpoint taken while the state was ok since the last rollback"
            if n >= limits.max_rollbacks:
                return None, f"already rolled back {n} times (max_rollbacks)"
            if any(t.outcome.get("to_step") == s.checkpoint_step for t in s.taken("rollback")):
                return None, f"already rolled back to step {s.checkpoint_step}"
            return {"to_step": s.checkpoint_step}, ""
        if a.kind == "stop":
            return ({}, "") if n == 0 else (None, "already stopped")
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return None, f"unknown action {a.kind!r}"  # pragma: no cover - Action validates its kind


# action kind -> how a Stabilizable carries it out (a dict of callables: no string dispatch of code)
APPLY: dict[str, Callable[[Stabilizable, Mapping[str, Any], str], dict]] = {
    "nalis_mask": lambda t, p, why: t.set_nalis_mask(p["delta"]),
    "clip": lambda t, p, why: t.set_clip(p["clip_low"], p["clip_high"]),
    "seq_clip": lambda t, p, why: t.use_sequence_clip(p["clip_low"], p["clip_high"]),
    "lr_scale": lambda t, p, why: t.set_lr(p["lr"]),
    "rollback": lambda t, p, why: t.rollback(),
    "stop": lambda t, p, why: t.stop(why),
}


def firings(signals: Mapping[str, Any]) -> dict[str, Firing]:
    """The Monitor's per-step signals (detectors.base.Signal, level 1..3) as Firing objects."""
    return {n: Firing(LEVEL_NAMES[int(sg.level)], str(sg.metric), float(sg.value), str(getattr(sg, "note", "")))
            for n, sg in signals.items()}


class Stabilizer:
    """Args:
        policy: a registered name, ``module:function`` or a callable ``policy(Situation) -> list[Action]``.
        target: the trainer's Stabilizable adapter.
        record: ``record(**row)`` for each applied action (e.g. Collector.record_action); None records nothing.
        limits: Limits (bounds a policy cannot lift).
    """

    def __init__(self, policy: str | Policy, target: Stabilizable, record: Callable[..., Any] | None = None,
                 limits: Limits | None = None, log_fn: Callable[[str], None] | None = None) -> None:
        self.policy_name = policy if isinstance(policy, str) else getattr(policy, "__name__", "policy")
        self.policy = resolve_policy(policy)
        self.target, self.record, self.limits = target, record, limits or Limits()
        self.log = log_fn or log.info
        self.initial = dict(target.settings())
        self.history: list[Taken] = []
        self.checkpoint_step: int | None = None
        self._last_checkpoint: int | None = None
        self._state, self._state_since = "ok", 0
        self.refused: dict[tuple[str, str], int] = {}   # (kind, why) -> count, for the end-of-run summary
        self.stopped = False

    def on_result(self, res: Any) -> list[Taken]:
        """Feed a detectors.engine.StepResult (what Monitor.on_step returns)."""
        return self.on_step(res.step, res.state, res.previous_state, res.risk, firings(res.signals), res.top,
                            getattr(res, "reading", "ok"))

    def on_step(self, step: int, state: str, previous_state: str, risk: float, findings: Mapping[str, Firing],
                top: str | None, reading: str = "ok") -> list[Taken]:
        if state != self._state:
            self._state, self._state_since = state, step
        s = self.situation(step, state, previous_state, risk, findings, top, reading)
        applied: list[Taken] = []
        try:
            proposed = list(self.policy(s) or [])
        except Exception as exc:  # noqa: BLE001 - a broken policy must not take training down
            self.log(f"[arldiag] auto-stabilize: policy {self.policy_name} failed at step {step} "
                     f"({type(exc).__name__}: {exc}); nothing applied")
            proposed = []
        last = s.last_action_step
        cooling = last is not None and step - last < self.limits.cooldown
        for a in sorted(proposed, key=lambda a: ACTION_KINDS.index(a.kind)):
            params, why = (None, f"cooldown ({self.limits.cooldown} steps after step {last})") if cooling \
                else admit(a, s, self.limits)
            if params is None:
                self.refused[(a.kind, why)] = self.refused.get((a.kind, why), 0) + 1
                continue
            try:
                outcome = dict(APPLY[a.kind](self.target, params, a.reason) or {})
            except Exception as exc:  # noqa: BLE001
                self.log(f"[arldiag] auto-stabilize: {a.kind} failed at step {step} ({type(exc).__name__}: {exc})")
                continue
            outcome.update({k: v for k, v in params.items() if k not in outcome})
            taken = Taken(step, dataclasses.replace(a, params=dict(params)), outcome)
            self.history.append(taken)
            applied.append(taken)
            s = dataclasses.replace(s, settings=dict(self.target.settings()), history=tuple(self.history))
            if a.kind == "rollback":
                self.checkpoint_step = None  # consumed: the next rollback needs a new calm checkpoint
                s = dataclasses.replace(s, checkpoint_step=None)
            if a.kind == "stop":
                self.stopped = True
            self.log(f"[arldiag] auto-stabilize step {step}: {a.kind} {_fmt(params)} "
                     f"(trigger {a.detector or '-'}; state {state}) - {a.reason}")
            self._record(taken, s, previous_state)
        # calm: neither the state nor this step's reading above checkpoint_on (a critical reading is no checkpoint)
        calm = all(x in LEVEL_NAMES and LEVEL_NAMES.index(x) <= LEVEL_NAMES.index(self.limits.checkpoint_on)
                   for x in (state, reading))
        if calm and "rollback" in s.supports and not applied and (
                self._last_checkpoint is None or step - self._last_checkpoint >= self.limits.checkpoint_every):
            try:
                self.target.checkpoint(step)
                self.checkpoint_step = self._last_checkpoint = step
            except Exception as exc:  # noqa: BLE001
                self.log(f"[arldiag] auto-stabilize: checkpoint failed at step {step} ({type(exc).__name__}: {exc})")
        return applied

    def situation(self, step: int, state: str, previous_state: str, risk: float, findings: Mapping[str, Firing],
                  top: str | None, reading: str = "ok") -> Situation:
        return Situation(step=step, state=state, previous_state=previous_state, risk=float(risk),
                         findings=dict(findings), top=top, settings=dict(self.target.settings()),
                         initial=self.initial, history=tuple(self.history), checkpoint_step=self.checkpoint_step,
                         supports=frozenset(self.target.supports), state_since=self._state_since, reading=reading)

    def _record(self, t: Taken, s: Situation, previous_state: str) -> None:
        if self.record is None:
            return
        f = s.findings.get(t.action.detector)
        alert = (f"alert state {previous_state} -> {s.state}" if previous_state != s.state
                 else f"alert state {s.state} since step {s.state_since}")
        evidence = {"finding": dataclasses.asdict(f) if f else None,
                    "findings": {n: dataclasses.asdict(x) for n, x in s.findings.items()}, "alert": alert}
        try:
            self.record(step=t.step, action=t.action.kind, params=dict(t.action.params), detector=t.action.detector,
                        state=s.state, risk=s.risk, reason=t.action.reason, policy=self.policy_name,
                        outcome=dict(t.outcome), evidence=evidence)
        except Exception as exc:  # noqa: BLE001
            self.log(f"[arldiag] auto-stabilize: recording {t.action.kind} failed ({type(exc).__name__}: {exc})")

    def summary(self) -> str:
        """One line for the end of the run: what was applied, and what the limits refused (how often)."""
        done = ", ".join(f"{t.action.kind}@{t.step}" for t in self.history) or "none"
        refused = "; ".join(f"{kind} x{n} ({why})" for (kind, why), n in sorted(self.refused.items()))
        return f"auto-stabilize ({self.policy_name}): applied {done}" + (f"; refused {refused}" if refused else "")


def _fmt(p: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items())
