"""Dash callbacks: live refresh, the run shown (URL, worst run, verdict banner), one callback per view, step picking
and the sequence explorer; register() calls one registration function per group.

Each view callback owns its container's visibility and renders only while its tab is shown, so a page load computes
the overview only. Every callback receives run names and numbers from the browser, never SQL; run names are checked
by RunSource.get (security.resolve_run).
"""
from __future__ import annotations

import time

from dash import ALL, Input, Output, State, ctx, html, no_update
from dash.exceptions import PreventUpdate

from arldiag.dashboards import fleet as fleet_view
from arldiag.dashboards import figures, selection, views_alerts, views_sequences, views_series
from arldiag.dashboards.layout import BANNER_STYLE, HIDDEN, SHOWN
from arldiag.dashboards.source import RunSource

SERIES_VIEWS = {"kl": "g-kl", "advantages": "g-advantages", "entropy": "g-entropy"}
CLICKABLE = ["g-overview", "g-clipping", "g-ratios-heat", "g-kl", "g-advantages", "g-entropy", "g-turns",
             "g-turns-heat", "g-timeline"]


def register(app, source: RunSource, fleet: "fleet_view.FleetRows | None" = None) -> None:
    """All callbacks of the page; ``fleet``: the fleet table's rows (default: computed over ``source``'s runs)."""
    fleet = fleet if fleet is not None else fleet_view.FleetRows(source)
    fleet_view.register(app, source, fleet)
    register_refresh(app, source)
    register_selection(app, source, fleet)
    register_views(app, source)
    register_explorer(app, source)


def _valid(source: RunSource, value) -> list[str]:
    # Names come from the browser: keep only those that resolve to a run inside the root.
    if not value:
        return []
    return source.valid([value] if isinstance(value, str) else [str(v) for v in value])


def waiting_text(source: RunSource) -> str:
    return (f"waiting for runs under {source.root}: a run appears here as soon as the trainer writes its "
            "run.json")


def no_run_text(source: RunSource) -> str:
    """What a view shows before a run is selected: waiting for runs, or for the worst run's verdict."""
    if not source.names():
        return waiting_text(source)
    return "choosing the run to show (the worst one, once the verdicts are computed) ..."


def register_refresh(app, source: RunSource) -> None:
    """The refresh tick: the run list and the data version every view depends on."""
    @app.callback(Output("data-version", "data"), Output("run-select", "options"), Output("compare-select", "options"),
                  Output("status", "children"), Input("tick", "n_intervals"), State("data-version", "data"))
    def poll(_n, version):
        # Re-read only when a run's files changed (RunSource.poll compares file signatures).
        changed = source.poll()
        if not changed and version == source.version:
            raise PreventUpdate
        names = source.names()
        if not names:
            return source.version, [], [], waiting_text(source)
        status = f"{len(names)} run(s) · refreshed {time.strftime('%H:%M:%S')}"
        opts = [{"label": n, "value": n} for n in names]
        return source.version, opts, opts, status


def register_selection(app, source: RunSource, fleet: "fleet_view.FleetRows") -> None:
    """Which run the views show: the URL's ``?run=NAME``, else the worst run; the address bar follows the picker
    (so the URL shares the view) and the banner shows the run's verdict."""
    @app.callback(Output("run-select", "value"), Output("url-note", "children"),
                  Input("url", "search"), Input("fleet-version", "data"), State("run-select", "value"))
    def choose(search, _fleet_version, current):
        # Only an empty picker is filled: a run the user picked (or the URL named) stays.
        if isinstance(current, str) and current:
            raise PreventUpdate
        wanted, note = selection.url_run(search), ""
        if wanted is not None:
            if _valid(source, wanted):
                return wanted, ""
            note = f"No run called {wanted!r} under {source.root}; showing the worst run instead."
        worst = selection.worst_run(fleet.rows(), fleet.pending())
        return (worst if worst is not None else no_update), note

    # the address bar names the shown run (?run=NAME, other parameters kept): copying it shares this view.
    # replaceState does not reload the page nor fire dcc.Location, so it cannot loop back into choose().
    app.clientside_callback(
        """function(run) {
            if (!run) { return window.dash_clientside.no_update; }
            const params = new URLSearchParams(window.location.search);
            if (params.get('run') === run) { return window.dash_clientside.no_update; }
            params.set('run', run);
            window.history.replaceState(null, '', window.location.pathname + '?' + params.toString());
            return run;
        }""",
        Output("url-synced", "data"), Input("run-select", "value"))

    @app.callback(Output("run-verdict", "children"), Output("run-verdict", "style"),
                  Input("run-select", "value"), Input("fleet-version", "data"))
    def banner(run, _fleet_version):
        # The fleet row's verdict (arldiag.fleet.run_row -> arldiag.verdict): the same word and reason as
        # `arldiag ls` and the report, never re-derived here.
        if not (isinstance(run, str) and _valid(source, run)):
            return no_run_text(source), BANNER_STYLE
        word, reason = selection.banner_text(fleet.row(run))
        style = {**BANNER_STYLE, "background": fleet_view.TINTS.get(word, BANNER_STYLE["background"])}
        if not word:
            return [html.B(run), f": {reason}"], style
        return [html.B(f"{word.upper()}", id="run-verdict-word"), f" {run}: ",
                html.Span(reason + ".", id="run-verdict-reason")], style

    @app.callback(Output("selected-runs", "data"), Input("run-select", "value"), Input("compare-select", "value"))
    def select(run, compare):
        # the focus run first, then the runs it is compared with (each once)
        names = ([run] if isinstance(run, str) and run else []) + [c for c in compare or [] if isinstance(c, str)]
        return _valid(source, list(dict.fromkeys(names)))


def register_views(app, source: RunSource) -> None:
    """One callback per step-series view (overview, ratios, KL, advantages, entropy, turns) and the alert view."""
    @app.callback(Output("view-overview", "style"), Output("g-overview", "figure"), Output("overview-note", "children"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def overview(tab, runs, _v):
        if tab != "overview":
            return HIDDEN, no_update, no_update
        runs = _valid(source, runs)
        if not runs:
            return SHOWN, figures.message_figure(no_run_text(source)), ""
        fig, note = views_series.render_panels(source, runs, "overview")
        return SHOWN, fig, note

    for view, gid in SERIES_VIEWS.items():
        _register_series(app, source, view, gid)

    @app.callback(Output("view-ratios", "style"), Output("g-ratios-heat", "figure"), Output("g-clipping", "figure"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("ratio-level", "value"),
                  Input("data-version", "data"))
    def ratios(tab, runs, level, _v):
        if tab != "ratios":
            return HIDDEN, no_update, no_update
        runs = _valid(source, runs)
        return SHOWN, views_series.render_ratios(source, runs, level or "sequences"), \
            views_series.render_panels(source, runs, "clipping")[0]

    @app.callback(Output("view-turns", "style"), Output("g-turns-heat", "figure"), Output("g-turns", "figure"),
                  Output("turns-note", "children"), Output("g-turns-heat", "style"), Output("g-turns", "style"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def turns(tab, runs, _v):
        if tab != "turns":
            return HIDDEN, no_update, no_update, no_update, no_update, no_update
        runs = _valid(source, runs)
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
        return (SHOWN, *views_alerts.render_alerts(source, _valid(source, runs)))


def register_explorer(app, source: RunSource) -> None:
    """Step picking (a chart click, a finding's button) and the sequence explorer: table, row pick, tokens."""
    @app.callback(Output("step-input", "value"), Output("tabs", "value"),
                  *[Input(g, "clickData") for g in CLICKABLE], Input({"type": "goto-step", "index": ALL}, "n_clicks"),
                  State("selected-runs", "data"), prevent_initial_call=True)
    def pick_step(*args):
        # A click on any step chart (or a finding's "inspect step" button) selects that step and opens the
        # sequence explorer on it -- unless the run has no sequence rows (an imported log): nothing to open.
        runs = _valid(source, args[-1])
        data = ctx.triggered[0]["value"] if ctx.triggered else None
        if not runs or not views_sequences.has_sequences(source, runs[0]):
            raise PreventUpdate
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
        runs = _valid(source, runs)
        if not runs:
            return SHOWN, [], no_run_text(source)
        if not views_sequences.has_sequences(source, runs[0]):
            return SHOWN, [], views_sequences.no_sequences_text(runs[0])
        try:
            rows, info = views_sequences.render_table(source, runs[0], step, by or "ppo_kl_k3_sum")
        except ValueError as e:
            return SHOWN, [], str(e)
        # an empty table says nothing the info line has not said already
        return SHOWN, views_sequences.table_component(rows) if rows else [], info

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
        runs = _valid(source, runs)
        row = views_sequences.parse_row_key(key) if key else None
        return views_sequences.render_tokens(source, runs[0] if runs else "", row, color_by or "log_ratio")


def _register_series(app, source: RunSource, view: str, gid: str) -> None:
    @app.callback(Output(f"view-{view}", "style"), Output(gid, "figure"),
                  Input("tabs", "value"), Input("selected-runs", "data"), Input("data-version", "data"))
    def render(tab, runs, _v):
        if tab != view:
            return HIDDEN, no_update
        return SHOWN, views_series.render_panels(source, _valid(source, runs), view)[0]
