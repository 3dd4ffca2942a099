"""The false-alarm budget and the alert floor on generated runs (arldiag.evaluation.families), shipped defaults.

For each stable family: how many runs are warned (state warning or critical at any point) and the false-alarm
episodes per 1,000 optimizer steps; for the collapsing family: detected by the collapse + 3 logged points, warned
>= 10 steps ahead (an episode active at the collapse that began >= 10 steps before it). Scored with
arldiag.evaluation.scoring (the rules of `arldiag eval-detect`) against arldiag.label's collapse step.

    python benchmarks/alert_budget.py [--runs 40] [--seed 0] [--json out.json]

It also prints the floor's own price by the noise of the score (``noise_table``).

Figures, not assertions (tests/detectors/test_alert_budget.py asserts the declared budget on a smaller draw).
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from arldiag.detectors.engine import Evaluator
from arldiag.detectors.floor import ScoreFloor
from arldiag.evaluation.families import STABLE, collapse_run, draws, stable_run
from arldiag.evaluation.scoring import ScoreConfig, episodes, score_run
from arldiag.label import run_events

ALARM = ("warning", "critical")


def states_of(cols: dict[str, np.ndarray]) -> tuple[list[int], list[str], list[str | None]]:
    """(steps, alert state after each point, leading detector) of one generated run, online, shipped settings."""
    ev = Evaluator()
    steps, states, tops = [], [], []
    names = [c for c in cols if c != "step"]
    for i, s in enumerate(cols["step"]):
        res = ev.update(int(s), {c: float(cols[c][i]) for c in names if np.isfinite(cols[c][i])})
        steps.append(int(s))
        states.append(res.state)
        tops.append(res.top)
    return steps, states, tops


OUTCOME = ("collapse_floor", "score_collapse")  # the outcome itself, not a precursor


def family_figures(family: str, runs: int, seed: int) -> dict:
    warned, eps, total_steps, causes, by_precursor, by_floor, pre_eps = 0, 0, 0, {}, 0, 0, 0
    for d in draws(family, runs, seed):
        cols = stable_run(d)
        steps, states, tops = states_of(cols)
        ep = episodes(steps, states)
        warned += bool(ep)
        eps += len(ep)
        total_steps += steps[-1] - steps[0] + d.interval
        tops_at = [tops[steps.index(a)] for a, _ in ep]
        for top in tops_at:
            causes[top] = causes.get(top, 0) + 1
        by_precursor += any(t not in OUTCOME for t in tops_at)
        by_floor += "collapse_floor" in tops_at
        pre_eps += sum(t not in OUTCOME for t in tops_at)
    return {"family": family, "runs": runs, "warned": warned, "episodes": eps,
            "episodes_per_1000_steps": 1000.0 * eps / max(total_steps, 1), "causes": causes,
            "warned_by_precursor": by_precursor, "precursor_episodes": pre_eps, "warned_by_floor": by_floor,
            "precursor_episodes_per_1000_steps": 1000.0 * pre_eps / max(total_steps, 1)}


NOISE_KINDS = ("gauss0.05", "gauss0.1", "mean16", "mean8", "gauss0.2", "easy_or_hard")


def noise_table(runs: int = 100, n: int = 500, seed: int = 0) -> list[dict]:
    """The floor alone on stable scores (level 0.3-0.9, ``n`` points): runs it warns and its episodes per 1,000
    points, by the noise of one point (Gaussian sd, the mean of 8 or 16 0/1 samples, or one prompt a step whose
    8 samples are mostly right or mostly wrong)."""
    rng = np.random.default_rng(seed)
    out = []
    for kind in NOISE_KINDS:
        warned = eps = 0
        for _ in range(runs):
            lvl = rng.uniform(0.3, 0.9)
            if kind.startswith("gauss"):
                y = np.clip(lvl + float(kind[5:]) * rng.standard_normal(n), 0.0, 1.0)
            elif kind.startswith("mean"):
                k = int(kind[4:])
                y = rng.binomial(k, lvl, n) / k
            else:
                easy = rng.random(n) < lvl
                y = np.where(easy, rng.binomial(8, 0.85, n) / 8, rng.binomial(8, 0.1, n) / 8)
            f = ScoreFloor()
            on = np.array([f.push(float(v)) for v in y])
            e = int(on[0]) + int(np.sum(on[1:] & ~on[:-1]))
            eps += e
            warned += e > 0
        out.append({"noise": kind, "runs": runs, "warned": warned, "episodes_per_1000_points": 1000.0 * eps / (runs * n)})
    return out


def collapse_figures(runs: int, seed: int) -> dict:
    cfg = ScoreConfig()
    n_col = by3 = ahead = 0
    for d in draws("collapse", runs, seed):
        cols = collapse_run(d)
        steps, states, _ = states_of(cols)
        c, dips = run_events(steps, {"task_score": cols["task_score"]})
        if c is None:
            continue
        n_col += 1
        i = steps.index(c)
        by3 += any(st in ALARM for st in states[:min(i + 4, len(states))])
        row = score_run(steps, states, c, dips, cfg=cfg, interval=d.interval)
        ahead += row.get("lead") is not None and row["lead"] >= 10
    return {"family": "collapse", "collapses": n_col, "detected_by_plus3": by3, "warned_10_ahead": ahead}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="runs per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args(argv)
    rows = [family_figures(f, a.runs, a.seed) for f in STABLE]
    col = collapse_figures(a.runs, a.seed)
    print(f"{'family':12} {'runs':>5} {'warned':>7} {'by precursor':>13} {'by floor':>9} {'episodes':>9} "
          f"{'per 1k steps':>13} {'precursor per 1k':>17}  causes")
    for r in rows:
        print(f"{r['family']:12} {r['runs']:5d} {r['warned']:7d} {r['warned_by_precursor']:13d} "
              f"{r['warned_by_floor']:9d} {r['episodes']:9d} {r['episodes_per_1000_steps']:13.3f} "
              f"{r['precursor_episodes_per_1000_steps']:17.3f}  {r['causes']}")
    noise = noise_table()
    print("the floor alone on stable scores of 500 points, by the noise of one point:")
    for r in noise:
        print(f"  {r['noise']:14} runs warned {r['warned']:3d} of {r['runs']}, "
              f"episodes per 1,000 points {r['episodes_per_1000_points']:.2f}")
    print(f"collapse: {col['collapses']} collapses by the label, detected by + 3 points {col['detected_by_plus3']}, "
          f"warned >= 10 steps ahead {col['warned_10_ahead']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"stable": rows, "collapse": col, "floor_noise": noise}, fh, indent=1)


if __name__ == "__main__":
    main()
