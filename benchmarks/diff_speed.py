"""`arldiag diff` of two runs against `detect` of one of them, in one process, as a ratio (target: at most 2x).

    arldiag synth --tokens 100M --out /tmp/big_a --seed 0
    arldiag synth --tokens 100M --out /tmp/big_b --seed 1 --collapse-at 80
    python benchmarks/diff_speed.py --a /tmp/big_a --b /tmp/big_b [--repeat 3]

or, writing both runs itself (``--tokens`` each, into a temporary folder): ``python benchmarks/diff_speed.py
--tokens 10M``. Two measures, each the best of ``--repeat`` tries, alternating diff and detect so that both see the
same page cache and the same load of the machine:

* in this process (imports done once): open_run + diff_runs of both runs against open_run + detect of A;
* the commands in fresh processes (`arldiag diff A B` against `arldiag detect A`, imports included), what a user
  waits for.

diff's token work is one DuckDB query per run over the window before the outcome parts (arldiag/diff/tokens.py).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arldiag
from arldiag.detectors import detect
from arldiag.diff.compare import diff_runs
from arldiag.synth import parse_count, write_synth


def time_detect(run_dir: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = len(detect(arldiag.open_run(run_dir)))
    return time.perf_counter() - t0, n


def time_diff(a: Path, b: Path):
    t0 = time.perf_counter()
    d = diff_runs(arldiag.open_run(a), arldiag.open_run(b))
    return time.perf_counter() - t0, d


def time_cli(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "arldiag.cli", *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", type=Path, help="first run (default: written with --tokens)")
    p.add_argument("--b", type=Path, help="second run, compared with the first")
    p.add_argument("--tokens", default="10M", help="token rows per run when writing them (default 10M)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    tmp = None
    if args.a is None or args.b is None:
        tmp = tempfile.TemporaryDirectory(prefix="diff_speed_")
        n = parse_count(args.tokens)
        args.a, args.b = Path(tmp.name) / "a", Path(tmp.name) / "b"
        t0 = time.perf_counter()
        write_synth(args.a, n, seed=0)
        write_synth(args.b, n, seed=1, collapse_at=80)
        print(f"setup: two runs of {args.tokens} token rows in {time.perf_counter() - t0:.1f} s")
    rows = [arldiag.open_run(r).count("tokens") for r in (args.a, args.b)]
    det, dif, cdet, cdif, d = [], [], [], [], None
    for _ in range(args.repeat):
        det.append(time_detect(args.a)[0])
        dt, d = time_diff(args.a, args.b)
        dif.append(dt)
        cdet.append(time_cli("detect", str(args.a)))
        cdif.append(time_cli("diff", str(args.a), str(args.b)))
    print(f"token rows: A {rows[0]:,d}, B {rows[1]:,d}")
    print(f"partings: {len(d.partings)}; first {d.first.metric if d.first else None} at "
          f"{d.first.step if d.first else None}; outcome {d.outcome} at {d.outcome_step}; token window "
          f"{d.token_window} ({sum((t or {}).get('tokens', 0) for t in (d.tokens or {}).values()):,d} rows read)")
    for what, a, b in (("in this process", det, dif), ("fresh processes (the commands)", cdet, cdif)):
        print(f"{what}: detect (one run) best {min(a):.2f} s of {[round(x, 2) for x in a]}; "
              f"diff (two runs) best {min(b):.2f} s of {[round(x, 2) for x in b]}; ratio {min(b) / min(a):.2f}")
    ratio = min(cdif) / min(cdet)
    print(f"ratio diff / detect, the commands: {ratio:.2f} (target <= 2)")
    if tmp is not None:
        tmp.cleanup()
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
