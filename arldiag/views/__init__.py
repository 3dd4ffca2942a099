"""The read side both UIs render: ``arldiag report`` (arldiag/report/) and the dashboard (dashboards/) compute
nothing of their own about a run; they call these functions and draw what comes back.

Contract: every function takes an open Run (arldiag.open_run) and returns plain frames, arrays or small dataclasses;
nothing here draws, renders or imports plotly / dash. Bulk tables (tokens, sequences) are aggregated inside DuckDB
(histograms, top-k); only step series and a few sequences' tokens reach Python. ``name`` narrows a multi-run view to
one run (None: the whole view, the dashboard's one-run connections).

Modules: runs (discovery under a root, change signature), catalog (metric labels, candidate columns, panels),
series (step frames: full and bucketed; turns), heatmap (the IS-ratio heatmap and its one range rule), offenders
(ranked sequence rows, offender tokens), events (alerts, actions, alert-state bands).
"""
