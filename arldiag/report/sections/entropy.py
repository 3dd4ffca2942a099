"""Entropy and Cov(logp, A) (Cui et al.: a sustained positive covariance predicts entropy collapse)."""
from __future__ import annotations

from arldiag.report import text as T
from arldiag.report.blocks import Note, Section, Text
from arldiag.report.sections._common import series_block

ID, TITLE = "entropy", "Entropy and Cov(logp, A)"


def build(report) -> Section:
    return Section(ID, TITLE, [
        Text("Cui et al.: a sustained positive Cov(logp, A) predicts entropy collapse."),
        Note(T.entropy_missing(report.main)),
        series_block(report, ["entropy"], "Entropy"),
        series_block(report, ["cov_logp_adv", "turn_entropy_mean"], "Cov(logp, A) and turn entropy"),
    ], nav="entropy")
