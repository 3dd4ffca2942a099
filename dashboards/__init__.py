"""arldiag.dashboards: the live Dash dashboard over a root of run stores (`arldiag dashboard RUNS_ROOT`).

Nothing heavy at import: Dash, plotly and DuckDB load when ``create_app`` is called.

Modules (imports point down): cli -> app -> layout, callbacks -> fleet (the table of every run under the root,
arldiag.fleet) / views_series / views_alerts / views_sequences
-> queries (DuckDB SQL over one run's views), figures (plotly), detectors_bridge (lazy arldiag.detectors)
-> source (runs under the root, file-signature cache, background warm-up) -> security (run-name resolution,
token guard) -> arldiag.store.reader.
"""
from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str):  # PEP 562: keep `import arldiag.dashboards` free of Dash/DuckDB
    if name == "create_app":
        from arldiag.dashboards.app import create_app

        return create_app
    raise AttributeError(f"module 'arldiag.dashboards' has no attribute {name!r}")
