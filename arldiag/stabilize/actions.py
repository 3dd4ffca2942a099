"""What a stabilizing policy sees, what it may ask for, and the interface a trainer implements to carry it out.

A *policy* is a pure function ``policy(situation) -> list[Action]``: it reads the run's alert state, the findings
firing at this step, the trainer's current settings and the actions already taken, and returns what to do. It
applies nothing itself: the ``Stabilizer`` (stabilize/runner.py) checks every proposed action against the limits
(idempotence, bounds, cooldown, rollback rules) and applies the admitted ones through a ``Stabilizable`` trainer.

The actions themselves (nalis_mask, clip, seq_clip, lr_scale, rollback, stop: what each does, its parameters, its
limits, when it is admitted and how a trainer applies it) are declared in stabilize/kinds.py, one ``ActionSpec``
each.

Standard library only: it runs inside the training process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from arldiag.stabilize.kinds import ACTION_KINDS  # in application order (kinds.ACTIONS)


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
    """What a trainer implements so that a policy can act on it: its ``settings()``, the kinds it supports (a
    subset of ACTION_KINDS; the Stabilizer never applies the others) and, for each supported kind, the method its
    ``ActionSpec.method`` names (stabilize/kinds.py: ``set_lr(lr)`` for lr_scale, ``rollback()`` for rollback, ...),
    returning {"before": ..., "after": ...} (what changed), stored with the action. A trainer that supports an
    action with ``restores_checkpoint`` (rollback) also implements ``checkpoint(step)``: keep an in-memory copy of
    the policy and optimizer state, replacing the previous one. tests/stabilize/test_action_declarations.py checks
    every trainer's controls against the specs."""

    supports: frozenset

    def settings(self) -> dict[str, Any]:
        """Current values: lr, clip_low, clip_high, algo, seq_clip (bool), nalis_mask (bool), nalis_delta (the
        keys the supported actions read: ``ActionSpec.settings``)."""
