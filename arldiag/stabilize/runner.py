"""The Stabilizer: runs a policy after each step and applies what it admits, within limits a policy cannot lift.

    stab = Stabilizer("default", target=trainer_adapter, record=collector.record_action)
    ... after each step:  stab.on_result(monitor_step_result)

Guarantees (checked here, not left to the policy, so a user's policy inherits them; the per-action ones by each
action's ``ActionSpec.admit`` in kinds.py, within the bounds its ``limits`` add to ``Limits``):
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
from typing import Any, Callable, Mapping

from arldiag.levels import LEVELS, rank
from arldiag.stabilize.actions import Action, Firing, Policy, Situation, Stabilizable, Taken
from arldiag.stabilize.kinds import ACTIONS
from arldiag.stabilize.policies import resolve_policy
from arldiag.stabilize.spec import Limit, count_limit, make_limits

log = logging.getLogger("arldiag")

# The Stabilizer's own bounds; each action's (max_rollbacks, max_clip_tightenings, min_clip, max_lr_scalings,
# lr_floor) are declared on its ActionSpec (kinds.py). Limits = these around those: one frozen dataclass, whose
# fields are arldiag.toml's [stabilize] keys (the policy key aside).
CALM = LEVELS[:2]  # the states a checkpoint may be taken in
RUNNER_LIMITS = (count_limit("cooldown", 5, "steps after an applied action during which nothing more is applied"),)
CHECKPOINT_LIMITS = (
    Limit("checkpoint_every", 5, "steps between in-memory checkpoints of policy + optimizer while the state is calm",
          ok=lambda v: v >= 1, must="be >= 1"),
    # "watch" (one weak signal) is common on healthy runs under the calibrated defaults (89 of stress seed 4's 200
    # steps): with "ok" only, the checkpoint a rollback restores can be 90 steps old (stress seed 0 rolled back to
    # step 0 at step 91)
    Limit("checkpoint_on", "watch", "the highest alert state in which a checkpoint may be taken (ok or watch)",
          ok=lambda v: v in CALM, must="be 'ok' or 'watch'"),
)
Limits = make_limits(RUNNER_LIMITS, ACTIONS, CHECKPOINT_LIMITS)
Limits.__module__ = __name__


def limits_of(settings) -> Limits:
    """The [stabilize] bounds of an arldiag.settings.Settings (every field but the policy)."""
    return Limits(**{k: v for k, v in settings.values["stabilize"].items() if k != "policy"})


def admit(a: Action, s: Situation, limits: Limits) -> tuple[dict | None, str]:
    """(the resolved parameters to apply, "") when ``a`` may run now, else (None, why not): its ActionSpec's
    ``admit`` (kinds.py), for a kind the trainer supports. Pure."""
    if a.kind not in s.supports:
        return None, f"the trainer does not support {a.kind}"
    try:
        return ACTIONS[a.kind].admit(a, s, limits)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


# action kind -> how a Stabilizable carries it out (each ActionSpec's apply; a view for callers, the runner reads
# the specs)
APPLY: dict[str, Callable[[Stabilizable, Mapping[str, Any], str], dict]] = {k: s.apply for k, s in ACTIONS.items()}


def firings(signals: Mapping[str, Any]) -> dict[str, Firing]:
    """The Monitor's per-step signals (detectors.base.Signal, level 1..3) as Firing objects."""
    return {n: Firing(LEVELS[int(sg.level)], str(sg.metric), float(sg.value), str(getattr(sg, "note", "")))
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
        for a in sorted(proposed, key=lambda a: ACTIONS[a.kind].order):
            params, why = (None, f"cooldown ({self.limits.cooldown} steps after step {last})") if cooling \
                else admit(a, s, self.limits)
            if params is None:
                self.refused[(a.kind, why)] = self.refused.get((a.kind, why), 0) + 1
                continue
            spec = ACTIONS[a.kind]
            try:
                outcome = dict(spec.apply(self.target, params, a.reason) or {})
            except Exception as exc:  # noqa: BLE001
                self.log(f"[arldiag] auto-stabilize: {a.kind} failed at step {step} ({type(exc).__name__}: {exc})")
                continue
            outcome.update({k: v for k, v in params.items() if k not in outcome})
            taken = Taken(step, dataclasses.replace(a, params=dict(params)), outcome)
            self.history.append(taken)
            applied.append(taken)
            s = dataclasses.replace(s, settings=dict(self.target.settings()), history=tuple(self.history))
            if spec.restores_checkpoint:
                self.checkpoint_step = None  # consumed: the next rollback needs a new calm checkpoint
                s = dataclasses.replace(s, checkpoint_step=None)
            if spec.ends_run:
                self.stopped = True
            self.log(f"[arldiag] auto-stabilize step {step}: {a.kind} {_fmt(params)} "
                     f"(trigger {a.detector or '-'}; state {state}) - {a.reason}")
            self._record(taken, s, previous_state)
        # calm: neither the state nor this step's reading above checkpoint_on (a critical reading is no checkpoint)
        calm = all(x in LEVELS and rank(x) <= rank(self.limits.checkpoint_on) for x in (state, reading))
        if calm and self._restorable(s.supports) and not applied and (
                self._last_checkpoint is None or step - self._last_checkpoint >= self.limits.checkpoint_every):
            try:
                self.target.checkpoint(step)
                self.checkpoint_step = self._last_checkpoint = step
            except Exception as exc:  # noqa: BLE001
                self.log(f"[arldiag] auto-stabilize: checkpoint failed at step {step} ({type(exc).__name__}: {exc})")
        return applied

    @staticmethod
    def _restorable(supports: frozenset) -> bool:
        """Whether the trainer supports an action that restores a checkpoint (so checkpoints are worth taking)."""
        return any(ACTIONS[k].restores_checkpoint for k in supports if k in ACTIONS)

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
