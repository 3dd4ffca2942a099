"""Small pieces several sections share: a signal's one-line summary and a series figure with its summary as alt."""
from __future__ import annotations

from typing import Sequence

from arldiag.report import text as T
from arldiag.report.blocks import Bullets, Figure
from arldiag.views import catalog as S
from arldiag.views.series import series


def figures():
    """report/figures.py, imported when a figure is drawn (Markdown and JSON never load plotly)."""
    from arldiag.report import figures as F

    return F


def signal_summary(rep, key: str) -> str:
    """mean, max and the mean of the last fifth of a signal's steps ("n/a" when the run lacks it)."""
    col = rep.cols.get(key)
    if col is None:
        return "n/a"
    y = series(rep.steps, col)[1]
    k5 = max(1, y.size // 5)
    return f"mean {T.num(y.mean())}, max {T.num(y.max())}, last fifth {T.num(y[-k5:].mean())}"


def series_block(report, keys: Sequence[str], title: str, summarize: bool = True) -> Figure:
    """A small line chart of the signal keys; without figures, one summary line per signal the run has."""
    runs, rep = report.runs, report.main
    alt = [Bullets([f"{S.BY_KEY[k].label}: {signal_summary(rep, k)}" for k in keys if k in rep.cols])] \
        if summarize else []
    return Figure(lambda: figures().series_figure(runs, list(keys), title, report.max_points), alt=alt)
