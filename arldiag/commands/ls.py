"""`arldiag ls ROOT [--json]`: one line per run under a root: algorithm, steps, alert state now, verdict, collapse
and first warning steps, outcome peak and last value (arldiag.fleet, the table the dashboard opens on)."""
from __future__ import annotations

import argparse
import json
import math


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", help="folder of runs (searched recursively), one run directory, or a glob")
    p.add_argument("--json", action="store_true", help="print a JSON list with one object per run")


def _clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def main(args: argparse.Namespace) -> int:
    import sys

    from arldiag.fleet import ERROR, fleet_table, format_table

    # a bad path (or a root whose every run is broken) raises: the dispatcher prints it on one line
    rows = fleet_table(args.root)
    for r in rows:  # a broken run among readable ones is listed with the verdict "error", and named here
        if r.get("verdict") == ERROR:
            print(f"arldiag ls: warning: {r['name']}: {r.get('error')}", file=sys.stderr)
    if args.json:
        print(json.dumps([{k: _clean(v) for k, v in r.items()} for r in rows], indent=2, default=str))
    else:
        print(format_table(rows))
    return 0
