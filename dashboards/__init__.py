"""arldiag.dashboards: the live Dash dashboard over a root of run stores (`arldiag dashboard RUNS_ROOT`).

Nothing heavy at import: Dash and plotly load when ``create_app`` is called, DuckDB when a run is opened.

Modules (imports point down): cli -> app -> layout, callbacks -> fleet (the table of every run under the root,
arldiag.fleet) / views_series / views_alerts / views_sequences
-> queries (DuckDB SQL over one run's views), figures (plotly), detectors_bridge (arldiag.detectors)
-> source (runs under the root, file-signature cache, background warm-up) -> security (run-name resolution,
token guard) -> arldiag.store.reader.
"""
from __future__ import annotations

from arldiag.dashboards.app import create_app

__all__ = ["create_app"]

