"""rlwatch 0.5.1's default configuration beside arldiag on the same runs: a thin script over
arldiag.evaluation.peer_rlwatch (its module doc gives the mapping).

    python benchmarks/peer_rlwatch.py sample_runs [--split dev|heldout] [--hold 10] [--json]
"""
import sys

from arldiag.evaluation.peer_rlwatch import MAPPING, _value, compare, main, rlwatch_timeline, table  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
