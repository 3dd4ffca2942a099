"""The dashboard's read queries: arldiag.views (the read side the report shares), under the names the dashboard's
views and callbacks call.

Rules that keep the dashboard fast on runs with 10 M token rows (kept by the views): step series come from the
``steps`` view, averaged into at most ``max_points`` buckets; distributions are histogrammed inside DuckDB (only bin
counts come back); raw token rows are read for one sequence at a time only. All values that reach SQL are either
column names from fixed lists checked against the run's columns, or numbers passed as bound parameters; the browser
never sends SQL.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from arldiag.views._sql import columns, q
from arldiag.views._sql import query as fetch
from arldiag.views.events import actions, alerts, state_segments
from arldiag.views.heatmap import Heatmap, band_of, ratio_heatmap
from arldiag.views.offenders import (ORDERS as WORST_ORDER, SEQ_COLUMNS, TOKEN_COLUMNS, sequence_row, sequence_tokens,
                                     worst_sequences)
from arldiag.views.series import bucket_width, last_signal_step, step_range, step_series, turn_heatmap

__all__ = ["q", "columns", "fetch", "step_range", "last_signal_step", "bucket_width", "step_series", "band_edges",
           "ratio_histogram", "heatmap_dict", "WORST_ORDER", "SEQ_COLUMNS", "worst_sequences", "TOKEN_COLUMNS",
           "sequence_tokens", "sequence_row", "turn_heatmap", "alerts", "actions", "state_segments"]


def band_edges(manifest: Mapping[str, Any], level: str) -> tuple[float, float] | None:
    """Log-ratio edges (log(1-eps_low), log(1+eps_high)) of the clip band for token or sequence ratios."""
    return band_of(manifest, level)


def ratio_histogram(run: Any, level: str = "sequences", bins: int = 41, max_steps: int = 200,
                    half_range: float | None = None) -> dict[str, Any]:
    """views.heatmap.ratio_heatmap as a dict: {"steps", "edges", "pos", "neg" (z[bins, steps]), "half_range",
    "n", "level", "bucket"}; ``half_range`` overrides the range rule."""
    if level not in ("sequences", "tokens"):
        raise ValueError(f"level must be 'sequences' or 'tokens', got {level!r}")
    return heatmap_dict(ratio_heatmap(run, level, band=None, max_x=max_steps, n_y=bins, limit=half_range), level, bins)


def heatmap_dict(hm: Heatmap | None, level: str, bins: int = 41) -> dict[str, Any]:
    if hm is None:
        return {"steps": [], "edges": [], "pos": np.zeros((bins, 0)), "neg": np.zeros((bins, 0)), "half_range": 0.0,
                "n": 0, "level": level}
    return {"steps": [int(s) for s in hm.x], "edges": list(hm.edges), "pos": hm.z["pos"], "neg": hm.z["neg"],
            "half_range": hm.limit, "n": hm.n, "level": level, "bucket": hm.width}
