"""`arldiag import [FORMAT] PATH --out RUN`: other tools' logs (arldiag/importers.py) -> a run store.

For runs logged elsewhere (verl console/JSONL logs, a wandb CSV export): each row becomes one
``Collector.record_step(step, metrics)`` call, so the run store is written by the public API only and every reader
(detect, report, dashboard) works on it; sections that need token or sequence rows say they have no data.
Nested JSON objects are flattened with "/" (``{"actor": {"entropy": 1}}`` -> ``actor/entropy``). Non-numeric
values (text, empty cells) are skipped; a column that is never numeric is reported once.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Mapping



def add_arguments(parser: argparse.ArgumentParser) -> None:
    from arldiag.importers import FORMATS

    parser.add_argument("source", nargs="+", metavar="[FORMAT] PATH",
                        help=f"FORMAT is one of {', '.join(FORMATS)} (default: csv/jsonl from the file suffix); "
                             "PATH a file, or a folder for tensorboard and trl-completions")
    parser.add_argument("--out", required=True, help="run folder to write (created)")
    parser.add_argument("--step-column", default=None,
                        help="column holding the step number (default: step; _step for wandb)")
    parser.add_argument("--format", choices=FORMATS, help="input format (same as the FORMAT argument)")
    parser.add_argument("--name", help="run name (default: the --out folder's name)")
    parser.add_argument("--algorithm", help="algorithm name stored in the manifest (e.g. grpo, cispo)")
    parser.add_argument("--clip", type=float, nargs=2, metavar=("EPS_LOW", "EPS_HIGH"), default=(0.2, 0.2),
                        help="token clip range of the original run, stored in the manifest (default 0.2 0.2)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="rename a column on import (repeatable), e.g. my_entropy=entropy")
    parser.add_argument("--keep-names", action="store_true",
                        help="keep verl/TRL metric names as they are (default: rename them to arldiag's names, "
                             "e.g. actor/entropy -> entropy, as documented in docs/schema.md)")
    parser.add_argument("--reward-column", action="append", default=[], metavar="NAME",
                        help="trl-completions: reward column(s) to sum (default: every numeric column but "
                             "step and advantage)")


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


def load_steps(path: Path, fmt: str, step_column: str) -> tuple[dict[int, dict[str, float]], set[str]]:
    """step -> numeric metrics under their logged names (later rows of the same step update earlier ones: a
    validation row and a training row of one step become one step), and the columns never numeric."""
    from arldiag.importers import STEP_READERS

    steps: dict[int, dict[str, float]] = {}
    seen, numeric = set(), set()
    stepless = 0
    for where, row in STEP_READERS[fmt][0](path):
        if step_column not in row:
            raise ValueError(f"step_column: {step_column!r} is not a column of {path} ({where} has "
                             f"{', '.join(list(row)[:8])}...)")
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
    if stepless:
        print(f"arldiag import: skipped {stepless} row(s) without a {step_column!r} value", file=sys.stderr)
    return steps, seen - numeric


# step columns other loggers write, tried in this order when the format's default is not a column of the file
# (read in the trainers' sources: HF Trainer / TRL / OpenRLHF, verl, SkyRL, slime, ROLL, ms-swift's "12/500")
STEP_COLUMNS = ("step", "global_step", "train/global_step", "training/global_step", "trainer/global_step",
                "train/step", "system/global_step", "global_step/max_steps", "_step", "iteration", "iter", "Step")


def find_step_column(path: Path, fmt: str, default: str) -> str:
    """``default`` when the first row has it, else the first of ``STEP_COLUMNS`` it has (said on stderr); the
    default otherwise, so that load_steps names the missing column."""
    from arldiag.importers import STEP_READERS

    first = next(iter(STEP_READERS[fmt][0](path)), None)
    # wandb's _step counts log calls, not optimizer steps: a logged optimizer step (HF's train/global_step) wins
    if first is None or (default in first[1] and default != "_step"):
        return default
    hit = next((c for c in STEP_COLUMNS if c in first[1]), None)
    if hit is None or hit == default:
        return default
    why = ("it counts optimizer steps, wandb's _step counts log calls" if default in first[1]
           else f"no {default!r} column")
    print(f"arldiag import: step column = {hit} ({why}; --step-column chooses another)", file=sys.stderr)
    return hit


def name_plan(columns, user: Mapping[str, str], keep_names: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(rename, copies) for a log's columns. rename: logged name -> arldiag name (``--rename`` first, then the
    alias table; a column already named as arldiag names it keeps its name, and of two logged names for one
    metric the first in the file wins, the other keeps its own name). copies: ``task_score`` / ``val_score`` ->
    the logged column they are read from (arldiag.aliases.task_score_source)."""
    from arldiag.aliases import TASK_SCORE, VAL_SCORE, alias_table, resolve_name, task_score_source, val_score_source

    from arldiag.settings import file_aliases

    cols = list(dict.fromkeys(columns))
    table = {} if keep_names else alias_table(file_aliases())  # arldiag.toml [aliases] extends the table
    taken = {c for c in cols if c not in user and (keep_names or resolve_name(c, table) in (None, c))}
    rename: dict[str, str] = {}
    for c in cols:
        to = user.get(c) or (None if keep_names else resolve_name(c, table))
        if to is None or to == c:
            continue
        if to in taken and c not in user:
            continue
        rename[c] = to
        taken.add(to)
    copies = {}
    for to, src in ((TASK_SCORE, task_score_source(cols)), (VAL_SCORE, val_score_source(cols))):
        if src is not None and src != to and to not in taken:
            copies[to] = src
    return rename, copies


def parse_renames(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        old, sep, new = it.partition("=")
        if not sep or not old or not new:
            raise ValueError(f"rename: expected OLD=NEW, got {it!r}")
        out[old] = new
    return out


def guess_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".jsonl", ".ndjson") or (suffix == ".json" and path.name != "trainer_state.json"):
        return "jsonl"
    if path.name == "trainer_state.json":
        return "trl-state"
    if "tfevents" in path.name:
        return "tensorboard"
    raise ValueError(f"format: cannot tell the format of {str(path)!r}; give it: arldiag import FORMAT PATH")


def import_steps(file: str, out: str, step_column: str | None = None, fmt: str | None = None,
                 name: str | None = None, algorithm: str | None = None, clip: tuple[float, float] = (0.2, 0.2),
                 rename: Mapping[str, str] | None = None, keep_names: bool = False) -> int:
    """Write ``file``'s step metrics into a run store at ``out``; returns the number of steps written.
    Logged names are renamed to arldiag's (``name_plan``: the alias table) unless ``keep_names``; ``rename`` wins
    over both."""
    from arldiag.importers import STEP_READERS

    from arldiag.collectors.collector import Collector

    path = Path(file)
    if not path.exists():
        raise ValueError(f"file: {file!r} does not exist")
    if path.is_dir() and fmt in (None, "tensorboard") and not any(path.rglob("events.out.tfevents*")):
        raise ValueError(f"file: {file!r} is a folder without TensorBoard event files; give a log file or an "
                         "event-file folder")
    fmt = fmt or guess_format(path)
    if fmt not in STEP_READERS:
        raise ValueError(f"format: {fmt!r} is not a step-metrics format; choose from {', '.join(STEP_READERS)}")
    if path.is_dir() and fmt != "tensorboard":
        raise ValueError(f"file: {file!r} is a folder; format {fmt} reads a file")
    given = step_column is not None
    step_column = step_column or STEP_READERS[fmt][1]
    _check_new_run(out)
    if not given:
        step_column = find_step_column(path, fmt, step_column)
    raw, never_numeric = load_steps(path, fmt, step_column)
    if not raw:
        raise ValueError(f"file: {file!r} holds no rows")
    columns = [c for m in raw.values() for c in m]
    plan, copies = name_plan(columns, dict(rename or {}), keep_names)
    steps = {}
    for st, m in raw.items():
        row = {plan.get(k, k): v for k, v in m.items()}
        for to, src in copies.items():
            if src in m:
                row[to] = m[src]
        steps[st] = row
    if never_numeric:
        print(f"arldiag import: skipped non-numeric column(s): {', '.join(sorted(never_numeric))}", file=sys.stderr)
    from arldiag.detectors.batch import log_interval

    interval = log_interval(sorted(s for s, m in steps.items() if _training(m)))
    config = {"imported_from": str(path), "import_format": fmt, "step_column": step_column,
              "log_interval_steps": interval, "renamed": plan, "task_score_from": copies.get("task_score"),
              "val_score_from": copies.get("val_score")}
    with Collector(out, config=config, clip=tuple(clip), name=name, algorithm=algorithm, strict=True) as col:
        for step in sorted(steps):
            col.record_step(step, metrics=steps[step])
    report_mapping(list(dict.fromkeys(columns)), plan, copies, steps, interval)
    report_missing(set().union(*steps.values()), tables=("tokens", "sequences", "turns", "groups"))
    return len(steps)


def _training(metrics: Mapping[str, float]) -> bool:
    from arldiag.aliases import is_validation

    return any(not is_validation(k) for k in metrics)


def report_mapping(columns: list[str], plan: Mapping[str, str], copies: Mapping[str, str],
                   steps: Mapping[int, Mapping[str, float]], interval: int) -> None:
    """Print what was mapped, the task score and its scale, what was not recognised and which detectors run."""
    from arldiag.aliases import TASK_SCORE, is_validation, score_bounds
    from arldiag.detectors.registry import REGISTRY
    from arldiag.schema import STEP_METRIC_NAMES

    out = sys.stderr
    n_val = sum(1 for m in steps.values() if not _training(m))
    print(f"arldiag import: {len(steps)} logged points, one every {interval} optimizer step(s)"
          + (f"; {n_val} carry validation metrics only" if n_val else ""), file=out)
    if plan:
        print("arldiag import: mapped " + ", ".join(f"{a} -> {b}" for a, b in plan.items()), file=out)
    src = copies.get(TASK_SCORE)
    if src is not None or any(TASK_SCORE in m for m in steps.values()):
        vals = [m[TASK_SCORE] for m in steps.values() if TASK_SCORE in m]
        b = score_bounds(vals)
        scale = f"on [{b[0]:g}, {b[1]:g}]" if b else "on its own scale (no fixed bounds)"
        print(f"arldiag import: task score = {src or TASK_SCORE} ({len(vals)} points, {scale})", file=out)
    else:
        print("arldiag import: no task score recognised (no success rate, accuracy, score or reward column): the "
              "score_collapse detector and the collapse label cannot run; name it with --rename COLUMN=task_score",
              file=out)
    if copies.get("val_score"):
        print(f"arldiag import: validation score = {copies['val_score']}", file=out)
    known = set(STEP_METRIC_NAMES) | {TASK_SCORE, "val_score", "grad_norm", "lr", "loss", "pg_loss"}
    unknown = [c for c in columns if plan.get(c, c) not in known and not is_validation(c)
               and c not in copies.values()]
    if unknown:
        shown = ", ".join(unknown[:12]) + (f", ... ({len(unknown) - 12} more)" if len(unknown) > 12 else "")
        print(f"arldiag import: kept under their own names (not read by any detector): {shown}", file=out)
    have = set().union(*steps.values())
    can = [n for n, d in REGISTRY.items() if any(c in have for c in d.inputs)]
    print(f"arldiag import: detectors that can run: {', '.join(can) or 'none'}", file=out)
    if not can:
        print("arldiag import: warning: no detector can read this log; map its columns with --rename OLD=NEW "
              "(docs/integrations/importers.md lists the names arldiag reads)", file=out)


def _check_new_run(out: str) -> None:
    if (Path(out) / "run.json").exists():
        raise ValueError(f"out: {out!r} already holds a run; importing would append to it, choose a new folder")


def report_missing(metrics: set[str], tables: tuple[str, ...]) -> None:
    """Say what the imported run lacks: the tables no importer can fill, and arldiag's step metrics it has."""
    from arldiag.schema import STEP_METRIC_NAMES

    have = sorted(m for m in STEP_METRIC_NAMES if m in metrics)
    print(f"arldiag import: missing tables {', '.join(tables)} (token/sequence detectors and the offender list "
          f"will report no data); arldiag step metrics present: {', '.join(have) or 'none'}", file=sys.stderr)


def import_trl_completions(path: str, out: str, name: str | None = None, algorithm: str | None = None,
                           reward_columns: list[str] | None = None) -> int:
    """TRL's completions Parquet files -> rollout rows (groups by prompt within a step, rewards, texts)."""
    import numpy as np

    from arldiag.collectors.collector import Collector
    from arldiag.collectors.verl import stable_ids
    from arldiag.importers import read_trl_completions

    p = Path(path)
    if not p.exists():
        raise ValueError(f"file: {path!r} does not exist")
    _check_new_run(out)
    steps = read_trl_completions(p)
    if not steps:
        raise ValueError(f"file: {path!r} holds no completions")
    first = next(iter(steps.values()))[0]
    cols = reward_columns or [k for k, v in first.items() if k not in ("step", "advantage")
                              and isinstance(v, (int, float)) and not isinstance(v, bool)]
    bad = [c for c in cols if c not in first]
    if bad:
        raise ValueError(f"reward_column: {bad} not in the completions columns {sorted(first)}")
    print(f"arldiag import: reward = sum of {', '.join(cols) or '(no numeric column)'}", file=sys.stderr)
    config = {"imported_from": str(p), "import_format": "trl-completions", "reward_columns": cols}
    with Collector(out, config=config, name=name, algorithm=algorithm, strict=True) as col:
        for step in sorted(steps):
            rows = steps[step]
            rewards = np.array([sum(np.nan if r[c] is None else float(r[c]) for c in cols) for r in rows]) \
                if cols else None
            # TRL repeats each prompt num_generations times in a batch: same prompt text = same group (a prompt
            # drawn twice into one batch becomes one group: the file does not say which copy a completion answers)
            groups = stable_ids([f"{step}\x00{r['prompt']}" for r in rows])
            col.record_rollout(step, sample_ids=(np.int64(step) << np.int64(32)) + np.arange(len(rows)),
                               group_ids=groups, rewards=rewards, texts=[str(r["completion"]) for r in rows])
            col.record_step(step)
    report_missing({"reward_mean", "n_groups", "zero_std_group_frac"} if cols else set(),
                   tables=("tokens", "sequences", "turns"))
    return len(steps)


def parse_source(source: list[str], fmt: str | None) -> tuple[str | None, str]:
    from arldiag.importers import FORMATS

    if len(source) == 2:
        if source[0] not in FORMATS:
            raise ValueError(f"format: {source[0]!r} is not a format; choose from {', '.join(FORMATS)}")
        if fmt and fmt != source[0]:
            raise ValueError(f"format: given twice ({source[0]} and --format {fmt})")
        return source[0], source[1]
    if len(source) == 1:
        return fmt, source[0]
    raise ValueError("source: expected [FORMAT] PATH")


def main(args: argparse.Namespace) -> int:
    try:
        fmt, path = parse_source(args.source, args.format)
        if fmt == "trl-completions":
            n = import_trl_completions(path, args.out, args.name, args.algorithm, args.reward_column or None)
        else:
            n = import_steps(path, args.out, args.step_column, fmt, args.name, args.algorithm,
                             tuple(args.clip), parse_renames(args.rename), args.keep_names)
    except (ValueError, FileNotFoundError) as exc:  # bad input: a message, not a traceback
        print(f"arldiag import: error: {exc}", file=sys.stderr)
        return 2
    print(f"imported {n} steps into {args.out}", file=sys.stderr)
    return 0
