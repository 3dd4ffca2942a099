"""The fleet table: one row per run under a root (its state, verdict and outcome), shared by `arldiag ls` and the
dashboard's fleet view.

Each row costs one replay of the run's steps through the detectors (``detectors.evaluate_run``); the verdict is
the report's (``arldiag.verdict``) over that same replay, so a row says what `arldiag report` would say at its top:
the word in ``verdict``, why in ``verdict_reason``. Nothing here reads the token or sequence tables, and pandas/DuckDB load only when a table is computed.

A row is cached in its run folder (arldiag.fleetrun.summary_cache, keyed on the parts' names, sizes and mtimes):
`ls` reads a cached row without opening the run, and ``run_row`` (the dashboard's fleet table) returns it without the
replay, so an unchanged run costs one directory listing instead of one replay.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from arldiag.detectors import decline_of, evaluate_run, label_of
from arldiag.fleetrun import summary_cache
from arldiag.fleetrun.locate import locate_runs, run_label
from arldiag.store.location import is_url
from arldiag.store.reader import open_run
from arldiag.verdict import verdict_of

# The outcome column of a row: the first of these with a value, the success rate of arldiag's own runs or the task
# score a real run logs (the dashboard overview's score panel, dashboards.views_series.SCORE_PANEL), then the
# validation success and the reward.
OUTCOME_COLUMNS = ("success_rate", "success_frac", "task_score", "eval_success", "val_score", "reward_mean")

# (row key, header) of the columns `arldiag ls` prints and the dashboard shows, in order; a row also holds
# path, decline_step, risk, max_state, verdict_reason and error (the JSON output has them all)
COLUMNS: list[tuple[str, str]] = [
    ("name", "run"), ("algorithm", "algorithm"), ("steps", "steps"), ("last_step", "last step"),
    ("state", "state"), ("verdict", "verdict"), ("collapse_step", "collapse"), ("first_warning", "first warning"),
    ("outcome", "outcome"), ("peak", "peak"), ("last", "last"),
]
NUMERIC = frozenset({"steps", "last_step", "collapse_step", "first_warning", "peak", "last", "risk", "decline_step"})
ERROR = "error"  # the verdict of a run whose row could not be computed (the row's "error" says why)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def outcome_of(frame) -> tuple[str | None, float | None, float | None]:
    """(column, peak, last value) of the run's outcome series (OUTCOME_COLUMNS, the first with a finite value);
    (None, None, None) when the run logs none of them."""
    for col in OUTCOME_COLUMNS:
        if col not in frame.columns:
            continue
        vals = [f for f in (_num(v) for v in frame[col].tolist()) if f is not None]
        if vals:
            return col, max(vals), vals[-1]
    return None, None, None


def empty_row(name: str, path: str = "", algorithm: str | None = None) -> dict[str, Any]:
    return {"name": name, "path": path, "algorithm": algorithm, "steps": 0, "last_step": None, "state": None,
            "risk": None, "max_state": None, "verdict": None, "verdict_reason": None, "collapse_step": None, "decline_step": None,
            "first_warning": None, "outcome": None, "peak": None, "last": None, "error": None}


def error_row(name: str, path: Any, exc: BaseException, doing: str = "opened") -> dict[str, Any]:
    """The row of a run that could not be ``doing`` (opened, read): the verdict ``error``, the exception in ``error``
    and in words in ``verdict_reason``; no step count."""
    row = empty_row(name, str(path))
    row.update(verdict=ERROR, error=f"{type(exc).__name__}: {exc}", steps=None)
    row["verdict_reason"] = f"the run could not be {doing}: {row['error']}"
    return row


def run_row(run: Any, name: str, label: str | None = None) -> dict[str, Any]:
    """The fleet row of run ``name`` of an open Run (arldiag.open_run), from one replay of its steps.

    ``label``: the name shown (default ``name``), e.g. the run's folder relative to the root. A run whose
    detectors cannot run gets the verdict ``error`` and the reason in ``error``, not an exception: one broken run
    does not hide the others."""
    manifest = dict((getattr(run, "manifests", {}) or {}).get(name) or {})
    path = (getattr(run, "paths", {}) or {}).get(name, "")
    # the cache holds rows of one-run folders only (a Run over several runs names each by its place among them)
    local = bool(path) and len(getattr(run, "paths", {}) or {}) == 1 and Path(str(path), "run.json").is_file()
    key = summary_cache.key_of(path) if local else None
    hit = summary_cache.load(path, key) if key else None
    if hit is not None:
        return {**hit, "name": label or name, "path": str(path)}
    row = empty_row(label or name, str(path), manifest.get("algorithm"))
    try:
        _fill(row, run, name)
    except Exception as exc:  # noqa: BLE001 - reported in the row (a fleet view lists every run it can)
        row["verdict"], row["error"] = ERROR, f"{type(exc).__name__}: {exc}"
        row["verdict_reason"] = f"the run could not be read: {row['error']}"
    else:
        if key and summary_cache.run_key(path) == key:  # unchanged while it was replayed (a run being written)
            summary_cache.store(path, row, key)
    return row


def path_row(path: str | os.PathLike, label: str) -> tuple[dict[str, Any], Exception | None]:
    """The fleet row of the run folder or URL ``path`` shown as ``label``: the cached row when the run did not
    change (without opening it), else one replay (``run_row``). A run that cannot be opened is an ``error`` row;
    the exception comes back beside it so a caller can tell "every run is broken" from "one is"."""
    hit = summary_cache.load(path)
    if hit is not None:
        return {**hit, "name": label, "path": str(path)}, None
    try:
        one = open_run(path)
    except (OSError, ValueError) as exc:  # e.g. a broken run.json: the other runs are still listed
        return error_row(label, path, exc), exc
    try:
        return run_row(one, one.names[0], label), None
    finally:
        one.close()


def _fill(row: dict[str, Any], run: Any, name: str) -> None:
    ev = evaluate_run(run, name)  # the one replay: timeline, findings and the steps frame all come from it
    frame = ev.frame
    row["steps"] = len(ev.steps)
    row["last_step"] = ev.steps[-1] if ev.steps else None
    row["outcome"], row["peak"], row["last"] = outcome_of(frame)
    if not ev.steps:
        return  # no step yet: nothing to judge
    _, risk, state, _ = ev.timeline[-1]
    row["state"], row["risk"] = state, _num(risk)
    collapse = label_of(frame)
    v = verdict_of(ev, collapse, decline_of(frame) if collapse is None else None)
    row.update(verdict=v.status, verdict_reason=v.reason, collapse_step=v.collapse_step, decline_step=v.decline_step,
               first_warning=v.first_warning_step, max_state=v.max_state)


def fleet_table(root: str | os.PathLike, run: Any = None) -> list[dict[str, Any]]:
    """One row per run under ``root`` (a root of runs, a run, or a glob), sorted by name: see ``run_row``.

    Each run is opened on its own (``arldiag.open_run(run_dir)``) and closed after its row: one connection over
    every run would answer each run's query by scanning the union of all of them. A run that cannot be opened (a
    broken run.json) is a row with the verdict ``error`` while another run opens; when none does, its error is
    raised, as for a path that is neither a run nor holds one (FileNotFoundError). ``run``: an already open Run to
    take the rows from instead."""
    if run is not None:
        root = Path(root)
        rows = [run_row(run, n, run_label(root, run.paths.get(n), n)) for n in run.names]
        return sorted(rows, key=lambda r: r["name"])

    rows, failed = [], []
    for ref in locate_runs([str(root) if is_url(root) else root]):
        row, exc = path_row(ref.path, ref.label)
        rows.append(row)
        if exc is not None:
            failed.append(exc)
    if failed and len(failed) == len(rows):
        raise failed[0]
    return sorted(rows, key=lambda r: r["name"])


def cell_text(key: str, value: Any) -> str:
    """How a row's value is printed: blanks for missing values, outcome values with 3 decimals."""
    if value is None:
        return ""
    if key in ("peak", "last", "risk") and isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]] = COLUMNS) -> str:
    """The rows as an aligned text table (numbers right-aligned), one line per run under a header line."""
    cells = [[cell_text(k, r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]

    def line(vals: list[str]) -> str:
        return "  ".join(v.rjust(w) if k in NUMERIC else v.ljust(w)
                         for (k, _), v, w in zip(columns, vals, widths)).rstrip()

    return "\n".join([line([h for _, h in columns])] + [line(c) for c in cells])
