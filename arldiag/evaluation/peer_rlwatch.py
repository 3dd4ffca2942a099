"""arldiag beside a public peer, rlwatch 0.5.1 with its default configuration, on the same runs and the same scoring
(`arldiag eval-detect`, evaluation.scoring).

    pip install "arldiag[peer]"        # rlwatch==0.5.1
    python benchmarks/peer_rlwatch.py sample_runs [--split dev|heldout] [--hold 10] [--json]

(`benchmarks/calibrate.py SUITE --write` runs the same comparison per split and writes the table into
docs/detectors.md.)

Each run's `steps` view is fed, step by step, to rlwatch's detector suite (`rlwatch.detectors.DetectorSuite`) and
alert manager (`rlwatch.alerts.AlertManager`, whose 100-step cooldown decides which alerts are sent), both built
from `rlwatch.config.RLWatchConfig()` defaults. Mapping (rlwatch `log_step` argument <- arldiag step metric):

    entropy        <- entropy            (mean token entropy)
    kl_divergence  <- kl_ref_k3          (k3 KL of the policy to the frozen reference; rlwatch: "KL from reference")
    reward_mean    <- reward_mean        reward_std    <- reward_std
    advantage_std  <- adv_std            loss          <- loss (user metric)      grad_norm <- grad_norm (user)

A NaN or missing metric is passed as None (rlwatch skips it). rlwatch raises events, not a state: a sent alert puts
the run in that alert's severity (warning / critical) for ``--hold`` steps from its step (10 by default: about the
hysteresis of arldiag's state, 3 calm steps after a 2-step entry, plus the 5-10-step smoothing of its rules), and a
later alert extends it. Its state is then scored exactly like arldiag's alert state.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys

from arldiag.detectors import decline_of, events_of
from arldiag.detectors.batch import steps_frame
from arldiag.evaluation.evaluate import evaluate, injected_faults, score_evaluation, select_split, split_of
from arldiag.evaluation.results import figures_table
from arldiag.evaluation.scoring import ScoreConfig, summarize
from arldiag.store.reader import open_run


MAPPING = {"entropy": "entropy", "kl_divergence": "kl_ref_k3", "reward_mean": "reward_mean",
           "reward_std": "reward_std", "advantage_std": "adv_std", "loss": "loss", "grad_norm": "grad_norm"}
def _value(v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def rlwatch_timeline(frame, hold: int = 10) -> list[tuple[int, float, str, str | None]]:
    """[(step, nan, state, detector)] of rlwatch's default configuration over one run's steps frame."""
    from rlwatch.alerts import AlertManager
    from rlwatch.config import RLWatchConfig
    from rlwatch.detectors import DetectorSuite

    cfg = RLWatchConfig()
    suite, manager = DetectorSuite(cfg), AlertManager(cfg.alerts, run_id="peer")
    cols = {k: (frame[c].tolist() if c in frame.columns else [None] * len(frame)) for k, c in MAPPING.items()}
    out, until, level, top = [], -1, "ok", None
    for i, step in enumerate(int(s) for s in frame["step"].tolist()):
        kw = {k: _value(v[i]) for k, v in cols.items()}
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            sent = [a for a in suite.check_step(step, **kw) if manager.send(a)]
        if sent:
            worst = max(sent, key=lambda a: a.severity == "critical")
            level = "critical" if worst.severity == "critical" or (level == "critical" and step < until) \
                else "warning"
            until, top = step + hold, worst.detector
        if step >= until:
            level, top = "ok", None
        out.append((step, math.nan, level, top))
    return out


def compare(run, split: str | None = None, hold: int = 10, names=None) -> dict:
    cfg = ScoreConfig()
    names = list(names) if names is not None else select_split(run, split)
    ours = evaluate(run, names=names)
    rows = []
    for name in names:
        frame = steps_frame(run, name)
        c, dips = events_of(frame)
        rows.append(score_evaluation(name, rlwatch_timeline(frame, hold), c, dips, injected_faults(run, name), {},
                                     cfg, decline_of(frame)))
    return {"split": split, "hold": hold, "arldiag": ours["summary"], "rlwatch": summarize(rows, cfg),
            "runs": {"arldiag": ours["runs"], "rlwatch": rows}}


def table(res: dict) -> str:
    return figures_table([("arldiag", res["arldiag"]), ("rlwatch 0.5.1 (defaults)", res["rlwatch"])])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", nargs="+")
    p.add_argument("--split", choices=("dev", "heldout"))
    p.add_argument("--hold", type=int, default=10, help="steps an rlwatch alert keeps the run in warning")
    p.add_argument("--stand-in-heldout", default="",
                   help="runs without a split in run.json: these names are held out, the others dev; prints both")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    run = open_run(args.run if len(args.run) > 1 else args.run[0])
    stand_in = [n for n in args.stand_in_heldout.split(",") if n]
    if stand_in:
        split = {n: split_of(run, n) or ("heldout" if n in stand_in else "dev") for n in run.names}
        out = {sp: compare(run, hold=args.hold, names=[n for n in run.names if split[n] == sp])
               for sp in ("dev", "heldout")}
        if args.json:
            print(json.dumps(out, indent=2, default=str))
            return 0
        for sp, res in out.items():
            print(f"### {sp} (STAND-IN split by name: held out = {', '.join(stand_in)})\n")
            print(table(res) + "\n")
        return 0
    res = compare(run, args.split, args.hold)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
        return 0
    print(table(res))
    print()
    for name in [r["run"] for r in res["runs"]["arldiag"]]:
        a = next(r for r in res["runs"]["arldiag"] if r["run"] == name)
        b = next(r for r in res["runs"]["rlwatch"] if r["run"] == name)
        event = (str(a["collapse_step"]) if a["collapse_step"] is not None
                 else "-" if a["decline_step"] is None else f"{a['decline_step']}d")
        print(f"{name:<26} {a['kind']:<8} event {event:>5}  arldiag lead {str(a['lead_time']):>5} "
              f"false {a['false_alarms']}  |  rlwatch lead {str(b['lead_time']):>5} false {b['false_alarms']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
