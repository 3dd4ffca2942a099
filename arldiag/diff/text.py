"""The words of a run comparison, shared by `arldiag diff`, the report's "Where the runs part" section and the
dashboard's list of partings."""
from __future__ import annotations

import math
from typing import Any

from arldiag.diff.compare import RunDiff
from arldiag.wording import plural

TOKEN_LABELS = (("tokens", "token rows read"), ("one_in", "  one sample in"), ("low_neg_share", "negative-advantage low-IS share"),
                ("low_neg_kl_share", "  its share of the k3 KL"), ("ratio_q001", "IS ratio q0.1%"),
                ("ratio_q01", "IS ratio q1%"), ("ratio_q99", "IS ratio q99%"), ("ratio_q999", "IS ratio q99.9%"),
                ("mismatch_k3", "mismatch k3"), ("mismatch_abs_max", "mismatch max |d|"))
NO_PARTING = "no parting found: every shared metric stays within both runs' noise"


def num(x: Any) -> str:
    """4 significant digits; "-" for a missing value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def summary(d: RunDiff) -> list[str]:
    """The comparison in two or three sentences: the first metric to part, the outcome's parting and the lead."""
    if d.steps is None:
        return ["no steps in common: nothing to compare"]
    if not d.partings:
        return [NO_PARTING]
    f = d.first
    out = [f"first to part: {f.metric} at step {f.step} (A {num(f.mean_a)}, B {num(f.mean_b)})"]
    if d.outcome is None:
        out.append("outcome: neither a success rate nor a task score is logged by both runs")
    elif d.outcome_step is None:
        out.append(f"outcome {d.outcome}: does not part")
    else:
        out.append(f"outcome {d.outcome} parts at step {d.outcome_step}: "
                   + (f"{f.metric} moved {plural(d.lead, 'step')} before it" if d.lead else "it parts first"))
    return out


def token_rows(d: RunDiff) -> list[list[str]]:
    """[label, A, B] per token statistic of the window (``RunDiff.tokens``); [] without one."""
    if not d.tokens:
        return []
    stats = list(d.tokens.values())
    return [[label, *(num((s or {}).get(key)) for s in stats)] for key, label in TOKEN_LABELS]
