"""Training-inference mismatch: the mismatch estimators and retokenization drift over steps."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Note, Section
from arldiag.report.sections._common import series_block

ID, TITLE = "mismatch", "Training-inference mismatch"


def build(report) -> Section:
    rep = report.main
    return Section(ID, TITLE, [Note(T.mismatch_missing(rep)),
                               series_block(report, T.MISMATCH_KEYS, "Mismatch"),
                               series_block(report, ["retok_mismatch_frac"], "Retokenization drift"),
                               Note(T.retok_note(rep))], nav="mismatch")
