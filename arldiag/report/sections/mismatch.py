"""Training-inference mismatch: the mismatch estimators and retokenization drift over steps, from arldiag's own
token statistics or from what the trainer logged (TRL sampling/*, verl rollout_corr/*: schema.py "logged" metrics)."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Note, Section
from arldiag.report.sections._common import series_block

ID, TITLE = "mismatch", "Training-inference mismatch"
# estimators of the mismatch's size: arldiag's (T.MISMATCH_KEYS) and the token-mean |lp_old - lp_roll| trainers log
SIZE_KEYS = tuple(T.MISMATCH_KEYS) + ("mismatch_log_abs_mean", "mismatch_log_abs_seq_mean", "mismatch_chi2_seq",
                                      "mismatch_log_ppl_abs_diff")
# the rollout-correction IS weight the trainer applied, and what its threshold cut or masked
IS_KEYS = ("mismatch_is_mean", "mismatch_is_min", "mismatch_is_max")
CUT_KEYS = ("mismatch_masked_frac", "mismatch_is_high_frac", "mismatch_is_low_frac")


def missing(rep) -> str | None:
    if any(k in rep.cols for k in SIZE_KEYS + IS_KEYS + CUT_KEYS):
        return None
    return T.mismatch_missing(rep)


def build(report) -> Section:
    rep = report.main
    blocks = [Note(missing(rep)), series_block(report, SIZE_KEYS, "Mismatch")]
    if any(k in rep.cols for k in IS_KEYS):
        blocks.append(series_block(report, IS_KEYS, "Rollout-correction IS weight (after the trainer's cap or mask)"))
    if any(k in rep.cols for k in CUT_KEYS):
        blocks.append(series_block(report, CUT_KEYS, "Masked / outside the IS threshold"))
    blocks += [series_block(report, ["retok_mismatch_frac"], "Retokenization drift"), Note(T.retok_note(rep))]
    return Section(ID, TITLE, blocks, nav="mismatch")
