"""Dash callbacks: live refresh, one callback per view, step picking and the sequence explorer.

Each view callback owns its container's visibility and renders only while its tab is shown, so a page load computes
the overview only. Every callback receives run names and numbers from the browser, never SQL; run names are checked
by RunSource.get (security.resolve_run).
"""
from __future__ import annotations

import time

from dash import ALL, Input, Output, State, ctx, no_update
from dash.exceptions import PreventUpdate

from arldiag.dashboards import fleet as fleet_view
from arldiag.dashboards import views_alerts, views_sequences, views_series
from arldiag.dashboards.layout import HIDDEN, SHOWN
from arldiag.dashboards.source import RunSource

SERIES_VIEWS = {"kl": "g-kl", "advantages": "g-advantages", "entropy": "g-entropy"}
CLICKABLE = ["g-overview", "g-clipping", "g-ratios-heat", "g-kl", "g-advantages", "g-entropy", "g-turns",
             "g-turns-heat", "g-timeline"]


def register(app, source: RunSource, fleet: "fleet_view.FleetRows | None" = None) -> None:
    """All callbacks of the page; ``fleet``: the fleet table's rows (default: computed over ``source``'s runs)."""
    fleet_view.register(app, source, fleet if fleet is not None else fleet_view.FleetRows(source))

    def _runs(value) -> list[str]:
        # Names come from the browser: keep only those that resolve to a run inside the root.
        if not value:
            return []
        return source.valid([value] if isinstance(value, str) else [str(v) for v in value])

    @app.callback(Output("data-version", "data"), Output("run-select", "options"), Output("compare-select", "options"),
                  Output("status", "children"), Input("tick", "n_intervals"), State("data-version", "data"))
    def poll(_n, version):
        # Re-read only when a run's files changed (RunSource.poll compares file signatures).
        changed = source.poll()
        if not changed and version == source.version:
            raise PreventUpdate
        names = source.names()
        status = f"{len(names)} run(s) · refreshed {time.strftime('%H:%M:%S')}"
        opts = [{"label": n, "value": n} for n in names]
        return source.version, opts, opts, status

    @app.callback(Output("selected-runs", "data"), Input("run-select", "value"), Input("compare-select", "value"))
    def select(run, compare):
        # the focus run first, then the runs it is compared with (each once)
        names = ([run] if isinstance(run, str) and run else []) + [c for c in compare or [] if isinstance(c, str)]
        return _runs(list(dict.fromkeys(names)))

    @app.callback(Output("view-overview", "style"), Output("g-overview", "figure"), Output("overview-note", "children"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def overview(tab, runs, _v):
        if tab != "overview":
            return HIDDEN, no_update, no_update
        fig, note = views_series.render_panels(source, _runs(runs), "overview")
        return SHOWN, fig, note

    for view, gid in SERIES_VIEWS.items():
        _register_series(app, source, view, gid)

    @app.callback(Output("view-ratios", "style"), Output("g-ratios-heat", "figure"), Output("g-clipping", "figure"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("ratio-level", "value"),
                  Input("data-version", "data"))
    def ratios(tab, runs, level, _v):
        if tab != "ratios":
            return HIDDEN, no_update, no_update
        runs = _runs(runs)
        return SHOWN, views_series.render_ratios(source, runs, level or "sequences"), \
            views_series.render_panels(source, runs, "clipping")[0]

    @app.callback(Output("view-turns", "style"), Output("g-turns-heat", "figure"), Output("g-turns", "figure"),
                  Output("turns-note", "children"), Output("g-turns-heat", "style"), Output("g-turns", "style"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def turns(tab, runs, _v):
        if tab != "turns":
            return HIDDEN, no_update, no_update, no_update, no_update, no_update
        runs = _runs(runs)
        missing = views_series.turns_missing(source, runs)
        if missing:  # a message instead of empty panels
            return SHOWN, no_update, no_update, missing, HIDDEN, HIDDEN
        return SHOWN, views_series.render_turn_heatmap(source, runs), \
            views_series.render_panels(source, runs, "turns", with_bands=False)[0], "", SHOWN, SHOWN

    @app.callback(Output("view-alerts", "style"), Output("g-timeline", "figure"), Output("findings", "children"),
                  Output("alerts-table", "children"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def alerts(tab, runs, _v):
        if tab != "alerts":
            return HIDDEN, no_update, no_update, no_update
        return (SHOWN, *views_alerts.render_alerts(source, _runs(runs)))

    @app.callback(Output("step-input", "value"), Output("tabs", "value"),
                  *[Input(g, "clickData") for g in CLICKABLE], Input({"type": "goto-step", "index": ALL}, "n_clicks"),
                  prevent_initial_call=True)
    def pick_step(*clicks):
        # A click on any step chart (or a finding's "inspect step" button) selects that step and opens the
        # sequence explorer on it.
        data = ctx.triggered[0]["value"] if ctx.triggered else None
        if isinstance(ctx.triggered_id, dict):  # a finding's button; rebuilt buttons come with n_clicks 0
            if not data:
                raise PreventUpdate
            return int(ctx.triggered_id["index"]), "sequences"
        try:
            step = int(round(float(data["points"][0]["x"])))
        except (TypeError, KeyError, IndexError, ValueError):
            raise PreventUpdate from None
        return step, "sequences"

    @app.callback(Output("view-sequences", "style"), Output("seq-table", "children"), Output("seq-info", "children"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("step-input", "value"),
                  Input("seq-by", "value"), Input("data-version", "data"))
    def sequence_table(tab, runs, step, by, _v):
        if tab != "sequences":
            return HIDDEN, no_update, no_update
        runs = _runs(runs)
        if not runs:
            return SHOWN, [], "no run selected"
        try:
            rows, info = views_sequences.render_table(source, runs[0], step, by or "ppo_kl_k3_sum")
        except ValueError as e:
            return SHOWN, [], str(e)
        return SHOWN, views_sequences.table_component(rows), info

    @app.callback(Output("seq-selected", "data"), Input({"type": "seq-row", "index": ALL}, "n_clicks"),
                  prevent_initial_call=True)
    def select_sequence(_clicks):
        # Fires also when the table is rebuilt (all n_clicks None): only a real click selects a row.
        if not ctx.triggered or not ctx.triggered[0]["value"] or not isinstance(ctx.triggered_id, dict):
            raise PreventUpdate
        return ctx.triggered_id["index"]

    @app.callback(Output("seq-header", "children"), Output("token-spans", "children"), Output("g-tokens", "figure"),
                  Input("seq-selected", "data"), Input("color-by", "value"), State("selected-runs", "data"))
    def token_view(key, color_by, runs):
        runs = _runs(runs)
        row = views_sequences.parse_row_key(key) if key else None
        return views_sequences.render_tokens(source, runs[0] if runs else "", row, color_by or "log_ratio")


def _register_series(app, source: RunSource, view: str, gid: str) -> None:
    def _runs(value) -> list[str]:
        return source.valid([value] if isinstance(value, str) else [str(v) for v in value or []])

    @app.callback(Output(f"view-{view}", "style"), Output(gid, "figure"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def render(tab, runs, _v):
        if tab != view:
            return HIDDEN, no_update
        return SHOWN, views_series.render_panels(source, _runs(runs), view)[0]
