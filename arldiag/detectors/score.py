"""The task score collapses, on any scale: the outcome itself, measured against the run's own peak and noise.

Real runs log their task score as a 0/1 accuracy, as +1/-1 (verl's ReTool recipe), as a sum of reward functions,
under the trainer's own name; ``arldiag.aliases`` resolves it to the step column ``task_score``. The rule works
on the score as logged:

* bounds: [0, 1] while every value seen lies in it, [-1, 1] while every value lies in that (+1/-1 rewards);
  otherwise (its own scale) the floor is 0 while no value was negative (a sum of 0/1 rewards), else the lowest
  smoothed score seen before the current points;
* peak P: running maximum of the mean over ``peak_points`` consecutive logged points (one lucky batch is no peak);
* now c: the mean of the last ``confirm`` points (one point for a score logged at evaluation steps only, at most
  every second row); the fall is (c - floor) / (P - floor);
* noise s: the robust standard deviation of one point, from the point-to-point changes before now (1.4826 median
  |change| / sqrt 2), measured on at least ``noise_min`` points before the rule may fire. The fall P - c must be
  significant against it: P - c >= s (noise_z sqrt(1/k + 1/confirm) + sqrt(2 ln N / k)): a two-sample z-test of the
  k-point peak mean against the confirm-point current mean, plus the bias of a running maximum, since P is the best
  of N noisy k-point means (E max of N normals <= sd sqrt(2 ln N)). A score of one prompt x 8 samples (steps of
  0.125, s ~ 0.18) then needs a fall of about 0.7 before it alarms; a logged mean over a large batch (s ~ 0.03) a
  fall of about 0.12.

Critical when the fall reaches ``frac_levels[2]`` (the development runs' label: a score at 1/3 of its best that
stays there) on the last point and on the mean of the last ``confirm`` points; watch / warning at the milder
fractions. It is a lagging signal (by the time it fires the run has failed), so it is not a precursor in the
report, but it raises the alert state at once: a collapse that no precursor announced is still caught within two
logged points.
"""
from __future__ import annotations

import math

import numpy as np

from arldiag.aliases import TASK_SCORE, bounds_of_range
from arldiag.detectors.advice import Remedy
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.window import robust_noise


def _bounds(state: dict, v: float) -> tuple[float, float] | None:
    if math.isfinite(v):
        state["lo_seen"] = min(state.get("lo_seen", v), v)
        state["hi_seen"] = max(state.get("hi_seen", v), v)
    lo, hi = state.get("lo_seen"), state.get("hi_seen")
    return None if lo is None else bounds_of_range(lo, hi)


def score_collapse_rule(w, state, p) -> Signal | None:
    x = w.series(TASK_SCORE)
    v = float(x[-1]) if x.size else math.nan
    bounds = _bounds(state, v)
    rows = state["rows"] = state.get("rows", 0) + 1
    if not math.isfinite(v):
        return None
    n = state["n"] = state.get("n", 0) + 1
    k, c_pts = int(p["peak_points"]), int(p["confirm"])
    if rows >= 2 * n:
        # a score logged at evaluation steps only (one point every few rows, on a fixed evaluation set): one
        # point is a measurement, not a noisy batch, and waiting for the next evaluation would cost many steps
        c_pts = 1
    fin = x[np.isfinite(x)]
    # running peak of the k-point mean; the floor (unknown scale) is the running minimum of the k-point means that
    # ended before the current c points, so a fall does not lower its own reference
    recent = state.setdefault("recent", [])
    if fin.size >= k:
        m = float(fin[-k:].mean())
        state["peak"] = max(state.get("peak", m), m)
        recent.append(m)
        state["n_means"] = state.get("n_means", 0) + 1  # how many k-point means the running peak is the best of
        if len(recent) > c_pts:
            state["floor"] = min(state.get("floor", math.inf), recent.pop(0))
    if n < p["min_points"] or "peak" not in state or fin.size < c_pts:
        return None
    peak = state["peak"]
    cur = float(fin[-c_pts:].mean())
    if bounds is not None:
        floor, span = bounds[0], bounds[1] - bounds[0]
    elif state["lo_seen"] >= 0.0:
        floor, span = 0.0, peak  # a non-negative score on its own scale (a sum of 0/1 rewards): its origin is 0
    else:
        floor = state.get("floor", math.inf)
        span = peak - floor
    if not (math.isfinite(floor) and span > 0 and peak > floor):
        return None
    if (peak - floor) / span < p["min_peak"]:
        return None  # the run never learned anything measurable: nothing to lose
    before = fin[:-c_pts][-int(p["noise_points"]):]
    noise = robust_noise(before)
    if before.size < p["noise_min"] or not math.isfinite(noise):
        return None  # no measure of the noise yet: a fall cannot be told from two bad batches
    n_means = state.get("n_means", 1)
    bias = math.sqrt(2.0 * math.log(n_means) / k) if n_means > 1 else 0.0
    if peak - cur < noise * (p["noise_z"] * math.sqrt(1.0 / k + 1.0 / c_pts) + bias):
        return None
    frac = (cur - floor) / (peak - floor)
    last = (v - floor) / (peak - floor)
    lv = sum(1 for t in p["frac_levels"] if frac <= t and last <= t + p["last_slack"])
    if not lv:
        return None
    scale = "" if bounds is None else f" on [{bounds[0]:g}, {bounds[1]:g}]"
    return Signal(lv, cur, TASK_SCORE, f"task score {cur:.3g} (mean of the last {c_pts} points) = {frac:.0%} of the "
                                       f"way from {floor:.3g} to its peak {peak:.3g}{scale}")


SCORE_COLLAPSE = Detector(
    name="score_collapse",
    title="Task score collapses",
    summary=("The lagging outcome of a real run: its task score (any scale) falls far below its own peak, beyond its "
             "noise."),
    rule_doc=("bounds [0, 1] or [-1, 1] from the values seen (else the floor is 0 for a non-negative score, or the "
              "lowest `peak_points`-point mean before now); P = running max of the `peak_points`-point mean; c = mean "
              "of the last `confirm` points (1 for a score logged at evaluation steps only, at most every second row);"
              " fall = (c - floor) / (P - floor); level = how many of frac_levels the fall and the last point (+ "
              "last_slack) reach, once P - floor >= min_peak x span and P - c >= noise_z x the robust noise of the "
              "point-to-point changes s (1.4826 median |change| / sqrt 2 over noise_points, at least noise_min of them): "
              "P - c >= s (noise_z sqrt(1/peak_points + 1/confirm) + sqrt(2 ln N / peak_points)), N the peak means "
              "seen (a z-test plus the bias of a running maximum). Windows in logged points."),
    param_docs={
        "peak_points": "logged points averaged for the running peak",
        "confirm": "logged points averaged for the current score",
        "min_points": "logged points of the score needed before the rule can fire",
        "noise_points": "logged points the score's noise is measured over",
        "noise_z": "the fall must exceed this many standard errors of peak minus current (plus the running "
                   "maximum's bias)",
        "noise_min": "logged points of the score before the current ones needed to measure its noise",
        "last_slack": "the last point may sit this far above the fraction",
    },
    remedies=(Remedy("stop and roll back to the last checkpoint before the first warning"),
              Remedy("apply the precursors' recommendations (learning rate, clip range, length and entropy "
                 "settings) before resuming"),),
    inputs=(TASK_SCORE,),
    rule=score_collapse_rule,
    # points, not steps: the rule compares logged values of the score, however often they are logged
    params=dict(peak_points=3, confirm=2, min_points=4, min_peak=0.1, noise_points=20, noise_z=3.0, noise_min=4,
                frac_levels=(0.75, 0.6, 0.45), last_slack=0.05),
    explanation="The task score (critic/score/mean, the reward, the accuracy: arldiag.aliases resolves which) "
                "fell far below its own peak, measured on its scale and against its own noise. This is the "
                "outcome: the run has failed by now; the precursors above it should have fired earlier.",
    recommendation="Stop and roll back to the last checkpoint before the first warning; apply the precursors' "
                   "recommendations (learning rate, clip range, length and entropy settings) before resuming.",
    source="label rule of ../shared/real_runs (a score at 1/3 of its best that stays there); ARLArena finding 1",
    lagging=True,
)

DETECTORS = [SCORE_COLLAPSE]
