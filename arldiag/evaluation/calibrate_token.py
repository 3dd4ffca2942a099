"""Calibrate the alert state on dev runs only, score the held-out runs once, and (with --write) regenerate every
detection figure of the docs from one suite folder.

    python benchmarks/calibrate.py /work/suite --write        # fit on dev, score held-out once, write docs + json
    python benchmarks/calibrate.py RUNS... [--stand-in-heldout a,b,c] [--out FILE] [--replay-cache FILE]

Split: each run's run.json (`config.split` or top-level `split`: dev | heldout). For runs without one (the first
sample runs), ``--stand-in-heldout NAMES`` marks those names held out and the rest dev, and the output says it is a
stand-in. Fitting reads dev runs only (``fit_*`` refuse a held-out run) and leaves out runs with planted faults
(their warnings are wanted); the held-out runs are replayed once, after the fit, with the chosen settings.

Objective on a set of runs (the issue's targets, as one number): J = R10 + R0 - F - 5 H, with R10 the share of
collapses warned >= 10 steps ahead, R0 the share alarmed at or before the collapse step, F the share of stable runs
(neither a collapse nor a decline) with a false-alarm episode, H the share of healthy steps in warning (the 1 %
budget costs 0.05).

1. Rule-based state: the detectors are replayed once per dev run (their per-step levels kept). Every RiskConfig of
   the grid enter_steps x warning threshold x exit_steps x critical_steps is scored; from the best GREEDY_FROM of
   them, detectors are *demoted* greedily (RiskConfig.demote: their level counts one lower in the risk, so they
   warn only with a second signal) while J rises by more than DEMOTE_COST per detector (J alone: a collapse alarm
   a demotion loses is priced in it); the best demotion set then gets the hysteresis grid again (ties: fewer
   enter/exit steps).
2. Learned risk: an L2-regularised logistic regression (scipy.optimize, L-BFGS with the analytic gradient) over the
   windowed features of detectors.learned; positives = the PRE steps up to each collapse, negatives = healthy steps
   (outside every event window), classes weighted equally. L2 (L2_GRID) and the alarm threshold are picked by J
   on leave-one-run-out predictions over the dev runs (each run scored by a model fitted on the others); the
   shipped weights are then refitted on every dev run with that L2.
3. Held out, once: both are scored; the one with the higher held-out J is ``default_model`` (a model that alarms at
   no collapse, dev (leave-one-run-out) or held out, is not eligible, nor one that does not warn ahead of the
   constructed collapse of ``synthetic_check`` while the other does; ties: rules, the simpler), the other stays
   selectable (``risk_model=`` / ``eval-detect --risk``).
4. With --write: calibrated.json (chosen fields, learned weights, the fit's figures), rlwatch 0.5.1's defaults on
   the same runs (benchmarks/peer_rlwatch.py), and the generated sections of docs/detectors.md and
   docs/toy-detection.md.
The Evaluator's defaults are ``risk.calibrated_risk()`` / ``risk.calibrated_model()``: the chosen values when the
file says ``"apply": true`` (the split came from run.json, or ``--apply``), the class defaults otherwise.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import pickle
import shlex
import sys
from pathlib import Path

import numpy as np

from arldiag.detectors import Evaluator, decline_of, events_of
from arldiag.detectors.base import LEVELS
from arldiag.detectors.batch import steps_frame
from arldiag.detectors.learned import FEATURE_METRICS, FEATURE_NAMES, FeatureState, sigmoid
from arldiag.detectors.risk import AlertState, RiskConfig, risk_series
from arldiag.detectors.window import Window
from arldiag.evaluation import results as dr
from arldiag.evaluation.evaluate import injected_faults, split_of
from arldiag.evaluation.peer_rlwatch import rlwatch_timeline
from arldiag.evaluation.scoring import ScoreConfig, score_run, summarize
from arldiag.store.reader import open_run
from arldiag.synth import write_synth

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the docs --write regenerates

PRE = 30          # positives: the PRE steps up to the collapse step
L2 = 1.0
L2_GRID = (0.1, 1.0, 10.0, 100.0)  # chosen by leave-one-run-out on dev (fit_learned)
GRID = dict(enter_steps=(1, 2, 3, 4), warning=(0.5, 0.6, 0.75), exit_steps=(3, 5, 8, 12, 20), critical_steps=(1, 2))
GREEDY_FROM = 3   # grid points the demotion search starts from
DEMOTE_COST = 0.02  # J a demotion must buy (about a third of one stable run of the 17 on dev): fewer, surer changes
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
PREVIOUS = dict(enter_steps=2, warning=0.5, exit_steps=3)  # the class defaults before this fit


def objective(s: dict) -> float:
    """J = R10 + R0 - F - 5 H (module doc); a set without collapses scores on F and H alone."""
    f = (s["stable_runs_with_warning"] / s["stable"]) if s["stable"] else 0.0
    return ((s["recall_at_10"] or 0.0) + (s.get("alarmed_share") or 0.0) - f
            - 5.0 * (s["healthy_warning_share"] or 0.0))


def replay(run, name: str) -> dict:
    """One pass over a run: per-step detector levels, learned features, the label and the steps frame."""
    frame = steps_frame(run, name)
    ev = Evaluator(risk=RiskConfig(), risk_model="rules")
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
    return {"name": name, "steps": steps, "levels": levels, "X": np.asarray(feats), "collapse": c, "dips": dips,
            "decline": decline_of(frame),
            "tops": tops, "faults": injected_faults(run, name), "frame": frame}


def _check_dev(runs) -> None:
    bad = [r["name"] for r in runs if r["split"] != "dev"]
    if bad:
        raise ValueError(f"calibration fits on dev runs only; refusing held-out/unsplit runs: {', '.join(bad)}")


def score_rows(runs, states_per_run) -> list[dict]:
    cfg = ScoreConfig()
    return [dict(score_run(r["steps"], st, r["collapse"], r["dips"], dict(zip(r["steps"], r["tops"])),
                           tuple(r["faults"]), cfg, decline=r.get("decline")), run=r["name"])
            for r, st in zip(runs, states_per_run)]


def summarize_rows(rows) -> dict:
    s = summarize(rows, ScoreConfig())
    coll = [r for r in rows if r["kind"] == "collapse"]
    # R0: an alarm active at the collapse step (lead >= 0), however short
    s["alarmed_share"] = (sum(r["lead_time"] is not None for r in coll) / len(coll)) if coll else None
    s["objective"] = objective(s)
    return s


def score_states(runs, states_per_run) -> dict:
    return summarize_rows(score_rows(runs, states_per_run))


def rule_states(runs, rc) -> list[list[str]]:
    return [[st for _, st in risk_series(r["levels"], rc)] for r in runs]


def risk_config(enter_steps: int, warning: float, exit_steps: int, demote=(), critical_steps: int = 1):
    return RiskConfig(enter=(0.25, warning, max(0.8, warning)), enter_steps=enter_steps, exit_steps=exit_steps,
                      demote=tuple(sorted(demote)), critical_steps=critical_steps)


def _demote_greedy(runs, point: dict, s: dict, candidates) -> tuple[tuple[str, ...], dict]:
    demote: tuple[str, ...] = ()
    while True:
        best = None
        for d in candidates:
            if d in demote:
                continue
            t = score_states(runs, rule_states(runs, risk_config(**point, demote=demote + (d,))))
            # J alone decides: it already prices a lost collapse alarm (1 / collapses each in R10 and R0) against
            # the stable runs it clears (1 / stable runs each). A hard "never lose a dev collapse's alarm" rule
            # let one dev collapse veto the demotion of the main false-alarm source: on the 49 dev runs of
            # 2026-12-01 it kept kl_ref_drift whole, J 0.085 (23 of 41 stable runs warned, 9.9 % of healthy steps)
            # against 0.267 (11 of 41, 3.6 %) without it
            if t["objective"] > s["objective"] + DEMOTE_COST and (best is None or
                                                                 t["objective"] > best[1]["objective"]):
                best = (d, t)
        if best is None:
            return demote, s
        demote, s = tuple(sorted(demote + (best[0],))), best[1]


def fit_rules(runs) -> tuple[dict, dict]:
    """Grid over the hysteresis, then greedy demotion from the best GREEDY_FROM grid points (module doc)."""
    _check_dev(runs)
    runs = [r for r in runs if not r["faults"]]
    scored = _grid(runs, ())
    candidates = sorted({d for r in runs for lv in r["levels"] for d in lv})
    best = None
    for _, point, s in scored[:GREEDY_FROM]:
        demote, t = _demote_greedy(runs, point, s, candidates)
        key = (t["objective"], -len(demote))
        if best is None or key > best[0]:
            best = (key, demote)
    # the hysteresis again, with the chosen demotions (ties: fewer enter/exit steps, i.e. earlier warnings)
    _, point, s = _grid(runs, best[1])[0]
    return dict(point, demote=list(best[1])), s


def _grid(runs, demote) -> list[tuple]:
    """[(key, point, summary)] over GRID, best first; key = (J, -enter_steps, -exit_steps, -critical_steps)."""
    scored = []
    for es, wt, xs, cs in itertools.product(GRID["enter_steps"], GRID["warning"], GRID["exit_steps"],
                                            GRID["critical_steps"]):
        point = {"enter_steps": es, "warning": wt, "exit_steps": xs, "critical_steps": cs}
        s = score_states(runs, rule_states(runs, risk_config(**point, demote=demote)))
        scored.append(((s["objective"], -es, -xs, -cs), point, s))
    return sorted(scored, key=lambda x: x[0], reverse=True)


def training_set(runs):
    w = ScoreConfig().window
    X, y = [], []
    for r in runs:
        for i, s in enumerate(r["steps"]):
            c = r["collapse"]
            # inside a recovered dip's or a decline's window: neither class
            in_event = any(a - w <= s <= b for a, b in r["dips"]) or (
                c is None and r.get("decline") is not None and s >= r["decline"] - w)
            if c is not None and c - PRE <= s <= c:
                X.append(r["X"][i]), y.append(1.0)
            elif not in_event and (c is None or s < c - w) and not r["faults"]:
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
    out = []
    for r in runs:
        st = AlertState(RiskConfig())  # the Evaluator's hysteresis for the learned score (engine.Evaluator)
        out.append([LEVELS[st.update(float(p))] for p in sigmoid(r["X"] @ wv + b)])
    return out


def fit_learned(runs) -> tuple[dict, dict]:
    _check_dev(runs)
    runs = [r for r in runs if not r["faults"]]
    # L2 and the alarm threshold by leave-one-run-out on dev: each run is scored by a model fitted on the other dev
    # runs, so the choice rewards what carries over to an unseen run (a few collapses are easy to memorise)
    best = None
    for l2 in L2_GRID:
        folds = []
        for i in range(len(runs)):
            rest = runs[:i] + runs[i + 1:]
            X, y = training_set(rest)
            folds.append(fit_logistic(X, y, l2) if 0 < y.sum() < len(y) else None)
        for t in THRESHOLDS:
            states = []
            for r, fold in zip(runs, folds):
                if fold is None:  # the only collapse of the dev set left out: no model to score it with
                    states.append(["ok"] * len(r["steps"]))
                else:
                    states += learned_states([r], fold[0], fold[1] - math.log(t / (1 - t)))
            s = score_states(runs, states)
            if best is None or s["objective"] > best[0] + 1e-12:
                best = (s["objective"], l2, t, s)
    _, l2, t, cv = best
    X, y = training_set(runs)
    wv, b = fit_logistic(X, y, l2)
    shift = b - math.log(t / (1 - t))  # the threshold t maps to 0.5 (the warning threshold)
    s = score_states(runs, learned_states(runs, wv, shift))
    model = {"features": list(FEATURE_NAMES), "weights": [float(v) for v in wv], "bias": float(shift),
             "threshold": t, "l2": l2, "positives": int(y.sum()), "negatives": int(len(y) - y.sum()),
             "cv_objective": cv["objective"], "cv_recall_at_10": cv["recall_at_10"],
             "cv_alarmed_share": cv["alarmed_share"], "cv_stable_runs_with_warning": cv["stable_runs_with_warning"]}
    return model, s


FIG_KEYS = ("recall_at_10", "recall_at_20", "alarmed_share", "median_lead", "false_alarms_per_100_healthy_steps",
            "healthy_warning_share", "nab_score", "collapsing", "early_collapses", "stable", "fault", "runs",
            "false_alarm_episodes", "stable_runs_with_warning", "declines", "declines_warned", "objective")


def _fig(s: dict) -> dict:
    return {k: s.get(k) for k in FIG_KEYS}


SYNTH_COLLAPSE_AT = 70  # the constructed collapse every default must warn ahead of (synthetic_check)


def synthetic_check(rc, wv, bias, tmp: Path | None = None) -> dict[str, bool]:
    """{model: warned >= 10 steps ahead} on the constructed ARLArena collapse of `arldiag synth --collapse-at
    SYNTH_COLLAPSE_AT` (100 steps, 2 M tokens, 2 s): negative-advantage low-IS sequences pile up from 40 steps before
    it, KL to the reference rises from 20 before, a one-step KL/grad spike 10 before, then format and success break.
    This is the mechanism the detectors exist for, and it is not suite data, so it says something the held-out seeds
    cannot: a model that is only quiet (it alarms at none of the suite's few collapses) fails it."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = Path(tmp or d) / "synthetic_collapse"
        write_synth(out, tokens=2_000_000, steps=100, collapse_at=SYNTH_COLLAPSE_AT, token_sample_rate=0.01)
        run = open_run(out)
        r = replay(run, run.names[0])
    r["split"] = "synthetic"
    got = {"rules": score_states([r], rule_states([r], rc)), "learned": score_states([r], learned_states([r], wv, bias))}
    return {m: bool(g["recall_at_10"]) for m, g in got.items()}


def choose_default(held_rules: dict, held_learned: dict, dev_learned: dict | None = None,
                   synthetic: dict[str, bool] | None = None) -> str:
    """The model with the higher held-out J; ties go to the rules (simpler, explains itself by detector). A model
    that alarms at no collapse, on the dev runs nor on the held-out ones, is not eligible: the closed loop
    (arldiag.stabilize) acts on the alert state, and a default that stays quiet at every collapse switches it off.
    (This eligibility rule was added after the 2026-12-01 fit, in which the learned model led the held-out J by
    0.018 while alarming at none of the 4 collapses; docs/detectors.md says so.) Nor is a model that does not
    warn >= 10 steps ahead of the constructed collapse of ``synthetic_check`` when the other does (added in
    round 4 of 2026-12-01: the held-out J then favoured the learned model, 2 against 5 of 30 stable runs warned,
    neither alarming at either held-out collapse, while the learned model stayed silent through the synthetic
    collapse that the rules warn 34 steps ahead of; README says so). ``dev_learned``: the learned
    model's leave-one-run-out dev figures (``cv_alarmed_share``), not its in-sample ones, which score it on the very
    collapse windows it was trained on."""
    def alarms(*figs) -> bool:
        return any((f or {}).get("alarmed_share") for f in figs)

    if dev_learned is not None and not alarms(dev_learned, held_learned):
        return "rules"
    if synthetic is not None and not synthetic.get("learned") and synthetic.get("rules"):
        return "rules"  # the learned model does not warn ahead of the constructed collapse (synthetic_check)
    return "learned" if held_learned["objective"] > held_rules["objective"] + 1e-12 else "rules"


def load_runs(run, stand_in, cache: Path | None) -> tuple[list[dict], bool]:
    """Replay every run that has a split (or a stand-in one); ``cache``: reuse a pickle of the same runs."""
    split, used_stand_in = {}, False
    for name in run.names:
        sp = split_of(run, name)
        if sp is None and stand_in:
            sp, used_stand_in = ("heldout" if name in stand_in else "dev"), True
        if sp not in ("dev", "heldout"):
            print(f"skipping {name}: no split in run.json (use --stand-in-heldout)", file=sys.stderr)
            continue
        split[name] = sp
    runs = None
    if cache is not None and cache.exists():
        runs = pickle.loads(cache.read_bytes())
        if sorted(r["name"] for r in runs) != sorted(split):
            runs = None
        else:  # the order of the runs given (a cache written from another order must not reorder the output)
            order = {name: i for i, name in enumerate(split)}
            runs.sort(key=lambda r: order[r["name"]])
    if runs is None:
        runs = []
        for name in split:
            print(f"replaying {name}", file=sys.stderr)
            runs.append(replay(run, name))
        if cache is not None:
            cache.write_bytes(pickle.dumps(runs))
    for r in runs:
        r["split"] = split[r["name"]]
    return runs, used_stand_in


def calibrate(runs, used_stand_in: bool = False, stand_in=(), apply: bool = False) -> dict:
    """Fit on the dev runs, score the held-out runs once; the content of calibrated.json (plus per-run rows)."""
    dev = [r for r in runs if r["split"] == "dev"]
    held = [r for r in runs if r["split"] == "heldout"]
    if not dev:
        raise SystemExit("no dev runs to fit on")
    chosen, dev_rules = fit_rules(dev)
    fit_dev = [r for r in dev if not r["faults"]]
    previous = score_states(fit_dev, rule_states(fit_dev, risk_config(**PREVIOUS)))
    model, dev_learned = fit_learned(dev)
    rc = risk_config(**chosen)
    wv, bias = np.asarray(model["weights"]), model["bias"]
    out = {"split_source": ("STAND-IN: run.json has no split; held out by name: " + ", ".join(stand_in))
           if used_stand_in else "run.json", "dev_runs": [r["name"] for r in dev],
           "heldout_runs": [r["name"] for r in held], "apply": bool(apply or not used_stand_in),
           "objective": "J = R10 + R0 - F - 5 H (benchmarks/calibrate.py)",
           "risk": {"enter_steps": chosen["enter_steps"], "enter": list(rc.enter), "exit_steps": chosen["exit_steps"],
                    "critical_steps": chosen["critical_steps"], "demote": chosen["demote"]},
           "fit": {"dev_fit_runs": len(fit_dev), "grid_points": math.prod(len(v) for v in GRID.values()),
                   "demote_cost": DEMOTE_COST, "dev_rules_chosen": _fig(dev_rules),
                   "dev_rules_previous_default": _fig(previous), "dev_learned": _fig(dev_learned)},
           "learned": model}
    # every run (dev and held out) under both models, scored per split; fault runs stay in the reported figures
    states = {"rules": rule_states(runs, rc), "learned": learned_states(runs, wv, bias),
              "previous": rule_states(runs, risk_config(**PREVIOUS))}
    rows = {m: score_rows(runs, st) for m, st in states.items()}
    for sp in ("dev", "heldout"):
        out[sp] = {m: _fig(summarize_rows([x for x, r in zip(rows[m], runs) if r["split"] == sp]))
                   for m in rows} if any(r["split"] == sp for r in runs) else None
    # the held-out runs were scored once, above, with what was chosen on dev; the better model ships
    # the learned model's dev evidence for eligibility is its leave-one-run-out score: in-sample it alarms on the very
    # collapse windows it was trained on
    cv = {"alarmed_share": model["cv_alarmed_share"]}
    synthetic = synthetic_check(rc, wv, bias)
    out["synthetic_collapse_warned_10_ahead"] = synthetic
    out["synthetic_collapse_at"] = SYNTH_COLLAPSE_AT
    out["default_model"] = (choose_default(out["heldout"]["rules"], out["heldout"]["learned"], cv, synthetic)
                            if held else "rules")
    out["_rows"] = rows
    out["_states"] = states
    return out


def peer(runs, states: list[list[str]], hold: int = 10) -> dict:
    """rlwatch 0.5.1 (defaults) beside arldiag's shipped model, per split, on the same runs and labels."""
    rl_states = [[st for _, _, st, _ in rlwatch_timeline(r["frame"], hold)] for r in runs]
    ours, theirs = score_rows(runs, states), score_rows(runs, rl_states)
    out = {"hold": hold}
    for sp in ("dev", "heldout"):
        idx = [i for i, r in enumerate(runs) if r["split"] == sp]
        out[sp] = {"arldiag": _fig(summarize_rows([ours[i] for i in idx])),
                   "rlwatch": _fig(summarize_rows([theirs[i] for i in idx]))}
    out["_rows"] = {"arldiag": ours, "rlwatch": theirs}
    return out


def add_arguments(p) -> None:
    """The options `python benchmarks/calibrate.py` and `arldiag calibrate --profile token` share."""
    p.add_argument("--stand-in-heldout", default="", help="names treated as held out when run.json has no split")
    p.add_argument("--apply", action="store_true",
                   help="make the chosen settings the default even for a stand-in split (a split read from "
                        "run.json always applies)")
    p.add_argument("--docs", default=str(ROOT / "docs" / "detectors.md"),
                   help="page with the generated detection results (docs/detectors.md)")
    p.add_argument("--readme", default=str(ROOT / "docs" / "toy-detection.md"),
                   help="page with the generated detection headline (docs/toy-detection.md)")
    p.add_argument("--replay-cache", default=None, help="pickle of the replays, reused when it holds the same runs")


def fit(args, write_docs: bool) -> dict:
    """The content of calibrated.json for the runs of ``args.run`` (plus, with ``write_docs``, rlwatch on the same
    runs and the regenerated sections of ``args.docs`` and ``args.readme``)."""
    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    stand_in = [n for n in args.stand_in_heldout.split(",") if n]
    unknown = set(stand_in) - set(run.names)
    if unknown:
        raise SystemExit(f"--stand-in-heldout: no run named {', '.join(sorted(unknown))}")
    runs, used_stand_in = load_runs(run, stand_in, Path(args.replay_cache) if args.replay_cache else None)
    out = calibrate(runs, used_stand_in, stand_in, args.apply)
    out.pop("_rows")
    states = out.pop("_states")
    if write_docs:
        pr = peer(runs, states[out["default_model"]])
        out["peer_rlwatch"] = {k: v for k, v in pr.items() if k != "_rows"}
        source = shlex.join(str(a) for a in args.run)
        dr.write_between(Path(args.docs), "detection-results", dr.docs_section(out, runs, pr, source))
        dr.write_between(Path(args.readme), "detection-headline", dr.readme_headline(out, source))
    return out


def store(out: dict, path: Path) -> None:
    """Write ``out`` to calibrated.json at ``path``, keeping its step-scalar profile (fitted by `arldiag calibrate
    --labels` on labelled real runs)."""
    try:
        prev = json.loads(path.read_text())
    except (OSError, ValueError):
        prev = {}
    out.update({k: prev[k] for k in ("risk_steps", "fit_steps") if k in prev and k not in out})
    path.write_text(json.dumps(out, indent=1) + "\n")


def printed(out: dict) -> str:
    return json.dumps({k: v for k, v in out.items() if k != "learned"}, indent=1)


def main(argv=None) -> int:
    """`python benchmarks/calibrate.py`: always writes calibrated.json (--out); --write adds rlwatch and the docs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="+", help="a suite folder (or runs / roots of runs / globs)")
    p.add_argument("--out", default=str(ROOT / "arldiag" / "detectors" / "calibrated.json"))
    p.add_argument("--write", action="store_true",
                   help="also score rlwatch on the same runs and regenerate the sections of docs/detectors.md and "
                        "README.md")
    add_arguments(p)
    args = p.parse_args(argv)
    out = fit(args, args.write)
    store(out, Path(args.out))
    print(printed(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
