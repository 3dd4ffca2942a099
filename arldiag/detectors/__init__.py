"""Collapse detectors: a registry of frozen configs + pure rules over the step series, evaluated in batch
(``detect`` over a run's DuckDB views) and online (``arldiag.monitor.Monitor``) by the same ``Evaluator``.

Importing this package loads numpy only; the batch functions use the run object's DuckDB connection and pandas
lazily, so the online Monitor can import the rules inside a training process.
"""
from __future__ import annotations

from arldiag.detectors.base import LEVELS, Detector, Signal
from arldiag.detectors.batch import (alert_timeline, analyse, collapse_step, decline_of, decline_step, detect,
                                     evaluate_run, events_of, label_of)
from arldiag.detectors.engine import Evaluator, StepResult
from arldiag.detectors.registry import REGISTRY, register, resolve
from arldiag.detectors.risk import AlertState, RiskConfig, combine_risk

__all__ = ["detect", "REGISTRY", "alert_timeline", "analyse", "collapse_step", "label_of", "events_of", "decline_of",
           "decline_step", "evaluate_run", "Evaluator", "StepResult", "Detector", "Signal", "LEVELS", "register",
           "resolve", "RiskConfig", "AlertState", "combine_risk"]
