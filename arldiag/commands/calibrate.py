"""`arldiag calibrate RUNS... --labels FILE [--write]`: fit the step-scalar profile's alert state on labelled dev
runs (arldiag/detectors/calibrate_steps.py) and, with ``--write``, store it as ``risk_steps`` in calibrated.json.

The token profile (runs with token statistics) is fitted by benchmarks/calibrate.py on the reference trainer's
dev runs; its demotions are the starting point here, so the two are fitted together. Held-out runs (run.json
``split: heldout``) are refused.
"""
from __future__ import annotations

import json
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="imported dev runs (run directories, roots of runs, or globs)")
    p.add_argument("--labels", required=True, metavar="FILE", help="labels of those runs (eval-detect --labels format)")
    p.add_argument("--write", action="store_true", help="store the fit as risk_steps in calibrated.json")
    p.add_argument("--calibrated", default=None, metavar="FILE",
                   help="calibrated.json to update (default: the package's arldiag/detectors/calibrated.json)")


def main(args) -> int:
    from dataclasses import asdict

    from arldiag.commands.eval_detect import load_labels
    from arldiag.detectors import calibrate_steps as cs
    from arldiag.detectors.risk import CALIBRATED, calibrated_risk
    from arldiag.store.reader import open_run

    labels = load_labels(args.labels)
    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    missing = [n for n in run.names if n not in labels]
    if missing:
        raise ValueError(f"labels: {args.labels} has no label for {', '.join(missing[:6])}")
    path = Path(args.calibrated) if args.calibrated else CALIBRATED
    token = calibrated_risk(path)
    replays = [cs.replay(run, n, labels[n]) for n in run.names]
    cfg, fig = cs.fit(replays, token.demote)
    loo = cs.leave_one_out(replays, token.demote)
    out = {"risk_steps": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()
                          if k in ("enter", "exit_steps", "enter_steps", "critical_steps", "demote")},
           "fit_steps": {**fig, "leave_one_out": loo, "dev_runs": sorted(run.names), "labels": Path(args.labels).name,
                         "objective_rule": "J = R10 + R3 - F - 5 H (arldiag/detectors/calibrate_steps.py)"}}
    print(json.dumps(out, indent=1))
    if args.write:
        data = json.loads(path.read_text()) if path.exists() else {}
        data.update(out)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote risk_steps to {path}")
    return 0
