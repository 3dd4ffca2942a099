"""How many collapses can one step metric warn >= 10 steps ahead of without false alarms? A thin script over
arldiag.evaluation.ceiling (its module doc describes the ceiling).

    python benchmarks/ceiling.py RUNS... [--split dev] [--allow 0,5] [--top 8] [--json]
"""
import sys

from arldiag.evaluation.ceiling import main

if __name__ == "__main__":
    sys.exit(main())
