"""`arldiag synth --tokens 100M --out runs/big [--collapse-at STEP] [--ranks N]`: a synthetic run of the given size
(arldiag/synth.py), written through the normal Collector, for scale tests and demos."""
from __future__ import annotations

import argparse
import time

from arldiag.synth import parse_count, write_synth


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", required=True, help="token rows to write, e.g. 100M, 250k")
    parser.add_argument("--out", required=True, help="run folder (created; an existing run is appended to)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--collapse-at", type=int, help="inject a collapse at this step (default: a healthy run)")
    parser.add_argument("--ranks", type=int, default=1, help="data-parallel ranks, each its own files (default 1)")
    parser.add_argument("--max-len", type=int, default=256, help="response length budget (default 256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--token-sample-rate", type=float, default=1.0,
                        help="fraction of samples whose token rows are stored (default 1.0: all)")


def main(args: argparse.Namespace) -> int:
    tokens = parse_count(args.tokens)
    t0 = time.perf_counter()
    res = write_synth(args.out, tokens, steps=args.steps, collapse_at=args.collapse_at, ranks=args.ranks,
                      max_len=args.max_len, seed=args.seed, token_sample_rate=args.token_sample_rate)
    dt = time.perf_counter() - t0
    print(f"wrote {args.out}: {res['tokens']:,d} tokens, {res['steps']} steps x {res['ranks']} rank(s) x 8 updates of "
          f"{res['samples_per_update']} samples, in {dt:.1f} s ({res['tokens'] / dt / 1e6:.2f} M tokens/s)")
    return 0
