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


# Names other tools log for arldiag's metrics, read from the glossary's sources (schema.STEP_METRICS[*].source,
# "verl actor/ppo_kl"); conditional sources ("... with low_var_kl") are left out. Plus the two user metrics the
# detectors read by name, and TRL GRPOTrainer's names for the mean reward, the KL to the reference (its `kl` is the
# token-mean k3, exp(x) - x - 1 with x = lp_ref - lp, as kl_ref_k3) and the mean completion length.
EXTRA_NAMES = {"actor/grad_norm": "grad_norm", "actor/lr": "lr", "reward": "reward_mean", "kl": "kl_ref_k3",
               "completions/mean_length": "response_length_mean"}


def known_names() -> dict[str, str]:
    from arldiag.schema import STEP_METRICS

    out = {}
    for m in STEP_METRICS:
        tool, _, name = m.source.partition(" ")
        if tool in ("verl", "TRL") and name and " " not in name:
            out[name] = m.name
    return {**out, **EXTRA_NAMES}


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


def load_steps(path: Path, fmt: str, step_column: str, rename: Mapping[str, str]
               ) -> tuple[dict[int, dict[str, float]], set[str]]:
    """step -> numeric metrics (later rows of the same step update earlier ones), and the columns never numeric."""
    from arldiag.importers import STEP_READERS

    steps: dict[int, dict[str, float]] = {}
    seen, numeric = set(), set()
    for where, row in STEP_READERS[fmt][0](path):
        if step_column not in row:
            raise ValueError(f"step_column: {step_column!r} is not a column of {path} ({where} has "
                             f"{', '.join(list(row)[:8])}...)")
        step = as_number(row[step_column])
        if step is None or not math.isfinite(step) or step != int(step):
            raise ValueError(f"step_column: {where} of {path} has a non-integer step {row[step_column]!r}")
        metrics = steps.setdefault(int(step), {})
        for k, v in row.items():
            if k == step_column or k is None:
                continue
            name = rename.get(k, k)
            seen.add(name)
            x = as_number(v)
            if x is not None:
                numeric.add(name)
                metrics[name] = x
    return steps, seen - numeric


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
    verl/TRL names are renamed to arldiag's (``known_names``) unless ``keep_names``; ``rename`` wins over both."""
    from arldiag.importers import STEP_READERS

    rename = {**({} if keep_names else known_names()), **(rename or {})}
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
    step_column = step_column or STEP_READERS[fmt][1]
    _check_new_run(out)
    steps, never_numeric = load_steps(path, fmt, step_column, rename)
    if not steps:
        raise ValueError(f"file: {file!r} holds no rows")
    if never_numeric:
        print(f"arldiag import: skipped non-numeric column(s): {', '.join(sorted(never_numeric))}", file=sys.stderr)
    config = {"imported_from": str(path), "import_format": fmt, "step_column": step_column}
    with Collector(out, config=config, clip=tuple(clip), name=name, algorithm=algorithm, strict=True) as col:
        for step in sorted(steps):
            col.record_step(step, metrics=steps[step])
    report_missing(set().union(*steps.values()), tables=("tokens", "sequences", "turns", "groups"))
    return len(steps)


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
