"""A learned collapse-risk score: a logistic model over windowed step features (fitted by benchmarks/calibrate.py
on dev runs only, weights in calibrated.json), selectable with ``Evaluator(risk_model="learned")``,
``Monitor(risk_model="learned")`` or ``arldiag eval-detect --risk learned``; the rule-based state stays the default.

Features per metric m of FEATURE_METRICS, from the bounded window and O(1) state (so the Monitor's per-step cost
stays flat): ``level`` = (mean of the last 5 values - early median) / (early MAD + eps), the early median/MAD taken
over the first 10 finite values (frozen), and ``shift`` = (mean of the last 5 - median of the 20 before) / (MAD of
those 20 + eps); both clipped to [-10, 10], 0 where the metric is missing. For the metrics of PEAK_METRICS a third,
``peak`` = log10(max of the last PEAK values / max(early median, PEAK_FLOOR)), clipped the same way: the memory of
a recent excursion. Runs trained on stale rollouts (the lag set, sample_runs/README.md) nearly break several times
(KL to the reference above 1 nat, up to 2,000, for a step or two, then back) before they break for good; level and
shift forget such an excursion within 5 steps, peak holds it for PEAK. risk = sigmoid(w . f + b), with b shifted so that the
fitted alarm threshold maps to 0.5 (the warning threshold of the alert state).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from arldiag.detectors.window import Window

FEATURE_METRICS = ("kl_ref_k3", "ppo_kl_k3", "entropy", "format_valid_frac", "success_rate", "grad_norm",
                   "tok_oob_frac", "neg_adv_low_is_frac", "zero_std_group_frac", "response_length_mean",
                   "kl_top1pct_share")
PEAK_METRICS = ("kl_ref_k3", "ppo_kl_k3", "grad_norm")
FEATURE_NAMES = (tuple(f"{m}:{k}" for m in FEATURE_METRICS for k in ("level", "shift"))
                 + tuple(f"{m}:peak" for m in PEAK_METRICS))
CALIBRATED = Path(__file__).with_name("calibrated.json")
SMOOTH, EARLY, PRIOR, CLIP = 5, 10, 20, 10.0
PEAK, PEAK_FLOOR = 30, 1e-3  # peak: steps remembered (< the Evaluator's 32-step window); floor of its early median


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x)))) * 1.4826  # consistent with the std for a normal sample


class FeatureState:
    """Per-run feature extractor (bounded: the early buffer freezes after EARLY values per metric)."""

    def __init__(self) -> None:
        self.early: dict[str, list[float]] = {m: [] for m in FEATURE_METRICS}
        self.base: dict[str, tuple[float, float]] = {}

    def features(self, w: Window) -> np.ndarray:
        out = np.zeros(len(FEATURE_NAMES))
        for i, m in enumerate(FEATURE_METRICS):
            x = w.series(m)
            if not x.size:
                continue
            last = x[-1]
            if m not in self.base and math.isfinite(last):
                self.early[m].append(float(last))
                if len(self.early[m]) >= EARLY:
                    e = np.asarray(self.early[m])
                    self.base[m] = (float(np.median(e)), _mad(e))
                    self.early[m] = []
            recent = x[-SMOOTH:]
            recent = recent[np.isfinite(recent)]
            if not recent.size:
                continue
            cur = float(recent.mean())
            if m in self.base:
                med, mad = self.base[m]
                out[2 * i] = (cur - med) / (mad + 1e-3 * abs(med) + 1e-9)
            prior = x[-SMOOTH - PRIOR:-SMOOTH]
            prior = prior[np.isfinite(prior)]
            if prior.size >= 5:
                med = float(np.median(prior))
                out[2 * i + 1] = (cur - med) / (_mad(prior) + 1e-3 * abs(med) + 1e-9)
        for j, m in enumerate(PEAK_METRICS, start=2 * len(FEATURE_METRICS)):
            if m not in self.base:
                continue
            recent = w.series(m)[-PEAK:]
            recent = recent[np.isfinite(recent)]
            if recent.size:
                out[j] = math.log10(max(float(recent.max()), 1e-12) / max(self.base[m][0], PEAK_FLOOR))
        return np.clip(out, -CLIP, CLIP)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


class LearnedRisk:
    def __init__(self, model: dict | None = None) -> None:
        model = model or load_model()
        names = tuple(model["features"])
        if names != FEATURE_NAMES:
            raise ValueError(f"learned model: features {names[:3]}... do not match this version's FEATURE_NAMES")
        self.w = np.asarray(model["weights"], dtype=np.float64)
        self.b = float(model["bias"])
        self.state = FeatureState()
        self.last = np.zeros(len(FEATURE_NAMES))  # the features of the latest step (for contributions)

    def update(self, w: Window) -> float:
        self.last = self.state.features(w)
        return float(sigmoid(self.last @ self.w + self.b))

    def contributions(self, k: int = 3) -> list[tuple[str, float, float]]:
        """The latest step's k largest positive terms w_i f_i of the logit: (feature, f_i, w_i f_i), largest first.
        They say what pushed the score up, the learned model's counterpart of the firing detectors."""
        terms = self.w * self.last
        order = [int(i) for i in np.argsort(-terms, kind="stable")[:k] if terms[i] > 0]
        return [(FEATURE_NAMES[i], float(self.last[i]), float(terms[i])) for i in order]


def load_model(path: Path = CALIBRATED) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        return data["learned"]
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"risk_model='learned': no learned model in {path} ({e}); run benchmarks/calibrate.py")
