"""Wording shared by the HTML and Markdown renderers, so both formats say the same thing about a run."""
from __future__ import annotations

import math
from typing import Any

from arldiag.evaluation.precursors import LEAD
from arldiag.report.build import history_needed
from arldiag.verdict import AT_RISK, COLLAPSED, DECLINED, HEALTHY, NO_SIGNAL, TOO_SHORT
from arldiag.wording import plural

MISMATCH_KEYS = ("mismatch_k3", "mismatch_chi2", "mismatch_log_abs_max", "mismatch_prob_abs_mean")
ENTROPY_KEYS = ("entropy", "cov_logp_adv", "turn_entropy_mean")
TURN_KEYS = ("turn_ratio_min", "turn_ratio_max", "turn_oob_low_frac", "turn_oob_high_frac")
NALIS_LABELS = {"nalis_count": "neg-adv low-IS count per step", "nalis_frac": "neg-adv low-IS fraction",
                "nalis_kl_share": "their share of the k3 policy-update KL",
                "nalis_delta_frac": "fraction under the delta rule"}
STATUS_COLORS = {COLLAPSED: "#c00000", DECLINED: "#a03060", AT_RISK: "#e07000", HEALTHY: "#2a8a2a",
                 TOO_SHORT: "#777777", NO_SIGNAL: "#777777"}


def num(v: Any, spec: str = ".4g") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "n/a" if v is None else str(v)
    return "n/a" if not math.isfinite(f) else format(f, spec)


def precursor_line(v) -> str:
    p = v.first_precursor
    if p is None:
        if v.event is not None and v.episode is None:
            return f"none: no alert episode was open at the {v.event[0]}"
        return ("none: no detector but the outcome's own reached warning inside the alert episode"
                if v.episode is not None else "none (no alert episode)")
    lead = f"; lead time {plural(p['lead_time'], 'step')}" if p["lead_time"] is not None else ""
    return f"{p['detector']} at {p['severity']} from step {p['step']}{lead}: {p['title']}"


def warning_line(v) -> str:
    if v.first_warning_step is None:
        return "none"
    if v.episode is None or v.episode[0] == v.first_warning_step:
        lead = f"; lead time {plural(v.warning_lead_time, 'step')}" if v.warning_lead_time is not None else ""
        return f"step {v.first_warning_step}{lead}"
    lead = f", lead time {plural(v.warning_lead_time, 'step')}" if v.warning_lead_time is not None else ""
    return f"step {v.first_warning_step}; the episode open at the {v.event[0] if v.event else 'end'} from step " \
           f"{v.episode[0]}{lead}"


def mismatch_missing(rep) -> str | None:
    if any(k in rep.cols for k in MISMATCH_KEYS):
        return None
    return ("No training-inference mismatch data: the run did not pass logp_rollout to the Collector "
            "(or, for an imported run, logged no mismatch metric).")


def retok_note(rep) -> str:
    if "retok_mismatch_frac" in rep.cols:
        return ""
    return "Retokenization drift: not measurable (token ids were not given to both record_rollout and record_update)."


def entropy_missing(rep) -> str | None:
    if any(k in rep.cols for k in ENTROPY_KEYS):
        return None
    return "No entropy or Cov(logp, A) data: the run recorded neither entropy nor token log-probs with advantages."


def turns_missing(rep) -> str | None:
    if rep.turns is not None or any(k in rep.cols for k in TURN_KEYS):
        return None
    return "No turn-level data: the run's turns table is empty (single-turn samples or turn ids not given)."


def heatmap_missing(rep) -> str | None:
    if rep.heatmaps:
        return None
    return ("No IS-ratio distribution: the run has no sequence or token rows (step-level metrics only, e.g. an "
            "imported run).")


def offenders_missing(rep) -> str | None:
    if rep.offenders:
        return None
    return "No offender sequences: the run has no sequence rows (step-level metrics only)."


LABEL_NOTES = {
    "decoded": "tokens decoded with the tokenizer (--tokenizer, or the one saved in the run folder)",
    "text": "tokens aligned with the recorded text word by word",
    "ids": "the run recorded token ids but no tokenizer was given (--tokenizer) and the text does not align with "
           "the tokens: tokens are shown by id",
    "positions": "the run recorded neither token ids nor text that aligns with its tokens: tokens are shown by "
                 "position",
    "none": "no token rows were kept for this sequence (token rows are sampled; the run has no token table or "
            "dropped them)",
}


def window_line(rep) -> str:
    if rep.window is None:
        return "the whole run"
    v = rep.verdict
    if v.first_warning_step is not None and rep.window[0] <= v.first_warning_step <= rep.window[1]:
        where = f" around the first warning (step {v.first_warning_step})"
    elif v.event is not None:
        where = f" before the {v.event[0]} (step {v.event[1]})"
    else:
        where = " after the first precursor"
    return f"steps {rep.window[0]}-{rep.window[1]}{where}, the build-up; zero-advantage rows left out"


def alerts_line(rep) -> str:
    n = rep.rows.get("alerts", 0)
    if not n:
        return "No alerts were recorded while the run was written (no online monitor or `arldiag watch`)."
    first = int(rep.alerts["step"].min()) if rep.alerts is not None and len(rep.alerts) else None
    what = "1 alert was" if n == 1 else f"{n} alerts were"
    return f"{what} recorded while the run was written; the first at step {first}."


def actions_line(rep) -> str | None:
    """One sentence on what --auto-stabilize did; None when the run was not stabilized."""
    if rep.actions is None or not len(rep.actions):
        return None
    a = rep.actions
    done = ", ".join(f"{x.action} at step {int(x.step)} ({x.detector or 'no finding'}, state {x.state})"
                     for x in a.itertuples())
    return f"Auto-stabilize ({a['policy'].iloc[0]}) applied {len(a)} action{'s' * (len(a) != 1)}: {done}."


def event_word(rep) -> str:
    """What the precursor section is about: "collapse", or "decline" for a run that declined."""
    return rep.verdict.event[0] if rep.verdict.event is not None else "collapse"


def precursor_intro(rep) -> str | None:
    """The sentence above the precursor table; None when the run neither collapsed nor declined."""
    if rep.precursors is None or rep.verdict.event is None:
        return None
    what, c = rep.verdict.event
    base = rep.precursor_base
    if not rep.precursors:
        return f"Too little history before the {what} at step {c}: {history_needed(rep.steps, c, base)}."
    return (f"Step metrics that moved most in steps {c - LEAD[1]}..{c - LEAD[0]}, 10 to 20 steps before the {what} "
            f"at step {c}: z = (mean there - mean over the {base} steps before) / (their std / sqrt(n)). Small |z| "
            f"everywhere means no recorded statistic announced the {what} in time.")
