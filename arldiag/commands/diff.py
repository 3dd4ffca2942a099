"""`arldiag diff RUN_A RUN_B [--json]`: where two runs part and what moved first (arldiag/diff/, the rule in
docs/detectors.md "Where two runs part").

Exit 0 whether or not the runs part ("no parting found" when they stay within their noise); 2 with a message naming
the argument when a run cannot be read.
"""
from __future__ import annotations

import json

from arldiag.diff.compare import RunDiff, diff_runs
from arldiag.diff import text as T
from arldiag.diff.parting import PartingRule
from arldiag.findings import jsonable
from arldiag.store.reader import open_run
from arldiag.wording import plural

DEFAULT = PartingRule()

def add_arguments(p) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="a run directory")
    p.add_argument("run_b", metavar="RUN_B", help="the run directory to compare it with")
    p.add_argument("--json", action="store_true", help="print the comparison as versioned JSON")
    p.add_argument("--window", type=int, default=DEFAULT.window,
                   help=f"aligned points in each trailing median (default {DEFAULT.window})")
    p.add_argument("--confirm", type=int, default=DEFAULT.confirm,
                   help=f"consecutive points the gap must stay beyond the noise (default {DEFAULT.confirm})")
    p.add_argument("--z", type=float, default=DEFAULT.z,
                   help=f"normal quantile of one test, before the multiple-comparisons margin (default {DEFAULT.z})")
    p.add_argument("--top", type=int, default=20, help="partings listed in the text output (default 20)")


def open_one(path: str, arg: str):
    """The open run at ``path``; ValueError naming the argument when it is missing, not a run, or holds several."""
    try:
        run = open_run(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{arg}: {exc}") from None
    if len(run.names) != 1:
        raise ValueError(f"{arg}: {path} holds {len(run.names)} runs ({', '.join(run.names[:5])}); pass one run "
                         "folder")
    return run


def main(args) -> int:
    rule = PartingRule(window=args.window, confirm=args.confirm, z=args.z)
    if args.top < 0:
        raise ValueError(f"--top must be >= 0, got {args.top}")
    d = diff_runs(open_one(args.run_a, "RUN_A"), open_one(args.run_b, "RUN_B"), rule)
    if args.json:
        print(json.dumps(jsonable(d.to_dict()), indent=2))
    else:
        print("\n".join(text_lines(d, args.top)))
    return 0


def text_lines(d: RunDiff, top: int = 20) -> list[str]:
    """The text output: settings that differ first, then the partings by step, then the token window."""
    out = [f"A = {d.run_a}, B = {d.run_b}"]
    out.append("settings that differ (run.json):" if d.settings else "settings that differ (run.json): none")
    out += [f"  {k}: A {json.dumps(jsonable(a))}, B {json.dumps(jsonable(b))}" for k, a, b in d.settings]
    for name, acts in d.actions.items():
        if acts:
            out.append(f"closed-loop actions of {name}: " + ", ".join(f"{a} at step {s}" for s, a in acts))
    if d.steps is not None:
        out.append(f"compared {plural(len(d.compared), 'metric')} on steps {d.steps[0]}..{d.steps[1]}")
    out += T.summary(d)
    if not d.partings:
        return out
    out.append(f"partings by step ({len(d.partings)}; A, B = the trailing medians there, gap/need = how far beyond "
               "the noise):")
    out.append(f"  {'step':>6}  {'metric':<34} {'A':>10} {'B':>10} {'gap/need':>9}")
    for p in d.partings[:top]:
        out.append(f"  {p.step:>6}  {p.metric:<34} {T.num(p.mean_a):>10} {T.num(p.mean_b):>10} "
                   f"{T.num(p.strength):>9}")
    if len(d.partings) > top:
        out.append(f"  ... {len(d.partings) - top} more (--top N, or --json)")
    rows = T.token_rows(d)
    if rows:
        lo, hi = d.token_window
        out += [f"token statistics in steps {lo}..{hi} (before the outcome parts):", f"  {'':<34} {'A':>14} {'B':>14}"]
        out += [f"  {label:<34} {a:>14} {b:>14}" for label, a, b in rows]
    return out
