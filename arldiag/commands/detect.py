"""`arldiag detect RUN [--json] [--fail-on warning|critical]`: run the collapse detectors over a run store.

Exit code 1 when --fail-on is given and a fired finding reaches that severity (for CI), 0 otherwise.

With ``--engine local|ray`` (or $ARLDIAG_ENGINE) each run is analysed by its own task (arldiag.fleetrun), here or
on Ray, and the findings join into the same output; a run that cannot be read is named on stderr (and under
``errors`` in the JSON) while the others are still analysed.
"""
from __future__ import annotations

import os
import sys

from arldiag.detectors import analyse
from arldiag.findings import findings_to_json, level_steps, order_findings, severity_rank
from arldiag.fleetrun.engine import add_engine_argument, run_all
from arldiag.fleetrun.locate import locate_runs
from arldiag.fleetrun.tasks import call, detect_error
from arldiag.levels import ALERTING, SEVERITIES
from arldiag.store.reader import open_run
from arldiag.verdict import detector_warmup
from arldiag.wording import plural


def add_arguments(p) -> None:
    p.add_argument("run", nargs="+", help="run directory, a root of runs, or a glob (several allowed)")
    p.add_argument("--json", action="store_true", help="print the findings as versioned JSON")
    p.add_argument("--fail-on", choices=[s for s in SEVERITIES if s != "info"], default=None,
                   help="exit with code 1 when a finding reaches this severity")
    p.add_argument("--detectors", default=None, help="comma-separated detector names (default: all)")
    p.add_argument("--all", action="store_true", help="also list quiet and skipped detectors in the text output")

    add_engine_argument(p)


def main(args) -> int:
    names = [n.strip() for n in args.detectors.split(",") if n.strip()] if args.detectors else None
    if getattr(args, "engine", None) or os.environ.get("ARLDIAG_ENGINE"):
        findings, run_names, timeline, errors = fleet_detect(args.run, names, args.engine, not args.no_progress)
    else:
        run = open_run(args.run if len(args.run) > 1 else args.run[0])
        findings, _, timeline = analyse(run, names)  # one replay per run for the findings and the alert states
        run_names, errors = run.names, {}
    if args.json:
        print(findings_to_json(findings, runs=run_names, **({"errors": errors} if errors else {})))
    else:
        _print_text(findings, [n for n in run_names if n not in errors], args.all, timeline)
    for name, err in errors.items():
        print(f"arldiag detect: warning: run {name} could not be analysed: {err}", file=sys.stderr)
    if args.fail_on:
        worst = max((severity_rank(f.severity) for f in findings if f.fired), default=-1)
        if worst >= severity_rank(args.fail_on):
            return 1
    return 0


def fleet_detect(roots, detectors, engine: str | None, progress: bool = True):
    """(findings, run names, alert timeline, {run: error}) of every run under ``roots``, one task per run on the
    engine; the same findings, names and timeline as one ``analyse`` over ``open_run(roots)``."""
    import pandas as pd

    refs = locate_runs(roots)
    res = run_all(call("detect_result", detectors), refs, engine, on_error=detect_error,
                  progress=progress and sys.stderr.isatty(), desc="detect")
    errors = {r["name"]: r["error"] for r in res if r["error"]}
    if errors and len(errors) == len(res):
        name, err = next(iter(errors.items()))
        raise ValueError(f"no run could be analysed: {name}: {err}")
    findings = [f for r in res for f in r["findings"]]
    timeline = pd.DataFrame([t for r in res for t in r["timeline"]], columns=["run", "step", "risk", "state", "top"])
    return findings, [r.name for r in refs], timeline, errors


# ANSI colours of the severities (the report's palette): only on a terminal, and never with NO_COLOR set
ANSI = {"critical": "\033[1;31m", "warning": "\033[33m", "watch": "\033[93m"}


def _paint(severity: str, text: str) -> str:
    import os
    import sys

    if severity not in ANSI or not sys.stdout.isatty() or os.environ.get("NO_COLOR"):
        return text
    return f"{ANSI[severity]}{text}\033[0m"


def _state_line(tl) -> str:
    parts = []
    for i, st in enumerate(ALERTING):
        hit = tl[tl["state"].isin(ALERTING[i:])]
        if len(hit):
            parts.append(f"first {st} or above at step {int(hit['step'].iloc[0])}")
    last = tl["state"].iloc[-1] if len(tl) else "ok"
    return f"alert state now {last}; max risk {tl['risk'].max() if len(tl) else 0:.2f}" + \
        (f"; {', '.join(parts)}" if parts else "")


def _print_text(findings, names, show_all: bool, timeline) -> None:
    warmup = detector_warmup()
    for name in names:
        mine = order_findings([f for f in findings if f.run == name])
        fired = [f for f in mine if f.fired]
        print(f"run {name}: {len(fired)} of {len(mine)} detectors fired, "
              f"{sum(f.status == 'skipped' for f in mine)} skipped")
        tl = timeline[timeline["run"] == name]
        print("  " + _state_line(tl))
        if len(tl) < warmup and not any(severity_rank(f.severity) >= severity_rank("warning") for f in fired):
            print(f"  too short: {plural(len(tl), 'logged step')}, the detectors need {warmup} before they can "
                  "tell a healthy run from a failing one")
        rows = mine if show_all else fired
        for f in rows:
            if f.fired:
                print(f"  {_paint(f.severity, f'{f.severity.upper():8s}')} {f.detector:<18} {level_steps(f):<44} "
                      f"{plural(len(f.steps), 'step'):>9}  {f.title}")
                if f.evidence.get("note"):
                    print(f"  {'':8s} {'':<18} peak at step {f.evidence.get('peak_step')}: {f.evidence['note']}")
            elif f.status == "skipped":
                print(f"  {'skipped':8s} {f.detector:<18} {f.skipped_reason}")
            else:
                print(f"  {'quiet':8s} {f.detector:<18} {f.title}")
