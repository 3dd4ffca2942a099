"""The false-alarm budget and the alert floor on generated runs (arldiag.evaluation.families), shipped defaults.

For each stable family: how many runs are warned (state warning or critical at any point) and the false-alarm
episodes per 1,000 optimizer steps; for the collapsing family: detected by the collapse + 3 logged points, warned
>= 10 steps ahead (an episode active at the collapse that began >= 10 steps before it). Scored with
arldiag.evaluation.scoring (the rules of `arldiag eval-detect`) against arldiag.label's collapse step.

    python benchmarks/alert_budget.py [--runs 40] [--seed 0] [--json out.json]

Figures, not assertions (tests/detectors/test_alert_budget.py asserts the declared budget on a smaller draw).
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from arldiag.detectors.engine import Evaluator
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


def family_figures(family: str, runs: int, seed: int) -> dict:
    warned, eps, total_steps, causes = 0, 0, 0, {}
    for d in draws(family, runs, seed):
        cols = stable_run(d)
        steps, states, tops = states_of(cols)
        ep = episodes(steps, states)
        warned += bool(ep)
        eps += len(ep)
        total_steps += steps[-1] - steps[0] + d.interval
        for a, _ in ep:
            top = tops[steps.index(a)]
            causes[top] = causes.get(top, 0) + 1
    return {"family": family, "runs": runs, "warned": warned, "episodes": eps,
            "episodes_per_1000_steps": 1000.0 * eps / max(total_steps, 1), "causes": causes}


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
    print(f"{'family':12} {'runs':>5} {'warned':>7} {'episodes':>9} {'per 1k steps':>13}  causes")
    for r in rows:
        print(f"{r['family']:12} {r['runs']:5d} {r['warned']:7d} {r['episodes']:9d} "
              f"{r['episodes_per_1000_steps']:13.3f}  {r['causes']}")
    print(f"collapse: {col['collapses']} collapses by the label, detected by + 3 points {col['detected_by_plus3']}, "
          f"warned >= 10 steps ahead {col['warned_10_ahead']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"stable": rows, "collapse": col}, fh, indent=1)


if __name__ == "__main__":
    main()
