"""The parting rule of `arldiag diff` on simulated pairs (docs/detectors.md "Where two runs part"): false partings
between two seeds of one stationary process, and how often and how late a planted shift is found.

    python benchmarks/diff_rule.py [--pairs 1000] [--seed 0]

Stationary processes: normal noise; a score of 8 samples (steps of 1/8); |t_3| (a gradient norm: heavy tails);
lognormal sd 1 (a KL: skewed); rare events (15 % of points non-zero); AR(1) with phi 0.3, 0.5 and 0.8 (smooth
noise, which the point-to-point noise estimate underrates: reported, not tuned for). Planted: normal noise, a shift
of k noise sd in one run from the middle on; lag = parting step - planted step, in points.
"""
from __future__ import annotations

import argparse

import numpy as np

from arldiag.diff.parting import PartingRule, first_parting


def _ar(rng, phi: float, n: int) -> np.ndarray:
    e = rng.normal(0.0, 1.0, n)
    x = np.empty(n)
    x[0] = e[0] / np.sqrt(1 - phi * phi)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


PROCESSES = {
    "normal": lambda rng, n: rng.normal(0.5, 0.1, n),
    "score of 8 samples": lambda rng, n: rng.binomial(8, 0.5, n) / 8,
    "|t3| (heavy tails)": lambda rng, n: np.abs(rng.standard_t(3, n)),
    "lognormal (skewed)": lambda rng, n: np.exp(rng.normal(-3.0, 1.0, n)),
    "rare events": lambda rng, n: rng.binomial(1, 0.15, n) * rng.exponential(1.0, n),
    "AR(1) phi 0.3": lambda rng, n: _ar(rng, 0.3, n),
    "AR(1) phi 0.5": lambda rng, n: _ar(rng, 0.5, n),
    "AR(1) phi 0.8": lambda rng, n: _ar(rng, 0.8, n),
}


def false_partings(pairs: int, seed: int, rule: PartingRule) -> None:
    rng = np.random.default_rng(seed)
    print(f"false partings over {pairs} stationary pairs (per length):")
    for name, gen in PROCESSES.items():
        row = []
        for n in (40, 200, 1000):
            k = pairs if n < 1000 else max(1, pairs // 4)
            f = sum(first_parting(np.arange(n), gen(rng, n), gen(rng, n), rule) is not None for _ in range(k))
            row.append(f"n={n}: {f}/{k}")
        print(f"  {name:<20} " + ", ".join(row))


def planted(pairs: int, seed: int, rule: PartingRule) -> None:
    rng = np.random.default_rng(seed + 1)
    print(f"planted shift in one run at the middle ({pairs} pairs each; lag in points; window = {rule.window}):")
    for n in (40, 200):
        for shift in (4.0, 6.0, 8.0, 10.0):
            lags = []
            for _ in range(pairs):
                a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
                b[n // 2:] += shift
                p = first_parting(np.arange(n), a, b, rule)
                if p is not None:
                    lags.append(p.step - n // 2)
            lags = np.array(lags)
            within = np.mean((lags >= 0) & (lags < rule.window)) * len(lags) / pairs if len(lags) else 0.0
            print(f"  n={n:<4} shift {shift:>4.0f} sd: found {len(lags) / pairs:.1%}, within the window "
                  f"{within:.1%}, lag median {np.median(lags) if len(lags) else float('nan'):.0f}, "
                  f"max {lags.max() if len(lags) else float('nan')}, early {int((lags < 0).sum())}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rule = PartingRule()
    false_partings(args.pairs, args.seed, rule)
    planted(args.pairs, args.seed, rule)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
