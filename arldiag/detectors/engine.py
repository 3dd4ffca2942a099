"""The shared incremental evaluator: one step's metrics in, detector signals + risk + alert state out.

Both evaluators drive this class, one step at a time and in step order: the online Monitor with the Collector's
metrics dicts, the batch evaluator (`detectors.batch`) with the rows of the ``steps`` view. Memory is bounded:
a ``Window`` of ``window_size`` steps, each detector's small state dict, and per detector the list of firing
*intervals* (it grows with the number of separate firing episodes, not with the number of steps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from arldiag.aliases import VAL_SCORE, is_validation
from arldiag.detectors.base import Detector, LEVELS, Signal
from arldiag.detectors.context import OUTCOME_COLUMNS, OutcomeTracker
from arldiag.detectors.learned import FEATURE_METRICS, LearnedRisk
from arldiag.detectors.registry import advise, configured, resolve
from arldiag.detectors.risk import (AlertState, Corroboration, RiskConfig, calibrated_model, calibrated_risk,
                                    combine_risk, detector_levels, level_of, profile_of, risk_for)
from arldiag.detectors.window import Window, as_float
from arldiag.findings import Finding
from arldiag.settings import active

WINDOW_SIZE = 32
RAW_COLUMNS = ("nonfinite_tokens", "n_tokens", "lr")  # never repaired as spikes (Evaluator._repairable)
RISK_MODELS = ("rules", "learned")
ALARM_LEVEL = LEVELS.index("warning")  # a detector level at or above which its finding counts as a precursor  # rules: noisy-OR of the detectors' levels (risk.py); learned: learned.py


@dataclass
class Track:
    """What one detector has done so far in this run (bounded)."""
    available: bool = False
    max_level: int = 0
    first_step: int | None = None
    intervals: list[list[int]] = field(default_factory=list)  # [[first, last], ...] of consecutive firing steps
    peak_step: int | None = None
    peak_signal: Signal | None = None
    last_level: int = 0
    n_steps: int = 0
    # the first step at each level reached ({1: step at watch, 2: at warning, 3: at critical}): a finding that peaked
    # at critical may have spent its first steps at watch; and the stretches at warning or above, for the precursor
    # inside an alert episode (arldiag.verdict.first_precursor)
    first_at: dict[int, int] = field(default_factory=dict)
    alarm_intervals: list[list[int]] = field(default_factory=list)

    def steps(self, evaluated: Sequence[int] | None = None) -> list[int]:
        """Expand the intervals. Steps are consecutive evaluated steps, which are consecutive integers unless the
        run skipped steps; ``evaluated`` (the batch evaluator has it) restores exact membership then."""
        if evaluated is None:
            return [s for a, b in self.intervals for s in range(a, b + 1)]
        ev = np.asarray(evaluated)
        return [int(s) for a, b in self.intervals for s in ev[(ev >= a) & (ev <= b)]]


@dataclass
class StepResult:
    step: int
    risk: float
    state: str
    previous_state: str
    signals: dict[str, Signal]          # detectors firing at this step
    escalated: list[str]                # detectors that reached a level above their previous maximum
    top: str | None                     # detector with the highest level (ties: catalog order)
    # the level this step's risk reaches by itself, before the hysteresis (state): the closed loop acts on a
    # critical reading at once, while the alert state may ask it to last (RiskConfig.critical_steps)
    reading: str = "ok"
    # the outcome is not weakening beyond its noise (context.Outcome.weakening): one precursor family alone
    # opens at most a watch then (RiskConfig.corroborate)
    holding: bool = False

    @property
    def changed(self) -> bool:
        return self.state != self.previous_state


class Evaluator:
    def __init__(self, detectors=None, risk: RiskConfig | None = None, window_size: int = WINDOW_SIZE,
                 config: Mapping | None = None, risk_model: str | None = None, interval: int | None = None,
                 settings=None) -> None:
        risk_model = calibrated_model() if risk_model is None else risk_model  # None: the calibrated default
        if risk_model not in RISK_MODELS:
            raise ValueError(f"risk_model must be one of {', '.join(RISK_MODELS)}, got {risk_model!r}")
        # without detectors or risk settings handed in, the active arldiag.toml / environment decides (one
        # configuration for every command, the Monitor and the integrations: arldiag.settings.active)
        # ``settings`` (an arldiag.settings.Settings, e.g. monitor_of's own) stands for the active one
        self.settings = settings
        if self.settings is None and (detectors is None or risk is None):
            self.settings = active()
        if self.settings is not None:
            if detectors is None and self.settings.detectors_changed():
                detectors = configured(self.settings)
        self.detectors: list[Detector] = resolve(detectors)
        self.config = dict(config or {})  # the run's settings (advice.settings_of): recommendations fit them
        cols = dict.fromkeys([c for d in self.detectors for c in d.columns] + list(OUTCOME_COLUMNS) + [VAL_SCORE])
        self.window = Window(cols, window_size)
        self.outcome = OutcomeTracker()
        self.learned = None
        if risk_model == "learned":  # detectors.learned: a logistic model over windowed step features

            self.learned = LearnedRisk()
            self.window = Window(dict.fromkeys(list(cols) + list(FEATURE_METRICS)), window_size)
        self.states: dict[str, dict] = {d.name: {} for d in self.detectors}
        self.tracks: dict[str, Track] = {d.name: Track() for d in self.detectors}
        # the rule-based defaults fitted on dev runs (benchmarks/calibrate.py); the learned score's alarm threshold is
        # folded into its bias so that it maps to the class defaults' warning threshold
        self.risk_model = risk_model
        self.risk_cfg = risk or (self._profile_risk("tokens") if self.learned is None else RiskConfig())
        # without given settings, the first step picks the calibrated profile (token statistics or step scalars)
        self._pick_profile = risk is None and self.learned is None
        self.profile: str | None = None
        self._new_alert(1)
        self._lagging = tuple(d.name for d in self.detectors if d.lagging)
        self._floors = frozenset(d.name for d in self.detectors if d.floor)
        # the precursors' inputs lose a one-point spike once the next point is back (Window.repair_spike); the
        # outcome columns stay as logged (the score rule and the floor read every point), and so do counts of
        # non-finite values (one NaN is the failure itself)
        keep_raw = set(OUTCOME_COLUMNS) | {VAL_SCORE} | {c for d in self.detectors if d.lagging or d.floor
                                                         for c in d.columns} | set(RAW_COLUMNS)
        self._repairable = [c for c in self.window.columns if c not in keep_raw and c != "step"]
        # optimizer steps between logged points: given (the run's manifest, the batch evaluator's step column) or
        # read off the first two steps online; every window of the rules and the alert state is in optimizer steps
        self.interval: int | None = None
        self._carry: dict[str, object] = {}
        self._columns = set(self.window.columns) - {"step"}
        if interval is not None:
            self._set_interval(interval)
        self.last_step: int | None = None
        self.n_steps = 0
        self.max_risk = 0.0
        self.last_risk = 0.0

    def _profile_risk(self, profile: str) -> RiskConfig:
        return risk_for(self.settings, profile) if self.settings is not None else calibrated_risk(profile=profile)

    def _new_alert(self, interval: int) -> None:
        """The alert state and its corroboration gate for the current risk settings, in logged points."""
        cfg = self.risk_cfg.at_interval(interval)
        self.alert, self.gate = AlertState(cfg), Corroboration(cfg)

    def _set_interval(self, interval: int) -> None:
        self.interval = max(1, int(interval))
        if self.interval > 1:
            self.detectors = [d.at_interval(self.interval) for d in self.detectors]
            self._new_alert(self.interval)
            self.outcome.at_interval(self.interval)

    def _validation_only(self, metrics: Mapping[str, object]) -> bool:
        """A row of a validation step alone: a finite validation metric and no finite training metric the rules
        read (a row with nothing finite at all is a step that logged nothing, and the rules see it)."""
        val = train = False
        for k, v in metrics.items():
            if math.isfinite(as_float(v)):
                if is_validation(str(k)):
                    val = True
                elif k in self._columns:
                    train = True
        return val and not train

    def update(self, step: int, metrics: Mapping[str, object]) -> StepResult:
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"step must increase: got {step} after {self.last_step}")
        if self.profile is None:
            self.profile = profile_of(metrics)
            if self._pick_profile and self.profile != "tokens":
                self.risk_cfg = self._profile_risk(self.profile)
                self._new_alert(self.interval or 1)
        if self.interval is None and self.last_step is not None:
            self._set_interval(step - self.last_step)
        if self.n_steps and self._validation_only(metrics):
            # a validation-only row (verl logs val metrics at their own step): its values join the next training
            # row, and the series of the rules is not broken by a row of NaN
            self._carry.update({k: v for k, v in metrics.items() if math.isfinite(as_float(v))})
            self.last_step = step
            st = self.alert.state
            return StepResult(step, self.last_risk, st, st, {}, [], None, LEVELS[level_of(self.last_risk,
                                                                                          self.risk_cfg.enter)])
        if self._carry:
            metrics = {**self._carry, **metrics}
            self._carry = {}
        self.window.push(step, metrics)
        for c in self._repairable:
            self.window.repair_spike(c)
        self.window.context = self.outcome.update(self.window)
        signals: dict[str, Signal] = {}
        escalated: list[str] = []
        for d in self.detectors:
            tr = self.tracks[d.name]
            if not tr.available:
                tr.available = any(math.isfinite(self.window.last(c)) for c in d.inputs)
            sig = d.evaluate(self.window, self.states[d.name])
            if sig is None:
                tr.last_level = 0
                continue
            signals[d.name] = sig
            if tr.first_step is None:
                tr.first_step = step
            if tr.last_level and tr.intervals:
                tr.intervals[-1][1] = step
            else:
                tr.intervals.append([step, step])
            tr.n_steps += 1
            for lv in range(1, sig.level + 1):
                tr.first_at.setdefault(lv, step)
            if sig.level >= ALARM_LEVEL:
                if tr.last_level >= ALARM_LEVEL and tr.alarm_intervals:
                    tr.alarm_intervals[-1][1] = step
                else:
                    tr.alarm_intervals.append([step, step])
            tr.last_level = sig.level
            if sig.level > tr.max_level:
                tr.max_level, tr.peak_step, tr.peak_signal = sig.level, step, sig
                escalated.append(d.name)
        risk = (combine_risk(detector_levels({n: s.level for n, s in signals.items()}, self.risk_cfg), self.risk_cfg)
                if self.learned is None
                else self.learned.update(self.window))
        # the gate stays closed while the outcome is not weakening beyond its noise (a noisy flat score is not)
        holding = not self.window.context.weakening()
        ceiling = self.gate.ceiling({n: s.level for n, s in signals.items()}, holding, self._lagging)
        prev = self.alert.state
        floor = max((s.level for n, s in signals.items() if n in self._floors), default=0)
        self.alert.update(risk, ceiling, floor)
        self.last_step = step
        self.last_risk = risk
        self.n_steps += 1
        self.max_risk = max(self.max_risk, risk)
        top = max(signals, key=lambda n: signals[n].level) if signals else None
        reading = LEVELS[level_of(risk, self.risk_cfg.enter)]
        return StepResult(step, risk, self.alert.state, prev, signals, escalated, top, reading, holding)

    def recommendation(self, d: Detector) -> str:
        """The detector's advice fitted to this run's config (nothing the run already has)."""
        return advise(d.name, self.config, d.recommendation)

    def findings(self, run: str | None = None, evaluated_steps: Sequence[int] | None = None) -> list[Finding]:
        return [self.finding(d, run, evaluated_steps) for d in self.detectors]

    def finding(self, d: Detector, run: str | None = None,
                evaluated_steps: Sequence[int] | None = None) -> Finding:
        tr = self.tracks[d.name]
        if not tr.available:
            return Finding(detector=d.name, status="skipped", title=d.title, run=run,
                           skipped_reason=f"the run has no finite value of any of: {', '.join(d.inputs)}",
                           explanation=d.explanation)
        if tr.max_level == 0:
            return Finding(detector=d.name, status="quiet", title=d.title, run=run, explanation=d.explanation,
                           evidence={"steps_evaluated": self.n_steps})
        sig = tr.peak_signal
        explanation = (f"{d.explanation} First at step {tr.first_step}; reached {LEVELS[tr.max_level]} at step "
                       f"{tr.peak_step}: {sig.note}.")
        return Finding(
            detector=d.name, status="fired", severity=LEVELS[tr.max_level], title=d.title,
            first_step=tr.first_step, steps=tr.steps(evaluated_steps), explanation=explanation,
            recommendation=self.recommendation(d), run=run,
            evidence={"metric": sig.metric, "peak_step": tr.peak_step, "peak_value": sig.value, "note": sig.note,
                      "n_steps": tr.n_steps, "source": d.source,
                      "first_at": {LEVELS[lv]: s for lv, s in sorted(tr.first_at.items())},
                      "alarm_intervals": [list(iv) for iv in tr.alarm_intervals]},
        )
