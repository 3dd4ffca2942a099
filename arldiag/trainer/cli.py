"""`arldiag train`: the reference trainer's command line (options generated from TrainConfig's fields)."""
from __future__ import annotations

import argparse
import json
import sys

from arldiag.trainer.config import PRESETS, add_config_arguments, config_from_args
from arldiag.trainer.envs import ENVS
from arldiag.trainer.numerics import NumericsError, ensure_environment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Train a policy with the reference trainer (SAMPO and its baselines) and log the run "
                          "through arldiag.Collector. Algorithm presets: "
                          + "; ".join(f"{a}: {', '.join(f'{k}={v}' for k, v in p.items())}" for a, p in PRESETS.items()))
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    add_config_arguments(parser)


def main(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)

        if cfg.env not in ENVS:  # before any model is built
            raise ValueError(f"--env {cfg.env!r}: choose from {', '.join(sorted(ENVS))}")
    except ValueError as exc:
        print(f"arldiag train: error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        import dataclasses

        print(json.dumps(dataclasses.asdict(cfg), indent=2))
        return 0
    if cfg.reproducible:  # before torch loads (loop imports it): the settings are read when the libraries load

        try:
            ensure_environment()
        except NumericsError as exc:
            print(f"arldiag train: error: {exc}", file=sys.stderr)
            return 2
    from arldiag.trainer.loop import train

    result = train(cfg)
    hist = result["history"]
    if hist:
        peak = max(h["success_rate"] for h in hist)
        print(f"done: {len(hist)} steps in {result['wall_s']:.0f}s, peak success {peak:.3f}, "
              f"final success {hist[-1]['success_rate']:.3f}, run store {cfg.out}")
    return 0
