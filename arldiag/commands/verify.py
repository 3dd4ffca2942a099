"""`arldiag verify RUN...`: list damaged or orphaned parts and leftover temporary files (arldiag.store.verify).

Exit code 1 when anything was found, so a script can check a copied or archived run before trusting it."""
from __future__ import annotations

from arldiag.store.reader import read_manifest, resolve_run_dirs
from arldiag.store.verify import verify_run


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directories or roots of runs")


def main(args) -> int:
    bad = 0
    for d in resolve_run_dirs(args.run):
        read_manifest(d)  # a broken run.json is an error of its own (exit 2, naming the file)
        problems = verify_run(d)
        bad += len(problems)
        print(f"{d}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for pr in problems:
            print("  " + pr.line())
    return 1 if bad else 0
