"""`arldiag compact RUN...`: merge a finished run's parts into one per table and rank (arldiag.store.compact)."""
from __future__ import annotations

from arldiag.store.compact import compact_run
from arldiag.store.reader import resolve_run_dirs


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directories or roots of runs")
    p.add_argument("--force", action="store_true", help="also compact a run whose run.json is not 'finished'")


def main(args) -> int:
    for d in resolve_run_dirs(args.run):
        res = compact_run(d, force=args.force)
        n0, n1 = sum(r[0] for r in res.values()), sum(r[1] for r in res.values())
        b0, b1 = sum(r[2] for r in res.values()), sum(r[3] for r in res.values())
        print(f"{d}: {n0} -> {n1} parts, {b0 / 2**20:.2f} -> {b1 / 2**20:.2f} MB")
    return 0
