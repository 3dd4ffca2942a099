"""`arldiag import [FORMAT] PATH --out RUN`: other tools' logs (the arldiag/importers package) -> a run store.

This module is the command line: arguments, messages, and the Collector calls; the formats and the step table are
arldiag/importers/.

For runs logged elsewhere (verl console/JSONL logs, a wandb CSV export): each row becomes one
``Collector.record_step(step, metrics)`` call, so the run store is written by the public API only and every reader
(detect, report, dashboard) works on it; sections that need token or sequence rows say they have no data.
Nested JSON objects are flattened with "/" (``{"actor": {"entropy": 1}}`` -> ``actor/entropy``). Non-numeric
values (text, empty cells) are skipped; a column that is never numeric is reported once.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

from arldiag.aliases import TASK_SCORE, is_validation, score_bounds
from arldiag.collectors.collector import Collector
from arldiag.collectors.verl import stable_ids
from arldiag.detectors.batch import log_interval
from arldiag.detectors.registry import REGISTRY
from arldiag.importers import FORMATS, IMPORTERS, STEP_FORMATS, guess_format
from arldiag.importers.steps import (STEP_COLUMNS, NamePlan, apply_plan, column_values, find_step_column, is_training,
                                     load_steps, plan_names)
from arldiag.names import HOW_TABLE, HOW_TOML, HOW_WORDS
from arldiag.importers.tensorboard import has_event_files
from arldiag.schema import STEP_METRIC_NAMES
from arldiag.wording import plural

DEFAULT_CLIP = (0.2, 0.2)  # the token clip range stored when --clip is not given (GRPO's usual eps)
DEFAULTS_KEY = "not_recorded"  # run.json config: the manifest settings that are defaults, not the log's


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="+", metavar="[FORMAT] PATH",
                        help=f"FORMAT is one of {', '.join(FORMATS)} (default: csv/jsonl from the file suffix); "
                             "PATH a file, or a folder for tensorboard and trl-completions")
    parser.add_argument("--out", required=True, help="run folder to write (created)")
    parser.add_argument("--step-column", default=None,
                        help="column holding the step number (default: step; _step for wandb)")
    parser.add_argument("--format", choices=FORMATS, help="input format (same as the FORMAT argument)")
    parser.add_argument("--name", help="run name (default: the --out folder's name)")
    parser.add_argument("--algorithm", help="algorithm name stored in the manifest (e.g. grpo, cispo)")
    parser.add_argument("--clip", type=float, nargs=2, metavar=("EPS_LOW", "EPS_HIGH"), default=None,
                        help="token clip range of the original run, stored in the manifest (default 0.2 0.2)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="rename a column on import (repeatable), e.g. my_entropy=entropy")
    parser.add_argument("--keep-names", action="store_true",
                        help="keep verl/TRL metric names as they are (default: rename them to arldiag's names, "
                             "e.g. actor/entropy -> entropy, as documented in docs/schema.md)")
    parser.add_argument("--reward-column", action="append", default=[], metavar="NAME",
                        help="trl-completions: reward column(s) to sum (default: every numeric column but "
                             "step and advantage)")


def parse_renames(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        old, sep, new = it.partition("=")
        if not sep or not old or not new:
            raise ValueError(f"rename: expected OLD=NEW, got {it!r}")
        out[old] = new
    return out


def import_steps(file: str, out: str, step_column: str | None = None, fmt: str | None = None,
                 name: str | None = None, algorithm: str | None = None, clip: tuple[float, float] | None = None,
                 rename: Mapping[str, str] | None = None, keep_names: bool = False) -> int:
    """Write ``file``'s step metrics into a run store at ``out``; returns the number of steps written.
    Logged names are renamed to arldiag's (``name_plan``: the alias table) unless ``keep_names``; ``rename`` wins
    over both."""
    path = Path(file)
    if not path.exists():
        raise ValueError(f"file: {file!r} does not exist")
    if path.is_dir() and fmt in (None, "tensorboard") and not has_event_files(path):
        raise ValueError(f"file: {file!r} is a folder without TensorBoard event files; give a log file or an "
                         "event-file folder")
    fmt = fmt or guess_format(path)
    if fmt not in STEP_FORMATS:
        raise ValueError(f"format: {fmt!r} is not a step-metrics format; choose from {', '.join(STEP_FORMATS)}")
    importer = IMPORTERS[fmt]
    if path.is_dir() and not importer.reads_folder:
        raise ValueError(f"file: {file!r} is a folder; format {fmt} reads a file")
    given = step_column is not None
    step_column = step_column or importer.step_column
    _check_new_run(out)
    if not given:
        step_column, why = find_step_column(path, importer, step_column)
        if why:
            print(f"arldiag import: step column = {step_column} ({why}; --step-column chooses another)",
                  file=sys.stderr)
        first = next(iter(importer.read(path)), None)
        if first is not None and step_column not in first[1]:
            print(f"arldiag import: warning: {path.name} has no step column ({step_column!r} nor any of "
                  f"{', '.join(STEP_COLUMNS[1:4])}, ...): the row index is the step; --step-column NAME picks the "
                  "column that holds it", file=sys.stderr)
            step_column = None
    loaded = load_steps(path, importer, step_column)
    if loaded.stepless:
        print(f"arldiag import: skipped {loaded.stepless} row(s) without a {step_column!r} value", file=sys.stderr)
    raw = loaded.steps
    if not raw:
        raise ValueError(f"file: {file!r} holds no rows")
    columns = [c for m in raw.values() for c in m]
    names = plan_names(columns, dict(rename or {}), keep_names, column_values(raw))
    plan, copies = names.rename, names.copies
    steps = apply_plan(raw, plan, copies)
    if loaded.never_numeric:
        print(f"arldiag import: skipped non-numeric column(s): {', '.join(sorted(loaded.never_numeric))}",
              file=sys.stderr)

    interval = log_interval(sorted(s for s, m in steps.items() if is_training(m)))
    config = {"imported_from": str(path), "import_format": fmt,
              "step_column": step_column if step_column is not None else "(row index)",
              "log_interval_steps": interval, "renamed": plan, "task_score_from": copies.get("task_score"),
              "val_score_from": copies.get("val_score"),
              # run.json settings a log does not carry: the Collector's defaults, which the report must not show as
              # the run's own (report.dimensions "default X, not recorded")
              DEFAULTS_KEY: [k for k in ("clip", "seq_clip", "dual_clip_c", "neg_adv_delta")
                             if k != "clip" or clip is None]}
    with Collector(out, config=config, clip=tuple(clip or DEFAULT_CLIP), name=name, algorithm=algorithm, strict=True) as col:
        for step in sorted(steps):
            col.record_step(step, metrics=steps[step])
    report_mapping(list(dict.fromkeys(columns)), plan, copies, steps, interval, names)
    report_missing(set().union(*steps.values()), tables=("tokens", "sequences", "turns", "groups"))
    return len(steps)


# the printout's groups of placed names, one line each, in this order (names.HOW_*; --rename from the command line)
PLACED_LINES = (("--rename", "renamed (--rename)"), (HOW_TOML, "from arldiag.toml [aliases]"),
                (HOW_TABLE, "exact table"), (HOW_WORDS, "by words"))


def mapping_lines(columns: list[str], names: NamePlan) -> list[str]:
    """The import's account of each column's name, one line per group: placed by --rename, by arldiag.toml, by the
    exact table, by words (with what it was read as); ambiguous (left unplaced, with the candidates); read but not
    placed (an arldiag column another name already fills, an aggregate arldiag does not keep, an ignore in
    arldiag.toml). Columns not understood at all are listed by ``report_mapping`` with the unread ones."""
    lines = []
    placed = [c for c in columns if c in names.rename]
    for how, title in PLACED_LINES:
        group = [c for c in placed if names.readings[c].how == how]
        if group:
            shown = [f"{c} -> {names.rename[c]}" + (f" ({names.readings[c].read_as})" if how == HOW_WORDS else "")
                     for c in group]
            lines.append(f"mapped {title}: " + ", ".join(shown))
    ambiguous = [c for c in columns if c not in names.rename and c in names.readings and names.readings[c].ambiguous]
    if ambiguous:
        lines.append("ambiguous, left unplaced (name them in arldiag.toml [aliases]): "
                     + ", ".join(f"{c} ({names.readings[c].why.removeprefix('ambiguous: ')})" for c in ambiguous))
    explained = unplaced_reasons(columns, names)
    if explained:
        lines.append("read but not placed: " + "; ".join(f"{', '.join(cs)} ({why})" for why, cs in explained.items()))
    return lines


def unplaced_reasons(columns: list[str], names: NamePlan) -> dict[str, list[str]]:
    """Columns a rule understood but did not place, grouped by their reason (one printout entry per reason):
    an arldiag column another name already fills, an aggregate arldiag does not keep, an ignore in arldiag.toml."""
    out: dict[str, list[str]] = {}
    for c in columns:
        r = names.readings.get(c)
        if r is None or c in names.rename or r.ambiguous:
            continue
        if c in names.clashes:
            why = f"{names.clashes[c]}: already read from another column"
        elif r.why and (r.how or _readable(r)):
            why = r.why
        else:
            continue
        out.setdefault(why, []).append(c)
    return out


def _readable(r) -> bool:
    """An unplaced reading worth a word in the printout: one a rule understood (not a time, count or unknown
    name, which the "kept under their own names" line lists)."""
    return r.why not in ("not a detector input", "no quantity arldiag keeps") and not r.why.startswith(
        ("words not understood", "validation metrics", "the task score"))


def report_mapping(columns: list[str], plan: Mapping[str, str], copies: Mapping[str, str],
                   steps: Mapping[int, Mapping[str, float]], interval: int, names: NamePlan | None = None) -> None:
    """Print what was mapped and how, the task score and its scale, what was not recognised and which detectors
    run."""
    out = sys.stderr
    n_val = sum(1 for m in steps.values() if not is_training(m))
    print(f"arldiag import: {len(steps)} logged points, one every {interval} optimizer step(s)"
          + (f"; {n_val} carry validation metrics only" if n_val else ""), file=out)
    if names is not None:
        for line in mapping_lines(columns, names):
            print(f"arldiag import: {line}", file=out)
    elif plan:
        print("arldiag import: mapped " + ", ".join(f"{a} -> {b}" for a, b in plan.items()), file=out)
    src = copies.get(TASK_SCORE)
    if src is not None or any(TASK_SCORE in m for m in steps.values()):
        vals = [m[TASK_SCORE] for m in steps.values() if TASK_SCORE in m]
        b = score_bounds(vals)
        scale = f"on [{b[0]:g}, {b[1]:g}]" if b else "on its own scale (no fixed bounds)"
        print(f"arldiag import: task score = {src or TASK_SCORE} ({coverage(len(vals), len(steps))}; {scale})",
              file=out)
    else:
        print("arldiag import: no task score recognised (no success rate, accuracy, score or reward column): the "
              "score_collapse detector and the collapse label cannot run; name it with --rename COLUMN=task_score",
              file=out)
    if copies.get("val_score"):
        n = sum(1 for m in steps.values() if "val_score" in m)
        print(f"arldiag import: validation score = {copies['val_score']} ({coverage(n, len(steps))})", file=out)
    known = set(STEP_METRIC_NAMES) | {TASK_SCORE, "val_score", "grad_norm", "lr", "loss", "pg_loss"}
    said = {c for cs in (unplaced_reasons(columns, names).values() if names else ()) for c in cs}
    said |= {c for c, r in (names.readings.items() if names else ()) if r.ambiguous}
    unknown = [c for c in columns if plan.get(c, c) not in known and not is_validation(c)
               and c not in copies.values() and c not in said]
    if unknown:
        shown = ", ".join(unknown[:12]) + (f", ... ({len(unknown) - 12} more)" if len(unknown) > 12 else "")
        print(f"arldiag import: kept under their own names (not read by any detector): {shown}", file=out)
    have = set().union(*steps.values())
    can = [n for n, d in REGISTRY.items() if any(c in have for c in d.inputs)]
    print(f"arldiag import: detectors that can run: {', '.join(can) or 'none'}", file=out)
    if not can:
        print("arldiag import: warning: no detector can read this log; map its columns with --rename OLD=NEW "
              "(docs/integrations/importers.md lists the names arldiag reads)", file=out)


def coverage(have: int, rows: int) -> str:
    """'215 of 237 rows; 22 without it stay empty': the score is read from one column, never filled in."""
    missing = rows - have
    return f"{have} of {rows} rows" + (f"; {missing} without it stay empty" if missing else "")


def _check_new_run(out: str) -> None:
    if (Path(out) / "run.json").exists():
        raise ValueError(f"out: {out!r} already holds a run; importing would append to it, choose a new folder")


def report_missing(metrics: set[str], tables: tuple[str, ...]) -> None:
    """Say what the imported run lacks: the tables no importer can fill, and arldiag's step metrics it has."""
    have = sorted(m for m in STEP_METRIC_NAMES if m in metrics)
    print(f"arldiag import: missing tables {', '.join(tables)} (token/sequence detectors and the offender list "
          f"will report no data); arldiag step metrics present: {', '.join(have) or 'none'}", file=sys.stderr)


def import_rollouts(path: str, out: str, name: str | None = None, algorithm: str | None = None,
                    reward_columns: list[str] | None = None, fmt: str = "trl-completions") -> int:
    """A rollout importer's rows (TRL's completions Parquet files) -> rollout rows (groups by prompt within a step,
    rewards, texts)."""
    import numpy as np

    p = Path(path)
    if not p.exists():
        raise ValueError(f"file: {path!r} does not exist")
    _check_new_run(out)
    steps = IMPORTERS[fmt].read(p)
    if not steps:
        raise ValueError(f"file: {path!r} holds no completions")
    first = next(iter(steps.values()))[0]
    cols = reward_columns or [k for k, v in first.items() if k not in ("step", "advantage")
                              and isinstance(v, (int, float)) and not isinstance(v, bool)]
    bad = [c for c in cols if c not in first]
    if bad:
        raise ValueError(f"reward_column: {bad} not in the completions columns {sorted(first)}")
    print(f"arldiag import: reward = sum of {', '.join(cols) or '(no numeric column)'}", file=sys.stderr)
    config = {"imported_from": str(p), "import_format": fmt, "reward_columns": cols}
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


import_trl_completions = import_rollouts  # the name before other rollout formats could exist


def parse_source(source: list[str], fmt: str | None) -> tuple[str | None, str]:
    if len(source) == 2:
        if source[0] not in FORMATS:
            raise ValueError(f"format: {source[0]!r} is not a format; choose from {', '.join(FORMATS)}")
        if fmt and fmt != source[0]:
            raise ValueError(f"format: given twice ({source[0]} and --format {fmt})")
        return source[0], source[1]
    if len(source) == 1:
        return fmt, source[0]
    raise ValueError("source: expected [FORMAT] PATH")


def _kind(fmt: str) -> str:
    return IMPORTERS[fmt].kind


def main(args: argparse.Namespace) -> int:
    try:
        fmt, path = parse_source(args.source, args.format)
        if fmt is not None and _kind(fmt) == "rollout":
            n = import_rollouts(path, args.out, args.name, args.algorithm, args.reward_column or None, fmt)
        else:
            n = import_steps(path, args.out, args.step_column, fmt, args.name, args.algorithm,
                             args.clip and tuple(args.clip), parse_renames(args.rename), args.keep_names)
    except (ValueError, FileNotFoundError) as exc:  # bad input: a message, not a traceback
        print(f"arldiag import: error: {exc}", file=sys.stderr)
        return 2
    print(f"imported {plural(n, 'step')} into {args.out}", file=sys.stderr)
    return 0
