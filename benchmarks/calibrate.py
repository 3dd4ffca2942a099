"""Calibrate the alert state on dev runs only, then score the held-out runs once.

    python benchmarks/calibrate.py RUNS... [--stand-in-heldout a,b,c] [--out arldiag/detectors/calibrated.json]

Split: each run's run.json (`config.split` or top-level `split`: dev | heldout). For runs without one (the current
sample runs), ``--stand-in-heldout NAMES`` marks those names held out and the rest dev, and the output says it is a
stand-in. Fitting reads dev runs only (``fit_*`` refuse a held-out run); the held-out runs are replayed once, after
the fit, with the chosen settings.

1. Rule-based state: the detectors are replayed once per dev run (their per-step levels kept), then every RiskConfig
   of the grid (enter_steps x warning threshold x exit_steps) is scored with detectors.scoring; objective
   J = NAB score / 100 - 5 x share of healthy steps in warning (the issue's budget is 1 % of healthy steps).
2. Learned risk: an L2-regularised logistic regression (scipy.optimize, L-BFGS with the analytic gradient) over the
   windowed features of detectors.learned; positives = the 30 steps up to each collapse, negatives = healthy steps
   (outside every event window), classes weighted equally; its alarm threshold is picked on dev by the same J.
The chosen RiskConfig fields, the learned weights and the fit's figures go to calibrated.json. The Evaluator's
default RiskConfig is ``risk.calibrated_risk()``: the chosen fields when the file says ``"apply": true`` (the split
came from run.json, or ``--apply``), the class defaults otherwise (a stand-in fit only proposes). The learned
model (``risk_model="learned"``) is read from the same file.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRE = 30          # positives: the PRE steps up to the collapse step
L2 = 1.0
GRID = dict(enter_steps=(1, 2, 3, 4), warning=(0.5, 0.6, 0.75), exit_steps=(3, 5, 8))


def objective(s: dict) -> float:
    nab = s["nab_score"] if s["nab_score"] is not None else 0.0
    return nab / 100.0 - 5.0 * (s["healthy_warning_share"] or 0.0)


def replay(run, name: str) -> dict:
    """One pass over a run: per-step detector levels, learned features and the label."""
    from arldiag.detectors import Evaluator, events_of
    from arldiag.detectors.batch import steps_frame
    from arldiag.detectors.learned import FEATURE_METRICS, FeatureState
    from arldiag.detectors.window import Window

    frame = steps_frame(run, name)
    ev = Evaluator()
    fw, fs = Window(FEATURE_METRICS, 32), FeatureState()
    cols = [c for c in set(ev.window.columns) | set(FEATURE_METRICS) if c in frame.columns]
    steps, levels, feats, tops = [], [], [], []
    for rec in frame[["step"] + cols].to_dict("records"):
        r = ev.update(int(rec["step"]), rec)
        fw.push(int(rec["step"]), rec)
        steps.append(r.step)
        levels.append({n: s.level for n, s in r.signals.items()})
        tops.append(r.top)
        feats.append(fs.features(fw))
    c, dips = events_of(frame)
    from arldiag.commands.eval_detect import injected_faults

    return {"name": name, "steps": steps, "levels": levels, "X": np.asarray(feats), "collapse": c, "dips": dips,
            "tops": tops, "faults": injected_faults(run, name)}


def _check_dev(runs) -> None:
    bad = [r["name"] for r in runs if r["split"] != "dev"]
    if bad:
        raise ValueError(f"calibration fits on dev runs only; refusing held-out/unsplit runs: {', '.join(bad)}")


def score_states(runs, states_per_run) -> dict:
    from arldiag.detectors.scoring import ScoreConfig, score_run, summarize

    cfg = ScoreConfig()
    rows = [score_run(r["steps"], st, r["collapse"], r["dips"], dict(zip(r["steps"], r["tops"])),
                      tuple(r["faults"]), cfg) for r, st in zip(runs, states_per_run)]
    return summarize(rows, cfg)


def rule_states(runs, rc) -> list[list[str]]:
    from arldiag.detectors.risk import risk_series

    return [[st for _, st in risk_series(r["levels"], rc)] for r in runs]


def risk_config(enter_steps: int, warning: float, exit_steps: int):
    from arldiag.detectors.risk import RiskConfig

    return RiskConfig(enter=(0.25, warning, max(0.8, warning)), enter_steps=enter_steps, exit_steps=exit_steps)


def fit_rules(runs) -> tuple[dict, dict]:
    _check_dev(runs)
    best = None
    for es, wt, xs in itertools.product(GRID["enter_steps"], GRID["warning"], GRID["exit_steps"]):
        s = score_states(runs, rule_states(runs, risk_config(es, wt, xs)))
        key = (objective(s), -es, -xs)
        if best is None or key > best[0]:
            best = (key, {"enter_steps": es, "warning": wt, "exit_steps": xs}, s)
    return best[1], best[2]


def training_set(runs):
    from arldiag.detectors.scoring import ScoreConfig

    w = ScoreConfig().window
    X, y = [], []
    for r in runs:
        for i, s in enumerate(r["steps"]):
            c = r["collapse"]
            in_dip = any(a - w <= s <= b for a, b in r["dips"])
            if c is not None and c - PRE <= s <= c:
                X.append(r["X"][i]), y.append(1.0)
            elif not in_dip and (c is None or s < c - w) and not r["faults"]:
                X.append(r["X"][i]), y.append(0.0)
    return np.asarray(X), np.asarray(y)


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Class-balanced, L2-regularised logistic regression: minimise sum_i c_i log(1 + exp(-s_i z_i)) + l2/2 |w|^2
    with s_i = 2 y_i - 1, z = X w + b, c_i = n / (2 n_class(i))."""
    from scipy.optimize import minimize

    n, d = X.shape
    pos = y.sum()
    if pos == 0 or pos == n:
        raise ValueError("the dev runs need both collapse windows and healthy steps to fit the learned risk")
    c = np.where(y > 0, n / (2 * pos), n / (2 * (n - pos)))
    sgn = 2 * y - 1

    def f(theta):
        wv, b = theta[:d], theta[d]
        z = X @ wv + b
        m = -sgn * z
        loss = float((c * np.logaddexp(0, m)).sum() + 0.5 * l2 * wv @ wv)
        g = c * (-sgn) / (1 + np.exp(-m))       # d loss / d z
        return loss, np.concatenate([X.T @ g + l2 * wv, [g.sum()]])

    res = minimize(f, np.zeros(d + 1), jac=True, method="L-BFGS-B")
    return res.x[:d], float(res.x[d])


def learned_states(runs, wv, b) -> list[list[str]]:
    from arldiag.detectors.base import LEVELS
    from arldiag.detectors.learned import sigmoid
    from arldiag.detectors.risk import AlertState, RiskConfig

    out = []
    for r in runs:
        st = AlertState(RiskConfig())
        out.append([LEVELS[st.update(float(p))] for p in sigmoid(r["X"] @ wv + b)])
    return out


def fit_learned(runs) -> tuple[dict, dict]:
    from arldiag.detectors.learned import FEATURE_NAMES

    _check_dev(runs)
    X, y = training_set(runs)
    wv, b = fit_logistic(X, y)
    best = None
    for t in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99):
        shift = b - math.log(t / (1 - t)) + math.log(0.5 / 0.5)  # the threshold t maps to 0.5 (warning)
        s = score_states(runs, learned_states(runs, wv, shift))
        if best is None or objective(s) > best[0]:
            best = (objective(s), t, shift, s)
    _, t, shift, s = best
    model = {"features": list(FEATURE_NAMES), "weights": [float(v) for v in wv], "bias": float(shift),
             "threshold": t, "l2": L2, "positives": int(y.sum()), "negatives": int(len(y) - y.sum())}
    return model, s


def _fig(s: dict) -> dict:
    keys = ("recall_at_10", "recall_at_20", "median_lead", "false_alarms_per_100_healthy_steps",
            "healthy_warning_share", "nab_score", "collapsing", "early_collapses", "stable", "runs",
            "false_alarm_episodes", "stable_runs_with_warning")
    return {k: s.get(k) for k in keys}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="+")
    p.add_argument("--stand-in-heldout", default="", help="names treated as held out when run.json has no split")
    p.add_argument("--apply", action="store_true",
                   help="make the chosen RiskConfig the default even for a stand-in split (a split read from "
                        "run.json always applies)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "arldiag" / "detectors"
                                         / "calibrated.json"))
    args = p.parse_args(argv)
    from arldiag.commands.eval_detect import split_of
    from arldiag.store.reader import open_run

    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    stand_in = [n for n in args.stand_in_heldout.split(",") if n]
    unknown = set(stand_in) - set(run.names)
    if unknown:
        raise SystemExit(f"--stand-in-heldout: no run named {', '.join(sorted(unknown))}")
    runs, used_stand_in = [], False
    for name in run.names:
        sp = split_of(run, name)
        if sp is None and stand_in:
            sp, used_stand_in = ("heldout" if name in stand_in else "dev"), True
        if sp not in ("dev", "heldout"):
            print(f"skipping {name}: no split in run.json (use --stand-in-heldout)", file=sys.stderr)
            continue
        r = replay(run, name)
        r["split"] = sp
        runs.append(r)
    dev = [r for r in runs if r["split"] == "dev"]
    held = [r for r in runs if r["split"] == "heldout"]
    if not dev:
        raise SystemExit("no dev runs to fit on")
    chosen, dev_rules = fit_rules(dev)
    default_dev = score_states(dev, rule_states(dev, risk_config(2, 0.5, 3)))
    model, dev_learned = fit_learned(dev)
    out = {"split_source": ("STAND-IN: run.json has no split; held out by name: " + ", ".join(stand_in))
           if used_stand_in else "run.json", "dev_runs": [r["name"] for r in dev],
           "heldout_runs": [r["name"] for r in held], "apply": bool(args.apply or not used_stand_in),
           "objective": "NAB score / 100 - 5 x healthy warning share",
           "risk": {"enter_steps": chosen["enter_steps"], "enter": [0.25, chosen["warning"],
                                                                    max(0.8, chosen["warning"])],
                    "exit_steps": chosen["exit_steps"]},
           "fit": {"dev_rules_chosen": _fig(dev_rules), "dev_rules_previous_default": _fig(default_dev),
                   "dev_learned": _fig(dev_learned)},
           "learned": model}
    # the held-out runs, scored once with what was chosen on dev
    if held:
        out["heldout"] = {
            "rules": _fig(score_states(held, rule_states(held, risk_config(chosen["enter_steps"], chosen["warning"],
                                                                           chosen["exit_steps"])))),
            "learned": _fig(score_states(held, learned_states(held, np.asarray(model["weights"]),
                                                              model["bias"])))}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "learned"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
