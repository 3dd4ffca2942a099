"""`arldiag diff RUN_A RUN_B [--json]`: where two runs part and what moved first (arldiag/diff/, the rule in
docs/detectors.md "Where two runs part").

Exit 0 whether or not the runs part ("no parting found" when they stay within their noise); 2 with a message naming
the argument when a run cannot be read.
"""
from __future__ import annotations

import json
import math

from arldiag.diff.compare import RunDiff, diff_runs
from arldiag.diff.parting import PartingRule
from arldiag.findings import jsonable
from arldiag.store.reader import open_run
from arldiag.wording import plural

DEFAULT = PartingRule()
TOKEN_LABELS = (("tokens", "sampled token rows"), ("low_neg_share", "negative-advantage low-IS share"),
                ("low_neg_kl_share", "  its share of the k3 KL"), ("ratio_q001", "IS ratio q0.1%"),
                ("ratio_q01", "IS ratio q1%"), ("ratio_q99", "IS ratio q99%"), ("ratio_q999", "IS ratio q99.9%"),
                ("mismatch_k3", "mismatch k3"), ("mismatch_abs_max", "mismatch max |d|"))


def add_arguments(p) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="a run directory")
    p.add_argument("run_b", metavar="RUN_B", help="the run directory to compare it with")
    p.add_argument("--json", action="store_true", help="print the comparison as versioned JSON")
    p.add_argument("--window", type=int, default=DEFAULT.window,
                   help=f"aligned points in each trailing mean (default {DEFAULT.window})")
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


def _v(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def text_lines(d: RunDiff, top: int = 20) -> list[str]:
    """The text output: settings that differ first, then the partings by step, then the token window."""
    out = [f"A = {d.run_a}, B = {d.run_b}"]
    out.append("settings that differ (run.json):" if d.settings else "settings that differ (run.json): none")
    out += [f"  {k}: A {json.dumps(jsonable(a))}, B {json.dumps(jsonable(b))}" for k, a, b in d.settings]
    for name, acts in d.actions.items():
        if acts:
            out.append(f"closed-loop actions of {name}: " + ", ".join(f"{a} at step {s}" for s, a in acts))
    if d.steps is None:
        out.append("no steps in common: nothing to compare")
        return out
    out.append(f"compared {plural(len(d.compared), 'metric')} on steps {d.steps[0]}..{d.steps[1]}")
    if not d.partings:
        out.append("no parting found: every shared metric stays within both runs' noise")
        return out
    out += summary_lines(d)
    out.append(f"partings by step ({len(d.partings)}; gap = trailing mean of A - B, need = the gap the noise "
               "allows):")
    out.append(f"  {'step':>6}  {'metric':<34} {'A':>10} {'B':>10} {'gap/need':>9}")
    for p in d.partings[:top]:
        out.append(f"  {p.step:>6}  {p.metric:<34} {_v(p.mean_a):>10} {_v(p.mean_b):>10} {_v(p.strength):>9}")
    if len(d.partings) > top:
        out.append(f"  ... {len(d.partings) - top} more (--top N, or --json)")
    return out + token_lines(d)


def summary_lines(d: RunDiff) -> list[str]:
    f = d.first
    out = [f"first to part: {f.metric} at step {f.step} (A {_v(f.mean_a)}, B {_v(f.mean_b)})"]
    if d.outcome is None:
        out.append("outcome: neither a success rate nor a task score is logged by both runs")
    elif d.outcome_step is None:
        out.append(f"outcome {d.outcome}: does not part")
    else:
        out.append(f"outcome {d.outcome} parts at step {d.outcome_step}: "
                   + (f"{f.metric} moved {plural(d.lead, 'step')} before it" if d.lead else "it parts first"))
    return out


def token_lines(d: RunDiff) -> list[str]:
    if not d.tokens or d.token_window is None:
        return []
    names = list(d.tokens)
    lo, hi = d.token_window
    out = [f"token statistics in steps {lo}..{hi} (before the outcome parts):",
           f"  {'':<34} " + " ".join(f"{ab:>14}" for ab in ("A", "B"))]
    for key, label in TOKEN_LABELS:
        vals = [(d.tokens[n] or {}).get(key) for n in names]
        out.append(f"  {label:<34} " + " ".join(f"{_v(v):>14}" for v in vals))
    return out
