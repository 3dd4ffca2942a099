"""Outcome context: where the run's outcome stands at this step, so that a rule can tell a healthy run from a
failing one (low entropy at a high steady success is convergence; KL to the reference that grows while success
improves is learning; groups without reward variance because every rollout succeeds are mastery).

The Evaluator computes it once per step (``OutcomeTracker.update``) and puts it on ``window.context`` before the
rules run; the state is O(1) (a count, a running peak, a frozen early baseline), so the Monitor's per-step cost
stays flat. The outcome is ``eval_success`` when the run logs it (greedy evaluation every few steps, NULL in
between: the mean of the last ``eval_points`` evaluations in the window), else the batch success
(``success_rate``, else ``success_frac``), else the mean reward while it stays within [0, 1] (REWARD_COLUMN),
smoothed over ``smooth`` steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arldiag.aliases import TASK_SCORE
from arldiag.detectors.window import Window, count_finite, early_baseline, robust_noise, running_max, slope, tail_mean
from arldiag.label import EVAL_COLUMN, REWARD_COLUMN

BATCH_COLUMNS = ("success_rate", "success_frac")
# REWARD_COLUMN, the last resort, for trainers that log no success flag (TRL, most verl recipes): the mean reward,
# read as a success rate only while every value the run logged lies in [0, 1] (accuracy and format rewards, pass
# rates); a run whose reward leaves [0, 1] once has no outcome from then on, as before, since "near its peak" and
# "high" mean nothing on an unknown scale. The collapse label (detectors/label.py) falls back to it the same way.
OUTCOME_COLUMNS = (EVAL_COLUMN,) + BATCH_COLUMNS + (TASK_SCORE, REWARD_COLUMN)


@dataclass(frozen=True)
class Outcome:
    source: str | None   # the column read; None when the run logs no outcome (then nothing is discounted)
    level: float         # smoothed outcome now
    peak: float          # running peak of ``level`` (after the smoothing window filled)
    base: float          # median of the first ``baseline`` finite values
    rise: float          # least-squares slope over the last ``trend`` steps x trend (the change over that span)
    rise_sd: float = math.nan  # the noise of ``rise``: robust per-point noise x sqrt(12 / points in the span)
    fresh_peak: bool = False   # the running peak rose within the trend span
    level_sd: float = math.nan  # the noise of ``level``: robust per-point noise / sqrt(points it averages)
    n_levels: int = 0           # smoothed levels the running peak is the best of (for its bias)

    @property
    def known(self) -> bool:
        return self.source is not None and math.isfinite(self.level) and math.isfinite(self.peak)

    def near_peak(self, keep: float) -> bool:
        """The outcome has not fallen: level >= keep x its running peak."""
        return self.known and self.peak > 0 and self.level >= keep * self.peak

    def improving(self, keep: float, min_rise: float) -> bool:
        """Near its peak and still rising by at least ``min_rise`` over the trend span, and above the start."""
        return (self.near_peak(keep) and math.isfinite(self.rise) and self.rise >= min_rise
                and (not math.isfinite(self.base) or self.level > self.base))

    def climbing(self, keep: float, min_rise: float, noise_z: float) -> bool:
        """Learning, not noise and not a recovery: improving, by at least ``noise_z`` sds of the rise's noise (a
        noisy batch score "rises" by 0.1 over a few points by chance), and to a peak set within the trend span
        (a score that climbs back after a dip is recovering to an old best, not learning something new)."""
        return (self.improving(keep, min_rise) and self.fresh_peak and math.isfinite(self.rise_sd)
                and self.rise >= noise_z * self.rise_sd)

    def weakening(self, keep: float = 0.9, z: float = 3.0) -> bool:
        """The outcome loses ground beyond its noise (the corroboration gate opens for one precursor family): its
        level sits below ``keep`` x its peak by more than z sds of the level plus the bias of a running maximum of
        that many levels (sd sqrt(2 ln N): a noisy flat score's peak is its luckiest stretch, not its level), or it
        falls over the trend span by more than z sds of the rise. Unknown outcome: not weakening."""
        if not self.known:
            return False
        sd = self.level_sd if math.isfinite(self.level_sd) else 0.0
        bias = math.sqrt(2.0 * math.log(self.n_levels)) if self.n_levels > 1 else 0.0
        below = self.peak > 0 and self.level < keep * self.peak and self.peak - self.level > (z + bias) * sd
        falling = math.isfinite(self.rise) and math.isfinite(self.rise_sd) and self.rise < -z * self.rise_sd
        return bool(below or falling)

    def converged(self, keep: float, min_level: float) -> bool:
        """High and steady: level >= min_level and near its peak."""
        return self.near_peak(keep) and self.level >= min_level

    def describe(self) -> str:
        if not self.known:
            return "no outcome logged"
        rise = f", {self.rise:+.2f} over the trend span" if math.isfinite(self.rise) else ""
        return f"{self.source} {self.level:.2f} (peak {self.peak:.2f}{rise})"


UNKNOWN = Outcome(None, math.nan, math.nan, math.nan, math.nan)


def outcome_of(w) -> Outcome:
    """The context the Evaluator put on the window (UNKNOWN for a bare Window, e.g. a rule called directly)."""
    return getattr(w, "context", None) or UNKNOWN


# a level or a trend read from fewer logged points is one batch's noise (a 0/1 score of 16 prompts swings by 0.1)
MIN_POINTS = 5


class OutcomeTracker:
    """``smooth``, ``trend`` and ``baseline`` are optimizer steps; on a log written every ``interval`` steps each
    covers ceil(k / interval) logged points (``at_interval``), as every window of the rules does."""

    def __init__(self, smooth: int = 10, trend: int = 20, baseline: int = 10, eval_points: int = 3) -> None:
        self.steps = (smooth, trend, baseline)
        self.smooth, self.trend, self.baseline, self.eval_points = smooth, trend, baseline, eval_points
        self.state: dict = {}

    def at_interval(self, interval: int) -> "OutcomeTracker":
        """Windows in logged points for a log written every ``interval`` optimizer steps (the state is kept: the
        interval is known from the second logged step on)."""
        rows = lambda k: max(MIN_POINTS, math.ceil(k / max(1, int(interval))))  # noqa: E731
        self.smooth, self.trend, self.baseline = (min(k, rows(k)) for k in self.steps)
        return self

    def update(self, w: Window) -> Outcome:
        ev = w.series(EVAL_COLUMN)
        fin = ev[np.isfinite(ev)] if ev.size else ev
        if fin.size or self.state.get("eval"):
            # once a run has logged eval_success, it stays the outcome (between evaluations the last ones hold)
            self.state["eval"] = True
            col, x = EVAL_COLUMN, ev
            cur = float(fin[-self.eval_points:].mean()) if fin.size else self.state.get("last", math.nan)
            last = ev[-1] if ev.size else math.nan
        else:
            col = next((c for c in BATCH_COLUMNS if np.isfinite(w.series(c)).any()), None)
            if col is None and not self.state.get("score_off") and np.isfinite(w.series(TASK_SCORE)).any():
                # a real run's task score (arldiag.aliases) on [0, 1]; +1/-1 read as (x + 1) / 2; a non-negative
                # score on its own scale (a sum of rewards) read as a share of its best smoothed level so far
                t = w.series(TASK_SCORE)
                v = t[-1]
                if math.isfinite(v):
                    self.state["neg"] = self.state.get("neg", False) or v < 0
                    self.state["own"] = self.state.get("own", False) or v > 1.0
                    if v < -1.0 or (self.state["neg"] and self.state["own"]):
                        self.state["score_off"] = True  # negative and beyond [-1, 1]: no level to read
                if not self.state.get("score_off"):
                    if self.state.get("own"):
                        best = running_max(self.state, "own_best", tail_mean(t, self.smooth))
                        x = t / best if math.isfinite(best) and best > 0 else t * math.nan
                    else:
                        x = (t + 1.0) / 2.0 if self.state.get("neg") else t
                    return self._outcome(TASK_SCORE, x, tail_mean(x, self.smooth), x[-1])
            if col is None and not self.state.get("reward_off"):
                r = w.series(REWARD_COLUMN)
                if r.size and math.isfinite(r[-1]) and not 0.0 <= r[-1] <= 1.0:
                    self.state["reward_off"] = True  # off for the rest of the run (the state keeps no history)
                elif np.isfinite(r).any():
                    col = REWARD_COLUMN
            if col is None:
                return UNKNOWN
            x = w.series(col)
            cur, last = tail_mean(x, self.smooth), x[-1]
        return self._outcome(col, x, cur, last)

    def _outcome(self, col: str, x: np.ndarray, cur: float, last: float) -> Outcome:
        self.state["last"] = cur
        n = count_finite(self.state, "n", last)
        base = early_baseline(self.state, "base", last, self.baseline if col != EVAL_COLUMN else 2)
        full = n >= (self.eval_points if col == EVAL_COLUMN else min(self.smooth, 3))
        old_peak = self.state.get("peak", math.nan)
        peak = running_max(self.state, "peak", cur) if full else old_peak
        if math.isfinite(peak) and not peak == old_peak:
            self.state["peak_n"] = n  # when the peak last rose (in finite points of the outcome)
        span = self.trend if col != EVAL_COLUMN else x.size  # evaluations are sparse: use the whole window
        rise = slope(x, span) * min(span, x.size)
        m = int(np.isfinite(x[-span:]).sum())
        noise = robust_noise(x)
        rise_sd = noise * math.sqrt(12.0 / m) if m >= 2 else math.nan
        fresh = "peak_n" in self.state and n - self.state["peak_n"] < span
        k = self.eval_points if col == EVAL_COLUMN else self.smooth
        level_sd = noise / math.sqrt(min(k, max(1, n)))
        n_levels = max(1, (n - min(k, 3) + 1) // max(1, k)) if full else 0  # roughly independent levels so far
        return Outcome(col, cur, peak, base, rise, rise_sd, fresh, level_sd, n_levels)
