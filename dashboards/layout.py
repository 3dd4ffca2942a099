"""The page: the fleet table of every run under the root (dashboards.fleet), then the run picker, view tabs, one
container per view (shown/hidden by its own callback), live refresh."""
from __future__ import annotations

from dash import dcc, html

from arldiag.dashboards import fleet
from arldiag.dashboards.source import RunSource

TABS = [("overview", "Overview"), ("ratios", "IS ratios & clipping"), ("kl", "KL & mismatch"),
        ("advantages", "Advantages & groups"), ("entropy", "Entropy"), ("turns", "Turns"),
        ("alerts", "Alert timeline"), ("sequences", "Sequence explorer")]
GRAPH_CONFIG = {"displaylogo": False}
HIDDEN, SHOWN = {"display": "none"}, {"display": "block"}
# the run view's verdict line (its background: the verdict's tint, dashboards.fleet.TINTS)
BANNER_STYLE = {"padding": "6px 10px", "margin": "4px 0", "borderRadius": "4px", "background": "#f4f4f4",
                "fontSize": "14px"}


def _graph(gid: str) -> dcc.Graph:
    return dcc.Graph(id=gid, config=GRAPH_CONFIG)


def build_layout(source: RunSource, refresh_ms: int = 2000) -> html.Div:
    names = source.names(rescan=True)
    root_name = source.root.name or str(source.root)
    status = f"{len(names)} run(s) under {root_name}" if names else f"waiting for runs under {source.root}"
    return html.Div(className="page", children=[
        dcc.Location(id="url", refresh=False),  # ?run=NAME selects the run (callbacks.register_selection)
        # the page opens on the fleet: every run under the root; a click on a row opens it in the views below
        fleet.section(root_name, lead=html.H3("arldiag", style={"margin": "4px 0"})),
        html.Div(className="header", id="run-header", children=[
            html.B("run"),
            # one run: the URL's ?run=NAME, else the worst run once the fleet's verdicts are in (filled by
            # callbacks.register_selection, never the newest by default); comparing is a choice
            dcc.Dropdown(id="run-select", options=[{"label": n, "value": n} for n in names],
                         value=None, multi=False, clearable=False,
                         placeholder="pick a run", className="runs"),
            dcc.Dropdown(id="compare-select", options=[{"label": n, "value": n} for n in names], value=[],
                         multi=True, placeholder="compare with...", className="runs compare"),
            html.Span(id="status", className="muted", children=status),
        ]),
        html.Div(id="url-note", className="notice"),
        html.Div(id="run-verdict", style=BANNER_STYLE),  # the run's verdict: the fleet row's word and reason
        dcc.Store(id="selected-runs", data=[]),
        dcc.Store(id="url-synced"),
        dcc.Tabs(id="tabs", value="overview", children=[dcc.Tab(label=label, value=v) for v, label in TABS]),
        html.Div(id="view-overview", children=[html.Div(id="overview-note", className="muted"),
                                               _graph("g-overview")]),
        html.Div(id="view-ratios", style=HIDDEN, children=[
            dcc.RadioItems(id="ratio-level", value="sequences", inline=True,
                           options=[{"label": " sequence ratio s_i", "value": "sequences"},
                                    {"label": " token ratio r_t (sampled tokens)", "value": "tokens"}]),
            _graph("g-ratios-heat"), _graph("g-clipping")]),
        html.Div(id="view-kl", style=HIDDEN, children=[_graph("g-kl")]),
        html.Div(id="view-advantages", style=HIDDEN, children=[_graph("g-advantages")]),
        html.Div(id="view-entropy", style=HIDDEN, children=[_graph("g-entropy")]),
        html.Div(id="view-turns", style=HIDDEN, children=[html.Div(id="turns-note", className="notice"),
                                                          _graph("g-turns-heat"), _graph("g-turns")]),
        html.Div(id="view-alerts", style=HIDDEN, children=[
            _graph("g-timeline"), html.H4("Findings (first selected run)"), html.Div(id="findings"),
            html.H4("Stored alerts"), html.Div(id="alerts-table")]),
        html.Div(id="view-sequences", style=HIDDEN, children=[
            html.Div(className="controls", children=[
                html.Label("step "), dcc.Input(id="step-input", type="number", debounce=True, min=0, step=1,
                                               placeholder="first warning", style={"width": "140px"}),
                dcc.RadioItems(id="seq-by", value="ppo_kl_k3_sum", inline=True, options=[
                    {"label": " largest k3 KL", "value": "ppo_kl_k3_sum"},
                    {"label": " negative-A low-IS", "value": "neg_adv_low_is"},
                    {"label": " lowest s_i", "value": "seq_ratio"}]),
            ]),
            html.Div(id="seq-info", className="muted"),
            html.Div(id="seq-table", className="seqtable"),
            dcc.Store(id="seq-selected"),
            html.Div(className="controls", children=[dcc.RadioItems(id="color-by", value="log_ratio", inline=True,
                options=[{"label": " colour by log ratio", "value": "log_ratio"},
                         {"label": " colour by KL contribution", "value": "kl"}])]),
            html.Div(id="seq-header"), html.Div(id="token-spans", className="tokens"), _graph("g-tokens"),
        ]),
        dcc.Interval(id="tick", interval=int(refresh_ms), n_intervals=0),
        dcc.Store(id="data-version", data=source.version),
        *fleet.stores(),
    ])

