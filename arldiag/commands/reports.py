"""`arldiag reports ROOT... --out DIR [--format md|json|html] [--engine local|ray]`: the post-mortem report of every
run under the roots, one file per run in DIR (``<run folder relative to its root, / as __>.<format>``).

One task per run (arldiag.fleetrun.tasks.report_text) builds and renders the report where it runs; this process
writes each file as its task finishes, so a Ray worker needs no access to DIR and the driver holds one report at a
time. A run that cannot be reported is named on stderr and in the index (``--json``); the others are written.
Exit code 1 when any run failed.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from arldiag.fleetrun.engine import add_engine_argument, get_engine
from arldiag.fleetrun.locate import locate_runs
from arldiag.fleetrun.tasks import call, report_error

FORMATS = ("md", "json", "html")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", nargs="+", help="folders of runs, run directories, globs or s3:// URLs")
    p.add_argument("--out", required=True, metavar="DIR", help="folder the reports are written to (created)")
    p.add_argument("--format", choices=FORMATS, default="md", help="report format (default md)")
    p.add_argument("--max-points", type=int, default=1500, help="points per series in the figures (html)")
    p.add_argument("--json", action="store_true", help="print the index (one object per run) as JSON")
    add_engine_argument(p)


def file_name(label: str, fmt: str) -> str:
    """A run's report file: its label with path separators as ``__`` and anything unsafe as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", label.replace("/", "__")).strip(".") + f".{fmt}"


def main(args: argparse.Namespace) -> int:
    if args.max_points < 10:
        raise ValueError(f"--max-points must be >= 10, got {args.max_points}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} exists and is not a folder")
    refs = locate_runs(args.root)
    out.mkdir(parents=True, exist_ok=True)
    index: list[dict | None] = [None] * len(refs)
    eng = get_engine(args.engine, progress=not args.no_progress and sys.stderr.isatty())
    try:
        for i, res in eng.imap(call("report_text", args.format, args.max_points), refs, report_error, "reports"):
            text = res.pop("text")
            res["file"] = None
            if text is not None:
                f = out / file_name(res["run"], args.format)
                f.write_text(text, encoding="utf-8")
                res["file"], res["bytes"] = str(f), len(text.encode("utf-8"))
            else:
                print(f"arldiag reports: warning: {res['run']}: {res['error']}", file=sys.stderr)
            index[i] = res
    finally:
        eng.close()
    rows = sorted((r for r in index if r is not None), key=lambda r: r["run"])
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['run']}: {r['file'] or 'error: ' + r['error']}")
        print(f"{sum(r['file'] is not None for r in rows)} of {len(rows)} reports written to {out}", file=sys.stderr)
    return 1 if any(r["error"] for r in rows) else 0
