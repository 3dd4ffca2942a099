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
* noise s: the sd of one point, sqrt(mean squared change / 2) over the changes since the run began, the largest
  ``NOISE_TRIM`` of them left out and the rest rescaled to stay unbiased on normal noise (``trimmed_sd``: one dip
  that recovered does not hide every later fall); at least ``noise_min`` points before the rule may fire. The
  changes of a stretch of low points (below the first of ``frac_levels``) count only once it ends, so a fall does
  not raise the noise it is measured against while a dip that recovers counts. The fall must be
  significant against it: P - c_f >= s (t sqrt(1/k + 1/f) + sqrt(2 ln N / k)), t the Student-t quantile of
  ``noise_z`` for the changes s was measured on (few changes, a wider margin), c_f the mean of the last f
  points, f = the low points so far (at least ``confirm``, at most ``fall_points``: a fall that lasts is confirmed,
  a two-point dip is not): a two-sample z-test of the k-point peak mean against the current mean, plus the bias of
  a running maximum, since P is the best of N noisy k-point means (E max of N normals <= sd sqrt(2 ln N)). A score
  of one prompt x 8 samples (steps of 0.125, s ~ 0.18) then needs a fall of about 0.8 on two points, 0.6 on
  twenty; a logged mean over a large batch (s ~ 0.03) a fall of about 0.15.

Critical when the fall reaches ``frac_levels[2]`` (the development runs' label: a score at 1/3 of its best that
stays there) on the last point and on the mean of the last ``confirm`` points; watch / warning at the milder
fractions. It is a lagging signal (by the time it fires the run has failed), so it is not a precursor in the
report, but it raises the alert state at once: a collapse that no precursor announced is still caught within two
logged points.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from arldiag.aliases import TASK_SCORE, bounds_of_range
from arldiag.detectors.advice import Remedy
from arldiag.detectors.base import Detector, Signal


def _bounds(state: dict, v: float) -> tuple[float, float] | None:
    if math.isfinite(v):
        state["lo_seen"] = min(state.get("lo_seen", v), v)
        state["hi_seen"] = max(state.get("hi_seen", v), v)
    lo, hi = state.get("lo_seen"), state.get("hi_seen")
    return None if lo is None else bounds_of_range(lo, hi)


def t_from_z(z: float, df: int) -> float:
    """The Student-t quantile of the normal quantile ``z`` for ``df`` degrees of freedom (Cornish-Fisher, Abramowitz
    & Stegun 26.7.5): the z-test's multiplier when the noise itself is estimated from ``df`` changes (z = 3: t = 5.2
    for 5 changes, 4.0 for 10, 3.4 for 20)."""
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


# Share of the largest squared changes left out (rounded: a dip that recovers is two large changes, so nine changes
# drop two) of the noise estimate (module doc): one dip that recovered (the
# development run rho0.10's 0.9 -> 0.17 -> 0.7 at steps 15-25) must not set the noise a later fall is tested against.
NOISE_TRIM = 0.25


def trimmed_sd(sq: list[float], trim: float = NOISE_TRIM) -> float:
    """The per-point sd from squared changes d^2 = (x_i - x_{i-1})^2 of a score with normal noise sd s (d ~ N(0, 2
    s^2)), the largest ``round(trim n)`` left out. For a kept share p of d^2 / (2 s^2) ~ chi2(1), the kept mean is
    2 s^2 F3(q) / p, q = Phi^-1((1 + p) / 2)^2 the chi2(1) p-quantile and F3 the chi2(3) cdf (x f1(x) = f3(x)), so
    dividing by F3(q) / p keeps the estimate unbiased on normal noise. Not the median |change|: a score in steps of
    0.125 repeats its value and its median change understates the noise (0.13 for a true 0.18)."""
    n = len(sq)
    drop = int(trim * n + 0.5)
    kept = sorted(sq)[: n - drop]
    ms = sum(kept) / len(kept)
    if drop:
        p = len(kept) / n
        q = NormalDist().inv_cdf((1.0 + p) / 2.0) ** 2
        f3 = math.erf(math.sqrt(q / 2.0)) - math.sqrt(2.0 * q / math.pi) * math.exp(-q / 2.0)
        ms /= f3 / p
    return math.sqrt(ms / 2.0)


def calm_noise(state: dict, v: float, low: bool, hold: int) -> float:
    """The per-point noise sd of the score over the run so far (``trimmed_sd`` of its point-to-point changes). Over
    the whole run, not a window: 20 changes of a binomial score give an sd off by 16 % either way, enough to alarm
    on a noisy run or miss a fall. The changes of a low stretch (points below the first fraction: a fall may be
    under way) are held back until it ends: a dip that recovers then counts (leaving its changes out would
    understate the noise), a fall does not raise the noise it is measured against (at most ``hold`` changes are
    held). NaN before two changes."""
    prev = state.get("prev")
    state["prev"] = v
    if prev is not None:
        held = state.setdefault("held", [])
        if len(held) < hold:
            held.append((v - prev) ** 2)
        if not low:
            state.setdefault("sq", []).extend(held)
            state["n_ss"] = len(state["sq"])
            held.clear()
    n = state.get("n_ss", 0)
    return trimmed_sd(state["sq"]) if n >= 2 else math.nan


def _reference(state: dict, bounds, p) -> tuple[float, float] | None:
    """(floor, peak) the fall is measured between; None while there is no measurable peak (nothing to lose)."""
    peak = state.get("peak")
    if peak is None:
        return None
    if bounds is not None:
        floor, span = bounds[0], bounds[1] - bounds[0]
    elif state["lo_seen"] >= 0.0:
        floor, span = 0.0, peak  # a non-negative score on its own scale (a sum of 0/1 rewards): its origin is 0
    else:
        floor = state.get("floor", math.inf)
        span = peak - floor
    if not (math.isfinite(floor) and span > 0 and peak > floor) or (peak - floor) / span < p["min_peak"]:
        return None
    return floor, peak


def _update_peak(state: dict, fin: np.ndarray, k: int, c_pts: int) -> None:
    """Running peak of the k-point mean; the floor (unknown scale) is the running minimum of the k-point means that
    ended before the current c points, so a fall does not lower its own reference."""
    if fin.size < k:
        return
    recent = state.setdefault("recent", [])
    m = float(fin[-k:].mean())
    state["peak"] = max(state.get("peak", m), m)
    recent.append(m)
    state["n_means"] = state.get("n_means", 0) + 1  # how many k-point means the running peak is the best of
    if len(recent) > c_pts:
        state["floor"] = min(state.get("floor", math.inf), recent.pop(0))


def score_collapse_rule(w, state, p) -> Signal | None:
    x = w.series(TASK_SCORE)
    v = float(x[-1]) if x.size else math.nan
    bounds = _bounds(state, v)
    rows = state["rows"] = state.get("rows", 0) + 1
    if not math.isfinite(v):
        # a row without the score (between evaluations, a row of other metrics): the last verdict stands
        return state.get("last")
    n = state["n"] = state.get("n", 0) + 1
    k, c_pts = int(p["peak_points"]), int(p["confirm"])
    if rows >= 2 * n:
        # a score logged at evaluation steps only (one point every few rows, on a fixed evaluation set): one
        # point is a measurement, not a noisy batch, and waiting for the next evaluation would cost many steps
        c_pts = 1
    fin = x[np.isfinite(x)]
    _update_peak(state, fin, k, c_pts)
    ref = _reference(state, bounds, p)
    low = ref is not None and (v - ref[0]) / (ref[1] - ref[0]) <= p["frac_levels"][0]
    noise = calm_noise(state, v, low, int(p["fall_points"]))
    # a fall under way: the current mean of the test spans every low point so far (its standard error shrinks as
    # the fall lasts, so a real fall on a noisy score is confirmed, a two-point dip is not)
    state["low"] = state.get("low", 0) + 1 if low else 0
    sig = None
    if ref is not None and n >= p["min_points"] and fin.size >= c_pts and _significant(state, fin, noise, c_pts, p):
        sig = _fall_signal(v, float(fin[-c_pts:].mean()), ref, bounds, c_pts, p)
    state["last"] = sig
    return sig


def _significant(state: dict, fin: np.ndarray, noise: float, c_pts: int, p) -> bool:
    """The fall from the peak passes the t-test plus the running maximum's bias (module doc) for some span f of the
    last points, from ``c_pts`` up to the low points so far: a plateau below the first fraction before the fall (the
    development run rho0.10 sat at 0.6 of a 0.875 peak for 60 steps, then fell to 0) must not dilute the fall's
    mean, and the shortest span that passes is the one a user would read off the curve."""
    if state.get("n_ss", 0) < p["noise_min"] - 1 or not math.isfinite(noise):
        return False  # no measure of the noise yet: a fall cannot be told from two bad batches
    k, n_means = int(p["peak_points"]), state.get("n_means", 1)
    bias = math.sqrt(2.0 * math.log(n_means) / k) if n_means > 1 else 0.0
    t = t_from_z(p["noise_z"], state["n_ss"])
    top = int(min(max(c_pts, state["low"]), fin.size, p["fall_points"]))
    tail = fin[::-1][:top].cumsum() / np.arange(1, top + 1)  # [top]: mean of the last f points, f = 1..top
    f = np.arange(c_pts, top + 1)
    need = noise * (t * np.sqrt(1.0 / k + 1.0 / f) + bias)
    return bool(np.any(state["peak"] - tail[f - 1] >= need))


def _fall_signal(v: float, cur: float, ref: tuple[float, float], bounds, c_pts: int, p) -> Signal | None:
    floor, peak = ref
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
              "last_slack) reach, once P - floor >= min_peak x span and the fall is significant against the noise s "
              "of one point (sqrt(mean squared change / 2) over the changes since the start, the largest 25 % left out "
              "and the rest rescaled (unbiased on normal noise), those of a stretch below "
              "the first fraction once it ends; at least noise_min points): P - c_f >= s (t sqrt(1/peak_points + 1/f) + "
              "sqrt(2 ln N / peak_points)), c_f the mean of the last f points, f the points below the first fraction "
              "so far (confirm..fall_points), t the Student-t quantile of noise_z for the changes s rests on, N the "
              "peak means seen (a t-test plus the bias of a running maximum). Windows in logged points."),
    param_docs={
        "peak_points": "logged points averaged for the running peak",
        "confirm": "logged points averaged for the current score",
        "min_points": "logged points of the score needed before the rule can fire",
        "fall_points": "most logged points the current mean of a lasting fall spans in the significance test",
        "noise_z": "the fall must exceed this many standard errors of peak minus current (plus the running "
                   "maximum's bias)",
        "noise_min": "logged points of the score needed to measure its noise",
        "last_slack": "the last point may sit this far above the fraction",
    },
    remedies=(Remedy("stop and roll back to the last checkpoint before the first warning"),
              Remedy("apply the precursors' recommendations (learning rate, clip range, length and entropy "
                 "settings) before resuming"),),
    inputs=(TASK_SCORE,),
    rule=score_collapse_rule,
    # points, not steps: the rule compares logged values of the score, however often they are logged
    params=dict(peak_points=3, confirm=2, min_points=4, min_peak=0.1, fall_points=20, noise_z=3.0, noise_min=6,
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
