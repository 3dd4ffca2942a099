"""How many collapses can one step metric warn >= 10 steps ahead of without false alarms? A ceiling, on dev runs.

    python benchmarks/ceiling.py RUNS... [--split dev] [--allow 0,5] [--top 8] [--json]

For every numeric step metric and direction (up, down), two one-metric detectors:
- LEVEL: the value itself;
- Z: the value against the mean and standard deviation of the previous BASE steps (at least MIN_PERIODS of them).
Each gets the lowest threshold that at most ``allow`` stable runs (neither a collapse nor a decline,
arldiag.label) exceed after WARMUP steps, and it *warns ahead* of a collapse at step c when it exceeds that
threshold somewhere in [max(WARMUP, c - FAR), c - NEAR]. Collapses before WARMUP + NEAR are left out.

The threshold is chosen on the very runs it is scored on and a detector would still have to keep warning until the
collapse, so the counts are an optimistic ceiling for any detector of one metric: when the best metric warns ahead
of few collapses at zero false alarms, the issue's targets (>= 80 % of collapses >= 10 steps ahead, no warning on a
stable run) are out of reach of such a detector on these runs. docs/detectors.md "Calibration" quotes the figures.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np

from arldiag.detectors import decline_of, events_of
from arldiag.detectors.batch import steps_frame
from arldiag.evaluation.evaluate import select_split
from arldiag.store.reader import open_run


BASE, MIN_PERIODS = 40, 10   # Z: the trailing baseline (steps before t, t excluded)
WARMUP = 20                  # steps before a detector may count (the detectors' own warm-up is 10-20)
NEAR, FAR = 10, 40           # the lead window: 10 to 40 steps before the collapse
SKIP = {"step", "run", "time", "rank"}


def zscore(x: np.ndarray, base: int = BASE, min_periods: int = MIN_PERIODS) -> np.ndarray:
    """z_t = (x_t - mean) / std (ddof 1) over the finite values among x[t-base .. t-1]; NaN with fewer than
    min_periods of them or a zero std."""
    import pandas as pd

    s = pd.Series(np.asarray(x, dtype=np.float64))
    prev = s.shift(1).rolling(base, min_periods=min_periods)
    sd = prev.std().to_numpy()
    z = (s.to_numpy() - prev.mean().to_numpy()) / np.where(sd > 0, sd, np.nan)
    return z


@dataclass(frozen=True)
class Ceiling:
    threshold: float   # in the detector's own direction (the negated value for a "down" detector)
    ahead: int         # collapses with a crossing 10-40 steps before them
    collapses: int     # collapses scored (those at or after WARMUP + NEAR)


def ceiling(stable: list[tuple[np.ndarray, np.ndarray]], collapsing: list[tuple[np.ndarray, np.ndarray, int]],
            allow: int = 0, warmup: int = WARMUP, near: int = NEAR, far: int = FAR) -> Ceiling:
    """``stable``: (steps, x) per stable run; ``collapsing``: (steps, x, collapse step) per collapsing run; x is
    already oriented (larger = more alarming). The threshold is the (allow+1)-th largest of the stable runs'
    maxima after ``warmup`` (a run exceeds it when strictly above), so at most ``allow`` stable runs cross it."""
    if allow < 0:
        raise ValueError(f"allow must be >= 0, got {allow}")
    peaks = sorted((np.nanmax(x[(st >= warmup) & np.isfinite(x)], initial=-np.inf) for st, x in stable),
                   reverse=True)
    thr = peaks[allow] if allow < len(peaks) else -np.inf
    scored = [(st, x, c) for st, x, c in collapsing if c >= warmup + near]
    ahead = 0
    for st, x, c in scored:
        w = (st >= max(warmup, c - far)) & (st <= c - near) & np.isfinite(x)
        ahead += bool(np.any(x[w] > thr))
    return Ceiling(float(thr), ahead, len(scored))


def load(run, split: str | None) -> tuple[dict, list[str], dict[str, int]]:
    """({run name: steps frame}, stable names, {collapsing run: collapse step}) of the runs in ``split``."""
    frames, stable, collapsing = {}, [], {}
    for name in select_split(run, split):
        f = steps_frame(run, name)
        frames[name] = f
        c = events_of(f)[0]
        if c is not None:
            collapsing[name] = c
        elif decline_of(f) is None:
            stable.append(name)
    return frames, stable, collapsing


def table(frames: dict, stable: list[str], collapsing: dict[str, int], allows=(0, 5)) -> list[dict]:
    """One row per (metric, direction, kind): the ceiling at each allowed number of stable runs; ``collapsing``:
    {run: collapse step}."""
    cols = sorted({c for f in frames.values() for c in f.columns
                   if c not in SKIP and np.issubdtype(f[c].dtype, np.number)})
    # a setting logged as a metric (lr, a coefficient) is constant within each run: it tells runs apart by their
    # config, it does not announce anything
    cols = [c for c in cols if any(f[c].dropna().nunique() > 1 for f in frames.values() if c in f.columns)]
    rows = []
    for col in cols:
        series = {n: (frames[n]["step"].to_numpy(), frames[n][col].astype("float64").to_numpy())
                  for n in [*stable, *collapsing] if col in frames[n].columns}
        for kind in ("level", "z"):
            base = {n: (st, x if kind == "level" else zscore(x)) for n, (st, x) in series.items()}
            for sign, direction in ((1.0, "up"), (-1.0, "down")):
                s = [(st, sign * x) for n, (st, x) in base.items() if n in stable]
                c = [(st, sign * x, collapsing[n]) for n, (st, x) in base.items() if n in collapsing]
                if not s or not c:
                    continue
                row = {"metric": col, "direction": direction, "kind": kind}
                for a in allows:
                    ce = ceiling(s, c, allow=a)
                    row[f"ahead_allow{a}"], row[f"threshold_allow{a}"] = ce.ahead, sign * ce.threshold
                    row["collapses"] = ce.collapses
                rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="+", help="runs, roots of runs or globs")
    p.add_argument("--split", choices=("dev", "heldout"), default="dev",
                   help="runs whose run.json names this split (default dev: the ceiling informs tuning)")
    p.add_argument("--allow", default="0,5", help="stable runs allowed to cross, comma-separated")
    p.add_argument("--top", type=int, default=8, help="rows printed per allowance")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    allows = tuple(int(x) for x in a.allow.split(","))

    run = open_run(a.run if len(a.run) > 1 else a.run[0])
    frames, stable, collapsing = load(run, a.split)
    if not stable or not collapsing:
        raise SystemExit(f"need stable and collapsing runs in split {a.split}: {len(stable)} stable, "
                         f"{len(collapsing)} collapsing")
    rows = table(frames, stable, collapsing, allows)
    if a.json:
        print(json.dumps({"split": a.split, "stable": len(stable), "collapsing": len(collapsing), "rows": rows},
                         indent=1, default=float))
        return 0
    n = rows[0]["collapses"] if rows else 0
    print(f"{a.split}: {len(stable)} stable runs, {len(collapsing)} collapsing ({n} at or after step "
          f"{WARMUP + NEAR}); warned ahead = a crossing {NEAR}-{FAR} steps before the collapse")
    for al in allows:
        key = f"ahead_allow{al}"
        best = sorted(rows, key=lambda r: (-r[key], r["metric"]))[:a.top]
        print(f"\nat most {al} of {len(stable)} stable runs crossing: best one-metric detectors")
        print("| metric | direction | kind | threshold | collapses warned ahead |\n|---|---|---|---|---|")
        for r in best:
            print(f"| {r['metric']} | {r['direction']} | {r['kind']} | {r[f'threshold_allow{al}']:.4g} | "
                  f"{r[key]} of {r['collapses']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
