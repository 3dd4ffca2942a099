"""What a stabilizing policy sees, what it may ask for, and the interface a trainer implements to carry it out.

A *policy* is a pure function ``policy(situation) -> list[Action]``: it reads the run's alert state, the findings
firing at this step, the trainer's current settings and the actions already taken, and returns what to do. It
applies nothing itself: the ``Stabilizer`` (stabilize/runner.py) checks every proposed action against the limits
(idempotence, bounds, cooldown, rollback rules) and applies the admitted ones through a ``Stabilizable`` trainer.

Actions (ARLArena's levers, ../shared/spec/ALGORITHMS.md; the rollback is the last resort):

  nalis_mask  switch on the negative-advantage low-IS sequence mask        params: delta
  clip        tighten the clip range: eps_low, eps_high *= factor          params: factor
  seq_clip    move to sequence-level clipping (GSPO ratio)                 params: clip_low, clip_high
  lr_scale    multiply the learning rate                                   params: factor
  rollback    restore policy + optimizer state of the last checkpoint taken while the state was ok
  stop        stop the run                                                 params: (none)

Standard library only: it runs inside the training process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

# The order actions of one decision are applied in: a rollback first (it restores the optimizer, so settings
# changed afterwards survive it), stop last.
ACTION_KINDS = ("rollback", "nalis_mask", "seq_clip", "clip", "lr_scale", "stop")
STATES = ("ok", "watch", "warning", "critical")


@dataclass(frozen=True)
class Action:
    kind: str                                   # one of ACTION_KINDS
    params: Mapping[str, Any] = field(default_factory=dict)
    detector: str = ""                          # the finding (detector name) that triggered it
    reason: str = ""                            # one plain-language line: why

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"action kind must be one of {', '.join(ACTION_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Firing:
    """One detector firing at this step (the finding behind the alert state)."""
    level: str                                  # watch | warning | critical
    metric: str
    value: float
    note: str = ""


@dataclass(frozen=True)
class Taken:
    """An action that was applied (the history a policy reads)."""
    step: int
    action: Action
    outcome: Mapping[str, Any] = field(default_factory=dict)   # {"before": ..., "after": ...} from the trainer


@dataclass(frozen=True)
class Situation:
    step: int
    state: str                                  # ok | watch | warning | critical (after this step)
    previous_state: str
    risk: float
    findings: Mapping[str, Firing]              # detectors firing at this step, by name
    top: str | None                             # the leading detector
    settings: Mapping[str, Any]                 # the trainer's current settings (Stabilizable.settings())
    initial: Mapping[str, Any]                  # the settings at the start of the run
    history: tuple[Taken, ...] = ()
    checkpoint_step: int | None = None          # step of the calm (ok/watch) checkpoint a rollback would restore, if any
    supports: frozenset = frozenset(ACTION_KINDS)
    state_since: int = 0                        # first step of the current run of this same state
    reading: str = "ok"                         # the level of this step's risk alone, before the hysteresis

    @property
    def acting_state(self) -> str:
        """The state the built-in policies act on: the alert state, or critical on a critical reading. Alerts cost a
        person's attention, so the alert state may ask a critical reading to last (RiskConfig.critical_steps); the
        loop's actions are cheap and bounded (on the stress set they never left a run below its twin), so it keeps
        acting on the first critical step, as before that setting (the held-out seed 4 was saved by a one-step
        critical KL spike 9 steps before its collapse)."""
        return "critical" if self.reading == "critical" else self.state

    def taken(self, kind: str) -> list[Taken]:
        return [t for t in self.history if t.action.kind == kind]

    @property
    def last_action_step(self) -> int | None:
        return self.history[-1].step if self.history else None


Policy = Callable[[Situation], "list[Action]"]


@runtime_checkable
class Stabilizable(Protocol):
    """What a trainer implements so that a policy can act on it. Each method returns {"before": ..., "after": ...}
    (what changed), stored with the action. A trainer lists what it supports in ``supports`` (a subset of
    ACTION_KINDS); the Stabilizer never calls the others."""

    supports: frozenset

    def settings(self) -> dict[str, Any]:
        """Current values: lr, clip_low, clip_high, algo, seq_clip (bool), nalis_mask (bool), nalis_delta."""

    def set_nalis_mask(self, delta: float) -> dict: ...

    def set_clip(self, clip_low: float, clip_high: float) -> dict: ...

    def use_sequence_clip(self, clip_low: float, clip_high: float) -> dict: ...

    def set_lr(self, lr: float) -> dict: ...

    def checkpoint(self, step: int) -> None:
        """Keep an in-memory copy of the policy and optimizer state (replacing the previous one)."""

    def rollback(self) -> dict:
        """Restore the copy kept by ``checkpoint`` (the current learning rate and loss settings stay)."""

    def stop(self, reason: str) -> dict: ...
