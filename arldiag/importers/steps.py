"""A step importer's rows -> {step: {metric: value}} under arldiag's names.

Later rows of the same step update earlier ones (a validation row and a training row of one step become one step).
Non-numeric values (text, empty cells) are skipped; a column that is never numeric is reported once. Logged names
are renamed by the one resolver (arldiag/aliases.py MetricResolver: arldiag.toml [aliases], the exact table, the
words of arldiag/names.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from arldiag.aliases import TASK_SCORE, VAL_SCORE, MetricResolver, is_validation, task_score_source, val_score_source
from arldiag.importers.base import Importer
from arldiag.names import Reading

# step columns other loggers write, tried in this order when the format's default is not a column of the file
# (read in the trainers' sources: HF Trainer / TRL / OpenRLHF, verl, SkyRL, slime, ROLL, ms-swift's "12/500")
STEP_COLUMNS = ("step", "global_step", "train/global_step", "training/global_step", "trainer/global_step",
                "train/step", "system/global_step", "global_step/max_steps", "_step", "iteration", "iter", "Step")


def as_number(v: Any) -> float | None:
    """A finite-or-not float from a CSV cell or JSON value; None for text, empty cells and nulls."""
    if v is None or isinstance(v, (list, dict)):
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    if not s:
        return None
    if s.lower() in ("true", "false"):
        return 1.0 if s.lower() == "true" else 0.0
    try:
        return float(s)
    except ValueError:
        return None


@dataclass
class LoadedSteps:
    steps: dict[int, dict[str, float]]  # step -> numeric metrics under their logged names
    never_numeric: set[str]             # columns without a single numeric value
    stepless: int                       # rows without a step value (a run summary): skipped


def load_steps(path: Path, importer: Importer, step_column: str | None) -> LoadedSteps:
    """The numeric metrics of every row of ``path``, joined by step; ``step_column`` None: the row index (0, 1, ...)
    is the step (a log without a step column)."""
    steps: dict[int, dict[str, float]] = {}
    seen, numeric = set(), set()
    stepless = 0
    for index, (where, row) in enumerate(importer.read(path)):
        if step_column is None:
            row = {**row, None: index}  # the None key is skipped as a metric below
        elif step_column not in row:
            raise ValueError(f"step_column: {step_column!r} is not a column of {path} ({where} has "
                             f"{', '.join(list(row)[:8])}...); --step-column NAME picks the column that holds the "
                             "step")
        if row[step_column] is None or not str(row[step_column]).strip():
            stepless += 1  # a summary row (wandb's run summary, TRL's final train_runtime entry): no step to join
            continue
        step = as_number(row[step_column])
        if step is None and isinstance(row[step_column], str) and "/" in row[step_column]:
            step = as_number(row[step_column].split("/", 1)[0])  # ms-swift's logging.jsonl: "12/500"
        if step is None or not math.isfinite(step) or step != int(step):
            raise ValueError(f"step_column: {where} of {path} has a non-integer step {row[step_column]!r}")
        metrics = steps.setdefault(int(step), {})
        for k, v in row.items():
            if k == step_column or k is None:
                continue
            seen.add(k)
            x = as_number(v)
            if x is not None:
                numeric.add(k)
                metrics[k] = x
    return LoadedSteps(steps, seen - numeric, stepless)


def find_step_column(path: Path, importer: Importer, default: str) -> tuple[str, str | None]:
    """(column, why): ``default`` when the first row has it, else the first of ``STEP_COLUMNS`` it has, with the
    reason to say; the default otherwise (why None), so that load_steps names the missing column."""
    first = next(iter(importer.read(path)), None)
    # wandb's _step counts log calls, not optimizer steps: a logged optimizer step (HF's train/global_step) wins
    if first is None or (default in first[1] and default != "_step"):
        return default, None
    hit = next((c for c in STEP_COLUMNS if c in first[1]), None)
    if hit is None or hit == default:
        return default, None
    why = ("it counts optimizer steps, wandb's _step counts log calls" if default in first[1]
           else f"no {default!r} column")
    return hit, why


@dataclass
class NamePlan:
    rename: dict[str, str]        # logged name -> arldiag name
    copies: dict[str, str]        # task_score / val_score -> the logged column each is read from
    readings: dict[str, Reading]  # logged name -> what it was read as (arldiag.names.Reading), for the printout
    clashes: dict[str, str]       # logged name -> the arldiag name another column already fills


def plan_names(columns, user: Mapping[str, str], keep_names: bool,
               values: Mapping[str, list[float]] | None = None) -> NamePlan:
    """The renames, score copies and readings of a log's columns (``name_plan``; ``readings`` says how each was
    read: --rename, arldiag.toml, the exact table or the words, ambiguous or not placed)."""
    cols = list(dict.fromkeys(columns))
    resolver = None if keep_names else MetricResolver()  # arldiag.toml [aliases], the exact table, the words
    readings = {c: Reading(c, user[c], "--rename", user[c]) if c in user else resolver.read(c)
                for c in cols if c in user or resolver is not None}
    to_of = {c: r.metric for c, r in readings.items()}
    taken = {c for c in cols if c not in user and to_of.get(c) in (None, c)}
    rename: dict[str, str] = {}
    clashes: dict[str, str] = {}
    for c in cols:
        to = to_of.get(c)
        if to is None or to == c:
            continue
        if to in taken and c not in user:
            clashes[c] = to
            continue
        rename[c] = to
        taken.add(to)
    copies = {}
    for to, src in ((TASK_SCORE, task_score_source(cols, values=values)), (VAL_SCORE, val_score_source(cols, values))):
        if src is not None and src != to and to not in taken:
            copies[to] = src
    return NamePlan(rename, copies, readings, clashes)


def name_plan(columns, user: Mapping[str, str], keep_names: bool,
              values: Mapping[str, list[float]] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(rename, copies) for a log's columns. rename: logged name -> arldiag name (``user`` renames first, then
    arldiag.toml [aliases], the exact table and the words: ``aliases.MetricResolver``; a column already named as
    arldiag names it keeps its name, and of two logged names for one metric the first in the file wins, the other
    keeps its own name). copies: ``task_score`` / ``val_score`` -> the ONE logged column each is read from, chosen
    over the whole file (arldiag.aliases.task_score_source with ``values``: every column's values, so a rate-named
    column holding counts is passed over)."""
    p = plan_names(columns, user, keep_names, values)
    return p.rename, p.copies


def column_values(raw: Mapping[int, Mapping[str, float]]) -> dict[str, list[float]]:
    """Every column's values over the whole log, in step order (what the score chooser judges a column by)."""
    out: dict[str, list[float]] = {}
    for st in sorted(raw):
        for k, v in raw[st].items():
            out.setdefault(k, []).append(v)
    return out


def apply_plan(raw: Mapping[int, Mapping[str, float]], plan: Mapping[str, str],
               copies: Mapping[str, str]) -> dict[int, dict[str, float]]:
    """The step table under arldiag's names: renamed columns, and the task/validation score copies (a step
    without the score's column gets none: no other column fills in)."""
    steps = {}
    for st, m in raw.items():
        row = {plan.get(k, k): v for k, v in m.items()}
        for to, src in copies.items():
            if src in m:
                row[to] = m[src]
        steps[st] = row
    return steps


def is_training(metrics: Mapping[str, float]) -> bool:
    """A step that carries a training metric (not validation metrics only)."""
    return any(not is_validation(k) for k in metrics)
