"""Per-step collapse risk in [0, 1] and the alert state machine (ok / watch / warning / critical) with hysteresis.

risk_t = 1 - prod_d (1 - score(level_{d,t}))   (noisy-OR: independent pieces of evidence add up; one detector at
"warning" alone gives a warning-level risk; watch-level signals stay "watch" until three agree at one step:
1 - 0.78^2 = 0.39, 1 - 0.78^3 = 0.53). The state enters watch or warning once risk has reached the level's
threshold on enter_steps consecutive steps (a one-step blip of a noisy metric raises nothing; the "for:" clause of
Prometheus alert rules), critical after critical_steps steps of critical risk (1 by default: a 40-fold KL spike or
a NaN must not wait; the calibration may ask for 2), and leaves a level only after
risk has stayed below (threshold - exit_margin) for exit_steps consecutive steps, so a noisy metric does not flap.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections import deque
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from arldiag.detectors.base import LEVELS


def _doc(default, doc: str):
    """A RiskConfig field with its meaning (arldiag.toml's comments and `arldiag init` read ``metadata["doc"]``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class RiskConfig:
    level_scores: tuple[float, float, float, float] = _doc(
        (0.0, 0.22, 0.55, 0.85), "score of a detector at level ok / watch / warning / critical (combined by noisy-OR)")
    enter: tuple[float, float, float] = _doc((0.25, 0.5, 0.8),
                                             "risk needed to enter the watch / warning / critical state")
    exit_margin: float = _doc(0.1, "the risk must fall this far below a threshold to leave the state")
    exit_steps: int = _doc(3, "steps below the threshold before leaving a state")
    # 2: on the 13 sample runs of seeds 0 and 1, 11 -> 8 false-alarm episodes, leads 0-1 step shorter
    # (docs/detectors.md "Results on the first sample runs")
    enter_steps: int = _doc(2, "consecutive steps above a threshold before entering a state")
    # 1 = at once (a NaN must not wait). 2 asks a one-step KL spike, common on healthy runs of the suite, to last or
    # to be joined by a second signal
    critical_steps: int = _doc(1, "consecutive steps at critical risk before entering critical (1 = at once)")
    # the false-alarm sources on the dev runs, chosen by the calibration
    demote: tuple[str, ...] = _doc((), "detectors whose level counts one lower in the risk (they warn only with a "
                                       "second signal)")

    def at_interval(self, interval: int) -> "RiskConfig":
        """The same hysteresis for a run logged every ``interval`` optimizer steps: enter_steps, exit_steps and
        critical_steps are optimizer steps, so each becomes ceil(k / interval) logged points (at least 1)."""
        if interval <= 1:
            return self
        rows = lambda k: max(1, math.ceil(k / interval))  # noqa: E731
        return dataclasses.replace(self, enter_steps=rows(self.enter_steps), exit_steps=rows(self.exit_steps),
                                   critical_steps=rows(self.critical_steps))

    def __post_init__(self) -> None:
        if list(self.enter) != sorted(self.enter) or not all(0 < t <= 1 for t in self.enter):
            raise ValueError(f"enter must be ascending thresholds in (0, 1], got {self.enter}")
        if self.exit_steps < 1:
            raise ValueError(f"exit_steps must be >= 1, got {self.exit_steps}")
        if self.enter_steps < 1:
            raise ValueError(f"enter_steps must be >= 1, got {self.enter_steps}")
        if self.critical_steps < 1:
            raise ValueError(f"critical_steps must be >= 1, got {self.critical_steps}")
        if not 0 <= self.exit_margin < min(self.enter):
            raise ValueError(f"exit_margin must be in [0, {min(self.enter)}), got {self.exit_margin}")


CALIBRATED = Path(__file__).with_name("calibrated.json")  # written by benchmarks/calibrate.py (dev runs only)


# Evidence profiles: a run with token statistics (a Collector's record_update: the reference trainer, the TRL and
# verl hooks) and a run with step scalars only (an imported log, a trainer that forwards its logged metrics). The
# two see different detectors (no token-level rule can run on step scalars), so each has its own fitted risk
# settings: ``risk`` and ``risk_steps`` in calibrated.json.
PROFILES = ("tokens", "steps")


def profile_of(metrics: Mapping[str, object]) -> str:
    """"tokens" when the step carries token statistics (n_tokens > 0), else "steps"."""
    try:
        n = float(metrics.get("n_tokens"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "steps"
    return "tokens" if n > 0 else "steps"


def calibrated_risk(path: Path = CALIBRATED, profile: str = "tokens") -> RiskConfig:
    """RiskConfig with the fields the calibration chose on the dev runs (``risk``, or ``risk_steps`` for the
    step-scalar profile, in calibrated.json) when the file says ``"apply": true`` (a fit on a real dev split, or
    ``--apply``); the class defaults otherwise (no file, or a stand-in fit that only proposes values)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return RiskConfig()
    key = "risk" if profile == "tokens" else "risk_steps"
    fields = (data.get(key) or {}) if data.get("apply") is True else {}
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return RiskConfig(**fields)


def calibrated_model(path: Path = CALIBRATED) -> str:
    """The default risk model: ``default_model`` of calibrated.json ("rules" or "learned", the one that scored better
    on the held-out runs) when the file says ``"apply": true``; "rules" otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return "rules"
    m = data.get("default_model", "rules") if data.get("apply") is True else "rules"
    return m if m in ("rules", "learned") else "rules"


def detector_levels(signals: Mapping[str, int], cfg: RiskConfig = RiskConfig()) -> list[int]:
    """The levels that enter the risk: a demoted detector's level counts one lower."""
    return [max(0, int(lv) - 1) if name in cfg.demote else int(lv) for name, lv in signals.items()]


def combine_risk(levels: Iterable[int], cfg: RiskConfig = RiskConfig()) -> float:
    """Noisy-OR of the detectors' level scores."""
    keep = 1.0
    for lv in levels:
        keep *= 1.0 - cfg.level_scores[int(lv)]
    return 1.0 - keep


def level_of(risk: float, thresholds) -> int:
    return sum(1 for t in thresholds if risk >= t) if math.isfinite(risk) else 0


class AlertState:
    """Hysteresis over the risk series. ``update(risk)`` returns the state level 0..3 after this step."""

    def __init__(self, cfg: RiskConfig = RiskConfig()) -> None:
        self.cfg = cfg
        self.level = 0
        self._calm = 0  # consecutive steps with risk below the exit threshold of the current level
        self._recent: deque[int] = deque(maxlen=cfg.enter_steps)  # risk levels of the last enter_steps steps
        self._critical_run = 0  # consecutive steps with critical risk

    @property
    def state(self) -> str:
        return LEVELS[self.level]

    def update(self, risk: float) -> int:
        target = level_of(risk, self.cfg.enter)
        self._recent.append(target)
        self._critical_run = self._critical_run + 1 if target == 3 else 0
        if target >= self.level:
            # the highest level held on each of the last enter_steps steps; critical after critical_steps of its own
            held = min(self._recent) if len(self._recent) == self.cfg.enter_steps else 0
            critical = 3 if self._critical_run >= self.cfg.critical_steps else 0
            self.level, self._calm = max(self.level, critical, held), 0
            return self.level
        exits = tuple(t - self.cfg.exit_margin for t in self.cfg.enter)
        if level_of(risk, exits) < self.level:
            self._calm += 1
            if self._calm >= self.cfg.exit_steps:
                self.level, self._calm = max(target, level_of(risk, exits)), 0
        else:
            self._calm = 0
        return self.level


def risk_series(levels_per_step: Iterable[Mapping[str, int]], cfg: RiskConfig = RiskConfig()):
    """[(risk, state)] for a sequence of {detector: level} dicts (used by tests and by the batch evaluator)."""
    st = AlertState(cfg)
    out = []
    for lv in levels_per_step:
        r = combine_risk(detector_levels(lv, cfg), cfg)
        out.append((r, LEVELS[st.update(r)]))
    return out
