"""`arldiag ls ROOT... [--json] [--engine local|ray]`: one line per run under roots: algorithm, steps, alert state
now, verdict, collapse and first warning steps, outcome peak and last value (arldiag.fleet, the table the dashboard
opens on). One task per run (arldiag.fleetrun), here or on Ray; a run's cached summary is read without opening it."""
from __future__ import annotations

import argparse
import json
import math

from arldiag.fleet import ERROR, format_table
from arldiag.fleetrun.engine import add_engine_argument, run_all
from arldiag.fleetrun.locate import locate_runs
from arldiag.fleetrun.tasks import ls_error, ls_row


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", nargs="+", help="folder of runs (searched recursively), one run directory, a glob or an "
                                           "s3:// URL (several allowed)")
    p.add_argument("--json", action="store_true", help="print a JSON list with one object per run")
    add_engine_argument(p)


def _clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def fleet_rows(roots, engine: str | None = None, progress: bool = False) -> list[dict]:
    """The rows of every run under ``roots``, sorted by name, on the chosen engine. Raises the first error when no
    run could be opened (a path that holds no run raises FileNotFoundError before any task)."""
    refs = locate_runs(roots)
    rows = run_all(ls_row, refs, engine, on_error=ls_error, progress=progress, desc="ls")
    failed = [r for r in rows if r.pop("_open_failed", False)]
    if failed and len(failed) == len(rows):
        raise ValueError(f"no run could be opened: {failed[0]['name']}: {failed[0]['error']}")
    return sorted(rows, key=lambda r: r["name"])


def main(args: argparse.Namespace) -> int:
    import sys

    # a bad path (or a root whose every run is broken) raises: the dispatcher prints it on one line
    rows = fleet_rows(args.root, args.engine, progress=not args.no_progress and sys.stderr.isatty())
    for r in rows:  # a broken run among readable ones is listed with the verdict "error", and named here
        if r.get("verdict") == ERROR:
            print(f"arldiag ls: warning: {r['name']}: {r.get('error')}", file=sys.stderr)
    if args.json:
        print(json.dumps([{k: _clean(v) for k, v in r.items()} for r in rows], indent=2, default=str))
    else:
        print(format_table(rows))
    return 0
