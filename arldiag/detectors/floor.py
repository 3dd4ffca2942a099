"""The alert floor: never silent on a collapse that the verdict's own rule (arldiag/label.py) will call a collapse.

The collapse label looks ahead (a collapse is a fall that stays down to the end of the run), so no online rule can
reproduce it; but every condition of the label that is decided by the first few points after the collapse can be
checked online. The floor checks exactly those *necessary* conditions, ``LEAD`` logged points after each candidate
collapse point, so that whenever the label will later place a collapse at point t, the floor holds at point t + 3
(the label itself confirms at t + 4 at the earliest): by construction, whatever the score's noise, scale or log
interval. It holds for as long as the candidate is not refuted (the label asks the smoothed outcome never to come
back), so a dip that recovers ends the floor as soon as the outcome is back above half its best.

Two rules, as in label.run_events:

* **task score** (label.score_collapse_index; a run that logs no success flag of arldiag's own): on the logged
  points a (y as logged when y >= 0, else shifted and scaled), m the centred 5-point mean, best_t = max m[:t]: the
  label at t needs a[t] <= best_t / 3, mean(a[t..t+4]) <= best_t / 3, m[j] <= best_t / 2 for every j >= t and
  best_t >= 0.02. At point i = t + 3 all of m[t], m[t + 1] are known, and since a >= 0 the mean over t..t+4 is at
  most best_t / 3 only if sum(a[t..t+3]) <= 5 best_t / 3. The unknown final shift L_f of the scale (unit_score: 0, -1
  or the run's minimum) is at most L = min(0, lowest value seen so far); every condition, written in y, is looser
  for a larger L, so testing with L keeps the floor necessary.
* **outcome series** (label.series_events: success rate, format validity, eval success on its evaluation points):
  with the trailing mean m over ``window`` steps and its running peak P, the label at a needs every row from a on
  to be either a raw value below frac x P (the rows it moved back over) or a row of the lasting below-stretch (m
  below frac x P), so at a + 3 the last four rows all are (eval success, whose label needs only 2 evaluations of
  tail: the last 2, at a + 1).

The floor is a detector (``collapse_floor``) whose warning is a floor of the alert state (Detector.floor): the
Evaluator opens the warning at once, without the hysteresis's two points and without the corroboration gate, and
keeps it open while the floor holds. The significance test of ``score_collapse`` and the precursors can warn
earlier, never later.
"""
from __future__ import annotations

import math
from collections import deque

from arldiag.aliases import TASK_SCORE
from arldiag.detectors.advice import Remedy
from arldiag.detectors.base import Detector, Signal
from arldiag.detectors.window import Window
from arldiag.label import (EVAL_COLUMN, EVAL_MIN_POINTS, EVAL_MIN_TAIL, EVAL_WINDOW, FORMAT_COLUMNS, REWARD_COLUMN,
                           SUCCESS_COLUMNS)

LEAD = 3             # logged points after the collapse point by which the floor holds (the label confirms at + 4)
WARNING = 2          # the level the floor raises the alert state to (levels.LEVELS)
# label.score_collapse_index's defaults (frac, keep, confirm, min_best) and label.series_events' (window, frac,
# min_peak): the floor mirrors the rule the verdict reads, so it takes no settings of its own
SCORE_FRAC, SCORE_KEEP, SCORE_CONFIRM, SCORE_MIN_BEST, SCORE_WIDTH = 1 / 3, 0.5, 5, 0.02, 5
SERIES_WINDOW, SERIES_FRAC, SERIES_MIN_PEAK, SERIES_MIN_TAIL = 10, 0.5, 0.2, 5


class ScoreFloor:
    """Necessary conditions of label.score_collapse_index, one logged point at a time. O(1) state: the last
    ``SCORE_WIDTH`` points, the best centred mean so far, the candidates still inside their confirmation span and
    the newest confirmed one (a newer confirmed candidate has a higher best and fewer later points to stay under
    it, so it is alive whenever an older one is)."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=SCORE_WIDTH)   # the last points (y as logged)
        self.n = 0                                              # points seen
        self.lo = math.inf                                      # lowest / highest value seen
        self.hi = -math.inf
        self.best = -math.inf                                   # max of the centred means m[0..n-5] (y units)
        self.m_last = math.nan                                  # m[n-4]: completed one point ago
        self.pending: list[dict] = []                           # candidates t with fewer than SCORE_CONFIRM points
        self.confirmed: dict | None = None                      # the newest candidate past its confirmation span

    def _shift(self) -> tuple[float, float]:
        """(L, S): the scale's origin and span that keep every condition necessary (module doc)."""
        lo = min(0.0, self.lo)
        span = 1.0 if self.lo >= 0.0 else max(self.hi - lo, 1e-12)
        return lo, span

    def push(self, y: float) -> bool:
        """Add a logged point; True while some candidate collapse at least LEAD points back is not refuted."""
        self.n += 1
        self.lo, self.hi = min(self.lo, y), max(self.hi, y)
        self.recent.append(y)
        # the centred mean this point completes: m[n-3], the mean of a[n-5..n-1] (label.centred_mean: m[0] and m[1]
        # average the first 3 and 4 points)
        new_m = sum(self.recent) / len(self.recent) if self.n >= 3 else math.nan
        lo, span = self._shift()
        keep = (1 - SCORE_KEEP) * lo  # the offset of "m <= best / 2", written in y
        if math.isfinite(new_m):  # refute candidates whose later centred mean came back above half their best
            self.pending = [c for c in self.pending if new_m <= SCORE_KEEP * c["best"] + keep + 1e-12]
            if self.confirmed is not None and new_m > SCORE_KEEP * self.confirmed["best"] + keep + 1e-12:
                self.confirmed = None
        for c in self.pending:
            c["pts"].append(y)
        self.pending = [c for c in self.pending if self._confirmable(c, lo)]
        done = [c for c in self.pending if len(c["pts"]) >= SCORE_CONFIRM]
        if done:
            self.confirmed = done[-1]
            self.pending = [c for c in self.pending if len(c["pts"]) < SCORE_CONFIRM]
        self._new_candidate(lo, span, keep, new_m)
        if math.isfinite(self.m_last):
            self.best = max(self.best, self.m_last)
        self.m_last = new_m
        return self.confirmed is not None or bool(self.pending)

    @staticmethod
    def _confirmable(c: dict, lo: float) -> bool:
        """mean(a[t..t+4]) <= best_t / 3 can still hold: a >= 0, so the points to come can only add to the sum."""
        return sum(p - lo for p in c["pts"]) <= SCORE_CONFIRM * SCORE_FRAC * (c["best"] - lo) + 1e-12

    def _new_candidate(self, lo: float, span: float, keep: float, m_next: float) -> None:
        """The candidate t = n - 1 - LEAD (0-based), now that t + LEAD is the newest point: best_t = max m[:t] =
        ``self.best``, m[t] = ``self.m_last``, m[t + 1] = ``m_next``."""
        t = self.n - 1 - LEAD
        best = self.best
        if t < 1 or not math.isfinite(best) or (best - lo) / span < SCORE_MIN_BEST:
            return
        pts = list(self.recent)[-(LEAD + 1):]  # y[t..t+3]
        if pts[0] - lo > SCORE_FRAC * (best - lo) + 1e-12:
            return
        if any(m > SCORE_KEEP * best + keep + 1e-12 for m in (self.m_last, m_next)):
            return
        cand = {"best": best, "pts": pts}
        if self._confirmable(cand, lo):
            self.pending.append(cand)


class SeriesFloor:
    """Necessary conditions of label.series_events at a + LEAD, one row (or evaluation point) at a time: from a on,
    each row is either a raw value below frac x the running peak (the rows the label moved back over) or a row of
    the lasting below-stretch (the trailing mean below frac x its peak), so the last LEAD + 1 rows all are one or
    the other. A series whose label needs fewer rows (``min_tail``: 2 evaluations of eval success) can collapse with
    fewer rows left in the run, so its floor holds after min(LEAD + 1, min_tail) such rows."""

    def __init__(self, window: int, min_tail: int) -> None:
        self.window = window
        self.need = min(LEAD + 1, min_tail)
        self.buf: deque[float] = deque(maxlen=window)
        self.i = 0
        self.peak = -math.inf
        self.low_rows = 0  # consecutive rows whose raw value or trailing mean is below frac x peak (peak >= min_peak)

    def push(self, y: float) -> bool:
        self.buf.append(y)
        fin = [v for v in self.buf if math.isfinite(v)]
        m = sum(fin) / len(fin) if fin else math.nan
        if math.isfinite(m) and self.i >= min(self.window, 3) - 1:
            self.peak = max(self.peak, m)
        self.i += 1
        armed = self.peak >= SERIES_MIN_PEAK
        below = armed and (not math.isfinite(m) or m < SERIES_FRAC * self.peak)
        raw = armed and math.isfinite(y) and y < SERIES_FRAC * self.peak
        self.low_rows = self.low_rows + 1 if below or raw else 0
        return self.low_rows >= self.need


def _finite(v: float) -> bool:
    return isinstance(v, float) and math.isfinite(v)


def floor_rule(w: Window, state: dict, p) -> Signal | None:
    """The alert floor (module doc): every outcome series the label may read keeps its own floor; the signal names
    those the label would read on the run so far (label.run_events)."""
    vals = {c: w.last(c) for c in FLOOR_INPUTS}
    seen = state.setdefault("seen", set())
    seen.update(c for c, v in vals.items() if _finite(v))
    on = state.setdefault("on", {})
    if _finite(vals[TASK_SCORE]):
        on[TASK_SCORE] = state.setdefault("score", ScoreFloor()).push(vals[TASK_SCORE])
    if _finite(vals[EVAL_COLUMN]):
        state["n_eval"] = state.get("n_eval", 0) + 1
        on[EVAL_COLUMN] = state.setdefault("eval", SeriesFloor(EVAL_WINDOW, EVAL_MIN_TAIL)).push(vals[EVAL_COLUMN])
    for col in SUCCESS_COLUMNS + (REWARD_COLUMN,) + FORMAT_COLUMNS:  # rows: a step without the value counts
        if col in seen:
            on[col] = state.setdefault("series:" + col, SeriesFloor(SERIES_WINDOW, SERIES_MIN_TAIL)).push(vals[col])
    if TASK_SCORE in seen and not any(c in seen for c in SUCCESS_COLUMNS + (EVAL_COLUMN,)):
        # a run without a success flag of arldiag's own: the label reads the task score alone
        holds = [TASK_SCORE] if on.get(TASK_SCORE) else []
    else:
        holds = [EVAL_COLUMN] if on.get(EVAL_COLUMN) else []
        batch = _batch_column(seen, state, vals)
        if batch is not None and state.get("n_eval", 0) < EVAL_MIN_POINTS and on.get(batch):
            # the label reads the batch success only while the run has fewer than EVAL_MIN_POINTS evaluations
            holds.append(batch)
        holds += [c for c in FORMAT_COLUMNS if on.get(c)]
    return _signal(p, vals, holds) if holds else None


def _signal(p, vals: dict, holds: list[str]) -> Signal:
    col = holds[0]
    return Signal(max(WARNING, min(3, int(p["level"]))), float(vals[col]) if _finite(vals[col]) else math.nan, col,
                  f"{', '.join(holds)} fell as the collapse label's rule asks (arldiag.label), {LEAD} logged points "
                  f"on; the warning holds until the outcome comes back")


def _batch_column(seen: set, state: dict, vals: dict) -> str | None:
    """The label's batch outcome: the first success column the run logs, else the mean reward while every value
    seen lies in [0, 1] and no success column is logged."""
    for col in SUCCESS_COLUMNS:
        if col in seen:
            return col
    r = vals[REWARD_COLUMN]
    if _finite(r) and not 0.0 <= r <= 1.0:
        state["reward_off"] = True
    return REWARD_COLUMN if REWARD_COLUMN in seen and not state.get("reward_off") else None


FLOOR_INPUTS = (TASK_SCORE, EVAL_COLUMN) + SUCCESS_COLUMNS + (REWARD_COLUMN,) + FORMAT_COLUMNS

COLLAPSE_FLOOR = Detector(
    name="collapse_floor",
    title="Outcome fell as a collapse does (alert floor)",
    summary=("The outcome already meets every condition of the collapse label that its first points decide: the "
             "alert state is at warning from 3 logged points after the fall, whatever the noise."),
    rule_doc=("task score (a run without a success flag): a[t] <= best_t / 3, sum(a[t..t+3]) <= 5 best_t / 3, "
              "m[t], m[t+1] <= best_t / 2 (m the centred 5-point mean, best_t = max m[:t] >= 0.02, a the score "
              "shifted by min(0, lowest value seen)), checked at t + 3 and held while every later m stays <= best_t "
              "/ 2; success rate, format validity, eval success: the trailing mean (10 steps; 3 evaluations) below "
              "half its running peak (>= 0.2), or the last 4 raw values below it. The necessary conditions of "
              "arldiag.label's rule; a floor of the alert state (warning at once, no hysteresis, no corroboration)."),
    inputs=FLOOR_INPUTS,
    rule=floor_rule,
    params=dict(level=WARNING),
    param_docs={"level": "the alert level the floor holds while the outcome is down: 2 warning (at least), 3 critical"},
    remedies=(Remedy("stop and roll back to the last checkpoint before the fall"),
              Remedy("read the precursors' findings for the cause before resuming"),),
    explanation="The outcome fell the way a collapse does: by the collapse label's own rule it has lost at least "
                "two thirds of its best (task score) or half its peak (success, format), and nothing yet says it "
                "will come back. The warning holds until it does.",
    recommendation="Stop and roll back to the last checkpoint before the fall; read the precursors' findings for "
                   "the cause before resuming.",
    source="arldiag.label (the verdict's collapse rule), its conditions decided by the first 3 points after the fall",
    lagging=True,
    floor=True,
)

DETECTORS = [COLLAPSE_FLOOR]
