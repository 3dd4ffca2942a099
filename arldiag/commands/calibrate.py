"""`arldiag calibrate RUNS... --labels FILE [--write]`: fit the step-scalar profile's alert state on labelled dev
runs (arldiag/evaluation/calibrate_steps.py) and, with ``--write``, store it as ``risk_steps`` in calibrated.json.

`arldiag calibrate --profile token RUNS... [--write]`: the token profile (runs with token statistics), fitted on the
reference trainer's dev runs (run.json ``split``) and scored once on its held-out runs
(arldiag/evaluation/calibrate_token.py; `python benchmarks/calibrate.py` is the same fit); ``--write`` stores it in
calibrated.json (the step-scalar profile there is kept) and regenerates the docs' detection sections. The token
profile's demotions are the starting point of the step-scalar fit, so the two are fitted together. Held-out runs
(run.json ``split: heldout``) are refused by the step-scalar fit.
"""
from __future__ import annotations

import json
from pathlib import Path

from arldiag import config_defaults
from arldiag.commands.eval_detect import load_labels
from arldiag.detectors.risk import CALIBRATED, calibrated_risk
from arldiag.evaluation import calibrate_steps as cs, calibrate_token
from arldiag.store.reader import open_run


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="imported dev runs (run directories, roots of runs, or globs)")
    p.add_argument("--profile", choices=PROFILES, default="steps",
                   help="steps: the step-scalar profile, on labelled runs (--labels); token: the token profile, on "
                        "the reference trainer's dev/held-out runs (default: steps)")
    p.add_argument("--labels", metavar="FILE", help="labels of those runs (eval-detect --labels format); needed by "
                                                    "--profile steps")
    p.add_argument("--write", action="store_true",
                   help="store the fit in calibrated.json (steps: as risk_steps; token: the token profile, and the "
                        "docs' generated detection sections)")
    p.add_argument("--calibrated", default=None, metavar="FILE",
                   help="calibrated.json to update (default: the package's arldiag/detectors/calibrated.json)")
    token = p.add_argument_group("--profile token")
    calibrate_token.add_arguments(token)


PROFILES = ("steps", "token")


def main(args) -> int:
    if args.profile == "token":
        return main_token(args)
    if not args.labels:
        raise ValueError("labels: --profile steps fits on labelled runs; give --labels FILE")
    from dataclasses import asdict

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
                          if k in ("enter", "exit_steps", "enter_steps", "critical_steps", "demote", *cs.STEP_PRIORS)},
           "fit_steps": {**fig, "leave_one_out": loo, "dev_runs": sorted(run.names), "labels": Path(args.labels).name,
                         "objective_rule": "J = R10 + R3 - F - 5 H (arldiag/detectors/calibrate_steps.py)"}}
    print(json.dumps(out, indent=1))
    if args.write:
        data = json.loads(path.read_text()) if path.exists() else {}
        data.update(out)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote risk_steps to {path}")
    return 0


def main_token(args) -> int:
    out = calibrate_token.fit(args, write_docs=args.write)
    if args.write:
        path = Path(args.calibrated) if args.calibrated else CALIBRATED
        calibrate_token.store(out, path)
        if path.resolve() == CALIBRATED.resolve():  # the shipped fit is the [risk] default: settings reads it as data
            config_defaults.write()
    print(calibrate_token.printed(out))
    if args.write:
        print(f"wrote the token profile to {path}")
    return 0
