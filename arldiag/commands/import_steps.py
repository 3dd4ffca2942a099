"""`arldiag import FILE --out RUN [--step-column step]`: step-level metrics (CSV or JSONL) -> a run store.

For runs logged elsewhere (verl console/JSONL logs, a wandb CSV export): each row becomes one
``Collector.record_step(step, metrics)`` call, so the run store is written by the public API only and every reader
(detect, report, dashboard) works on it; sections that need token or sequence rows say they have no data.
Nested JSON objects are flattened with "/" (``{"actor": {"entropy": 1}}`` -> ``actor/entropy``). Non-numeric
values (text, empty cells) are skipped; a column that is never numeric is reported once.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from arldiag.nested import flatten


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="CSV (header row) or JSONL (one JSON object per line) of step metrics")
    parser.add_argument("--out", required=True, help="run folder to write (created)")
    parser.add_argument("--step-column", default="step", help="column holding the step number (default: step)")
    parser.add_argument("--format", choices=("csv", "jsonl"), help="input format (default: from the file suffix)")
    parser.add_argument("--name", help="run name (default: the --out folder's name)")
    parser.add_argument("--algorithm", help="algorithm name stored in the manifest (e.g. grpo, cispo)")
    parser.add_argument("--clip", type=float, nargs=2, metavar=("EPS_LOW", "EPS_HIGH"), default=(0.2, 0.2),
                        help="token clip range of the original run, stored in the manifest (default 0.2 0.2)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="rename a column on import (repeatable), e.g. my_entropy=entropy")
    parser.add_argument("--keep-names", action="store_true",
                        help="keep verl/TRL metric names as they are (default: rename them to arldiag's names, "
                             "e.g. actor/entropy -> entropy, as documented in docs/schema.md)")


# Names other tools log for arldiag's metrics, read from the glossary's sources (schema.STEP_METRICS[*].source,
# "verl actor/ppo_kl"); conditional sources ("... with low_var_kl") are left out. Plus the two user metrics the
# detectors read by name.
EXTRA_NAMES = {"actor/grad_norm": "grad_norm", "actor/lr": "lr"}


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


def read_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row dict) for each record of the file."""
    if fmt == "csv":
        with open(path, newline="", encoding="utf-8") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=2):
                yield i, row
    else:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"file: line {i} is not valid JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise ValueError(f"file: line {i} is not a JSON object")
                yield i, flatten(obj, "/")


def load_steps(path: Path, fmt: str, step_column: str, rename: Mapping[str, str]
               ) -> tuple[dict[int, dict[str, float]], set[str]]:
    """step -> numeric metrics (later rows of the same step update earlier ones), and the columns never numeric."""
    steps: dict[int, dict[str, float]] = {}
    seen, numeric = set(), set()
    for line, row in read_rows(path, fmt):
        if step_column not in row:
            raise ValueError(f"step_column: {step_column!r} is not a column of {path} (line {line} has "
                             f"{', '.join(list(row)[:8])}...)")
        step = as_number(row[step_column])
        if step is None or not math.isfinite(step) or step != int(step):
            raise ValueError(f"step_column: line {line} of {path} has a non-integer step {row[step_column]!r}")
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


def import_steps(file: str, out: str, step_column: str = "step", fmt: str | None = None, name: str | None = None,
                 algorithm: str | None = None, clip: tuple[float, float] = (0.2, 0.2),
                 rename: Mapping[str, str] | None = None, keep_names: bool = False) -> int:
    """Write ``file``'s step metrics into a run store at ``out``; returns the number of steps written.
    verl/TRL names are renamed to arldiag's (``known_names``) unless ``keep_names``; ``rename`` wins over both."""
    rename = {**({} if keep_names else known_names()), **(rename or {})}
    from arldiag.collectors.collector import Collector

    path = Path(file)
    if not path.is_file():
        raise ValueError(f"file: {file!r} " + ("is a folder, not a CSV/JSONL file" if path.is_dir() else
                                               "does not exist"))
    fmt = fmt or ("csv" if path.suffix.lower() in (".csv", ".tsv") else "jsonl" if path.suffix.lower() in
                  (".jsonl", ".json", ".ndjson") else None)
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"format: cannot tell the format of {file!r}; pass --format csv|jsonl")
    if (Path(out) / "run.json").exists():
        raise ValueError(f"out: {out!r} already holds a run; importing would append to it, choose a new folder")
    steps, never_numeric = load_steps(path, fmt, step_column, rename)
    if not steps:
        raise ValueError(f"file: {file!r} holds no rows")
    if never_numeric:
        print(f"arldiag import: skipped non-numeric column(s): {', '.join(sorted(never_numeric))}", file=sys.stderr)
    config = {"imported_from": str(path), "import_format": fmt, "step_column": step_column}
    with Collector(out, config=config, clip=tuple(clip), name=name, algorithm=algorithm, strict=True) as col:
        for step in sorted(steps):
            col.record_step(step, metrics=steps[step])
    return len(steps)


def main(args: argparse.Namespace) -> int:
    try:
        n = import_steps(args.file, args.out, args.step_column, args.format, args.name, args.algorithm,
                         tuple(args.clip), parse_renames(args.rename), args.keep_names)
    except (ValueError, FileNotFoundError) as exc:  # bad input: a message, not a traceback
        print(f"arldiag import: error: {exc}", file=sys.stderr)
        return 2
    print(f"imported {n} steps into {args.out}", file=sys.stderr)
    return 0
