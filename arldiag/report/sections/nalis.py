"""Negative-advantage low-IS analysis (ARLArena): the set's step metrics before vs at the collapse, the IS-ratio
heatmaps by advantage sign (arldiag.views.heatmap) and the set's KL share."""
from __future__ import annotations

import math

from arldiag.report import text as T
from arldiag.report.blocks import Bullets, Figure, Note, Section, Table, Text
from arldiag.report.sections._common import figures, series_block

ID, TITLE = "nalis", "Negative-advantage low-IS analysis"
HEATMAPS = (("sequences", "Sequence IS ratio log s_i by advantage sign over steps"),
            ("tokens", "Token IS ratio log r_t by advantage sign over steps (unbiased token sample)"))


def _ratio(x: float, y: float) -> float:
    return y / x if x and math.isfinite(x) and x != 0 else float("nan")


def build(report) -> Section:
    rep = report.main
    blocks = [Text("ARLArena: collapse is driven by sequences with a negative advantage and an IS ratio below 1; their "
                   "tokens leave the clip band at the lower bound and their share of the KL jumps at collapse.",
                   formats=("html",))]
    c = rep.comparison
    if c is None:
        blocks.append(Note("No negative-advantage low-IS step metrics recorded."))
    else:
        (a0, a1), (b0, b1) = c.windows
        blocks.append(Table(["metric", f"{c.labels[0]} (steps {a0}-{a1})", f"{c.labels[1]} (steps {b0}-{b1})",
                             "ratio"],
                            [[T.NALIS_LABELS.get(k, k), T.num(x), T.num(y), T.num(_ratio(x, y), ".3g")]
                             for k, (x, y) in c.rows.items()]))
    for key, title in HEATMAPS:
        if key in rep.heatmaps:
            hm = rep.heatmaps[key]
            blocks.append(Figure(lambda hm=hm, title=title: figures().heatmap_figure(hm, title), alt=[Bullets([
                f"{key}: {hm.counts['neg']:,} rows with A < 0, {hm.counts['pos']:,} with A > 0 (distribution heatmap "
                "in the HTML report)"])]))
    blocks.append(Note(T.heatmap_missing(rep)))
    blocks.append(series_block(report, ["nalis_frac", "nalis_kl_share", "kl_top1pct_share"],
                               "Neg-adv low-IS fraction and KL shares", summarize=False))
    return Section(ID, TITLE, blocks, nav="neg-adv low-IS")


def data(rep) -> dict:
    c = rep.comparison
    return {"neg_adv_low_is": None if c is None else {
        "labels": list(c.labels), "windows": [list(w) for w in c.windows],
        "metrics": {k: {"before": x, "at": y} for k, (x, y) in c.rows.items()}}}
