"""Calibrate the alert state on dev runs, score the held-out runs once, and (with --write) regenerate the detection
figures of the docs: a thin script over arldiag.evaluation.calibrate_token (its module doc describes the fit).

    python benchmarks/calibrate.py /work/suite --write        # fit on dev, score held-out once, write docs + json
    python benchmarks/calibrate.py RUNS... [--stand-in-heldout a,b,c] [--out FILE] [--replay-cache FILE]

`arldiag calibrate --profile token RUNS...` runs the same fit from the command line.
"""
import sys

from arldiag.evaluation.calibrate_token import main

if __name__ == "__main__":
    sys.exit(main())
