"""Run against run (`arldiag diff`): the settings that differ, where each shared metric parts (``parting``), the
first to part, the outcome's parting and the lead between them, and the token statistics of both runs in the window
before the outcome parts.

``load(run)`` reads what the comparison needs from one open run (its step table, manifest, actions, whether it has
token rows); ``compare(a, b)`` is pure over two of those (the dashboard caches ``load`` per run);
``add_tokens(diff, run_a, run_b)`` adds the token window, one DuckDB pass per run; ``diff_runs`` does all three.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from arldiag.aliases import TASK_SCORE
from arldiag.diff.parting import Parting, PartingRule, align, first_parting
from arldiag.diff.settings import setting_delta
from arldiag.diff.tokens import one_in, window_stats
from arldiag.label import EVAL_COLUMN, EVAL_MIN_POINTS, REWARD_COLUMN, SUCCESS_COLUMNS
from arldiag.schema import STEP_METRICS
from arldiag.views._sql import query
from arldiag.views.events import actions
from arldiag.views.series import step_frame

DIFF_VERSION = "1.0"
# bookkeeping, not training: wall-clock timings and counters of the log itself (an imported log counts one update
# per logged row)
SKIP = frozenset({"run", "step", "time", "epoch", "step_time", "n_updates"})
OWN = tuple(m.name for m in STEP_METRICS)


@dataclass
class RunSide:
    """What ``compare`` reads of one run."""
    name: str
    manifest: dict
    steps: pd.DataFrame                 # the steps view of the run, one row per step
    actions: list[tuple[int, str]] = field(default_factory=list)   # (step, action) of its closed loop
    has_tokens: bool = False            # the run has token rows (their number is not counted)


@dataclass
class MetricParting:
    """Where one metric parts (``Parting``), named, with the aligned points it was tested on."""
    metric: str
    step: int
    gap: float
    need: float
    noise_a: float
    noise_b: float
    mean_a: float
    mean_b: float
    strength: float
    points: int                         # aligned points of the metric over the common steps


@dataclass
class RunDiff:
    """The comparison of run A with run B (``to_dict`` is the `--json` output, version DIFF_VERSION)."""
    run_a: str
    run_b: str
    settings: list[tuple[str, Any, Any]]          # (dotted run.json key, A, B): the settings that differ
    steps: tuple[int, int] | None                 # the steps both runs cover
    compared: list[str]                           # metrics both runs have, tested
    partings: list[MetricParting]                 # ranked by step (ties: the stronger first)
    outcome: str | None                           # the outcome column both runs log (task score / success)
    outcome_step: int | None                      # where the outcome parts
    actions: dict[str, list[tuple[int, str]]]     # each run's closed-loop actions
    rule: PartingRule = field(default_factory=PartingRule)
    token_window: tuple[int, int] | None = None   # the window before the outcome parts (add_tokens)
    tokens: dict[str, dict[str, float] | None] | None = None   # run name -> window_stats

    @property
    def first(self) -> MetricParting | None:
        return self.partings[0] if self.partings else None

    @property
    def lead(self) -> int | None:
        """Steps from the first parting to the outcome's (0 when the outcome parts first)."""
        if self.first is None or self.outcome_step is None:
            return None
        return self.outcome_step - self.first.step

    def to_dict(self) -> dict[str, Any]:
        first = self.first
        return {"version": DIFF_VERSION, "run_a": self.run_a, "run_b": self.run_b,
                "settings": [{"key": k, "a": a, "b": b} for k, a, b in self.settings],
                "steps": list(self.steps) if self.steps else None, "compared": list(self.compared),
                "parted": bool(self.partings), "first_metric": first.metric if first else None,
                "first_step": first.step if first else None, "outcome": self.outcome,
                "outcome_step": self.outcome_step, "lead": self.lead,
                "partings": [asdict(p) for p in self.partings],
                "actions": {k: [{"step": s, "action": a} for s, a in v] for k, v in self.actions.items()},
                "token_window": list(self.token_window) if self.token_window else None, "tokens": self.tokens,
                "rule": asdict(self.rule)}


def load(run: Any, name: str | None = None) -> RunSide:
    """One run's side of a comparison (``name`` picks a run of a multi-run view)."""
    name = name or run.names[0]
    manifest = dict(run.manifests.get(name, run.manifest))
    steps = step_frame(run, name)
    acts = actions(run, name=name) if has_rows(run, "actions", name) else pd.DataFrame()
    acted = [(int(s), str(a)) for s, a in zip(acts.get("step", []), acts.get("action", []))]
    return RunSide(name, manifest, steps, acted, has_rows(run, "tokens", name))


def has_rows(run: Any, table: str, name: str) -> bool:
    """The run has at least one row in ``table`` (reads one row, not a count of them)."""
    try:
        return not query(run, f"select 1 from {table} where run = ? limit 1", [name]).empty
    except Exception:  # noqa: BLE001 - a table the store never wrote has no view
        return False


def _values(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def shared_metrics(a: pd.DataFrame, b: pd.DataFrame, first: str | None = None) -> list[str]:
    """Numeric step columns with data in both runs, minus bookkeeping (SKIP, wall-clock ``*_s``) and minus a
    column equal, in both runs, to one kept before it (a trainer's ``user/entropy`` beside ``entropy``; the
    outcome ``first`` comes first, then arldiag's own names)."""
    cols = [c for c in a.columns if c in b.columns and c not in SKIP and not c.endswith("_s")
            and np.isfinite(_values(a, c)).any() and np.isfinite(_values(b, c)).any()]
    cols.sort(key=lambda c: (c != first, c not in OWN, c.startswith("user/"), c))
    kept, seen = [], set()
    for c in cols:
        key = (_values(a, c).tobytes(), _values(b, c).tobytes())
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


def outcome_column(a: pd.DataFrame, b: pd.DataFrame) -> str | None:
    """The outcome both runs log, as the collapse label reads it (arldiag.label): the greedy evaluation
    (eval_success) when both log it at EVAL_MIN_POINTS points or more, else the batch success, else the task score
    (aliases.TASK_SCORE: any scale), else the mean reward."""
    def points(c: str) -> int:
        return min(int(np.isfinite(_values(df, c)).sum()) if c in df else 0 for df in (a, b))

    if points(EVAL_COLUMN) >= EVAL_MIN_POINTS:
        return EVAL_COLUMN
    return next((c for c in (*SUCCESS_COLUMNS, TASK_SCORE, REWARD_COLUMN) if points(c) > 0), None)


def _parting(metric: str, a: pd.DataFrame, b: pd.DataFrame, rule: PartingRule) -> MetricParting | None:
    steps, ya, yb = align(a["step"], _values(a, metric), b["step"], _values(b, metric))
    p: Parting | None = first_parting(steps, ya, yb, rule)
    if p is None:
        return None
    return MetricParting(metric, p.step, p.gap, p.need, p.noise_a, p.noise_b, p.mean_a, p.mean_b, p.strength,
                         int(steps.size))


def compare(a: RunSide, b: RunSide, rule: PartingRule = PartingRule()) -> RunDiff:
    """The comparison of two loaded runs (module doc), without the token window (``add_tokens``)."""
    sa, sb = a.steps, b.steps
    common = None
    if len(sa) and len(sb):
        lo, hi = max(int(sa["step"].min()), int(sb["step"].min())), min(int(sa["step"].max()), int(sb["step"].max()))
        common = (lo, hi) if lo <= hi else None
    outcome = outcome_column(sa, sb) if common else None
    metrics = shared_metrics(sa, sb, outcome) if common else []
    found = [p for p in (_parting(m, sa, sb, rule) for m in metrics) if p is not None]
    # by step; at one step the metric furthest beyond its noise first (a setting switched by a closed loop has no
    # noise at all and comes first)
    found.sort(key=lambda p: (p.step, -p.strength, p.metric))
    out_step = next((p.step for p in found if p.metric == outcome), None)
    return RunDiff(a.name, b.name, setting_delta(a.manifest, b.manifest), common, metrics, found, outcome, out_step,
                   {a.name: a.actions, b.name: b.actions} if a.name != b.name else {"A": a.actions, "B": b.actions},
                   rule)


def _grid_gap(steps: pd.DataFrame, col: str | None) -> int:
    """The median step gap between a column's logged points (1 for a column logged every step)."""
    s = steps["step"].to_numpy()[np.isfinite(_values(steps, col))] if col in steps else steps["step"].to_numpy()
    d = np.diff(np.sort(s))
    return max(1, int(np.median(d))) if d.size else 1


def token_window(diff: RunDiff, a: RunSide, b: RunSide) -> tuple[int, int] | None:
    """The steps before the outcome parts: the rule's window (``window`` points of the outcome's coarser log) before
    the outcome's parting step, starting no earlier than the first parting. Without an outcome parting: the same
    span from the first parting on. None when nothing parts."""
    if diff.first is None:
        return None
    col = diff.outcome if diff.outcome_step is not None else diff.first.metric
    span = diff.rule.window * max(_grid_gap(a.steps, col), _grid_gap(b.steps, col))
    if diff.outcome_step is not None and diff.outcome_step > diff.first.step:
        return (max(diff.first.step, diff.outcome_step - span), diff.outcome_step - 1)
    if diff.outcome_step is not None:  # the outcome parted first: the window before it
        return (max(diff.steps[0], diff.outcome_step - span), diff.outcome_step)
    return (diff.first.step, min(diff.steps[1], diff.first.step + span - 1))


def add_tokens(diff: RunDiff, run_a: Any, run_b: Any, a: RunSide, b: RunSide) -> RunDiff:
    """The token statistics of both runs over ``token_window`` (one query per run), when both have token rows."""
    win = token_window(diff, a, b)
    if win is None or not (a.has_tokens and b.has_tokens):
        return diff
    diff.token_window = win
    diff.tokens = {"A" if a.name == b.name else a.name: window_stats(run_a, *win, a.name, a.manifest,
                                                                     one_in(_window_rows(a, win))),
                   "B" if a.name == b.name else b.name: window_stats(run_b, *win, b.name, b.manifest,
                                                                     one_in(_window_rows(b, win)))}
    return diff


def _window_rows(side: RunSide, win: tuple[int, int]) -> float:
    """The stored token rows expected in the window: its n_tokens x the run's token_sample_rate (NaN: unknown)."""
    s = side.steps
    if "n_tokens" not in s:
        return float("nan")
    sel = (s["step"] >= win[0]) & (s["step"] <= win[1])
    rate = side.manifest.get("token_sample_rate") or 1.0
    return float(np.nansum(_values(s[sel], "n_tokens"))) * float(rate)


def diff_runs(run_a: Any, run_b: Any, rule: PartingRule = PartingRule(), tokens: bool = True) -> RunDiff:
    """`arldiag diff` over two open runs (one run each)."""
    a, b = load(run_a), load(run_b)
    d = compare(a, b, rule)
    return add_tokens(d, run_a, run_b, a, b) if tokens else d

