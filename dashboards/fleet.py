"""Fleet view: the table of every run under the root (arldiag.fleet rows), sortable and filterable, that the page
opens on; a click on a row opens that run's views below it.

The rows live on the server (``FleetRows``), one per run, each recomputed only when the run's files change
(source.run_signature), on the page's refresh tick. A row costs one replay of the run's steps, so a refresh tick
computes rows for at most ``budget_s`` seconds and leaves the rest "computing" for the next ticks: the table of a
large root fills in instead of holding the first paint. Rows are computed on their own short-lived connection, so
the runs listed here are not kept open (the views open the runs they show, source.RunSource.get).
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any, Callable

from dash import ALL, Input, Output, State, ctx, dcc, html
from dash.exceptions import PreventUpdate

import arldiag
from arldiag.dashboards.security import resolve_run
from arldiag.dashboards.source import RunSource, run_signature
from arldiag.fleet import COLUMNS, NUMERIC, cell_text, empty_row, error_row, run_row
from arldiag.levels import LEVELS, rank
from arldiag.store.reader import read_manifest
from arldiag.verdict import WORST_FIRST, verdict_rank

PENDING = "computing…"  # the verdict cell of a row not computed yet
# sort order of the categorical columns: by severity, not alphabetically
# (the verdict's order is arldiag.verdict.WORST_FIRST, the one the run view's default selection uses; a row that
# could not be read sorts above every verdict)
RANKS = {"state": {s: rank(s) for s in LEVELS},
         "verdict": {**{w: verdict_rank(w) for w in WORST_FIRST}, "error": len(WORST_FIRST)}}
# cell backgrounds by state / verdict: light tints (no saturated red: the overview's collapse line is the page's red)
TINTS = {"watch": "#fff6cc", "warning": "#ffe2bf", "critical": "#fbd3d3", "at risk": "#ffe2bf",
         "collapsed": "#fbd3d3", "declined": "#f3dcf3", "healthy": "#dcf2dc", "error": "#e6e6e6"}
SELECTED = "#e3ecfb"  # the row of the run shown below the table
DEFAULT_SORT = {"col": "name", "desc": False}
TABLE_STYLE = {"maxHeight": "45vh", "overflowY": "auto", "margin": "4px 0 10px 0", "display": "inline-block"}


def _default_opener(path: Path):
    return arldiag.open_run(path)


class FleetRows:
    """The fleet rows of a RunSource's runs, each cached until the run's files change."""

    def __init__(self, source: RunSource, opener: Callable[[Path], Any] | None = None, budget_s: float = 1.5):
        self.source = source
        self.opener = opener or _default_opener
        self.budget_s = float(budget_s)
        self.version = 0  # bumped whenever a row or the list of runs changed
        self._rows: dict[str, tuple[tuple | None, dict]] = {}  # name -> (signature, row); signature None: pending
        self._names: list[str] = []
        self._lock = threading.Lock()

    def refresh(self, names: list[str] | None = None) -> bool:
        """Recompute the rows of runs that changed (for up to ``budget_s``, at least one row); True if any row or
        the list of runs changed. A second caller while one refreshes returns False at once (the first one's rows
        are the same)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            names = list(self.source.names() if names is None else names)
            changed = names != self._names
            self._names = names
            for gone in set(self._rows) - set(names):
                del self._rows[gone]
                changed = True
            deadline = time.monotonic() + self.budget_s
            computed = 0
            for name in names:
                try:
                    path = resolve_run(self.source.root, name)
                except (ValueError, OSError):  # removed since it was listed
                    continue
                sig = run_signature(path)
                old = self._rows.get(name)
                if old is not None and old[0] == sig:
                    continue
                if computed and time.monotonic() > deadline:  # the next tick goes on from here
                    if old is None:
                        self._rows[name] = (None, self._pending(name, path))
                        changed = True
                    continue
                self._rows[name] = (sig, self._compute(name, path))
                computed += 1
                changed = True
            if changed:
                self.version += 1
            return changed
        finally:
            self._lock.release()

    def rows(self) -> list[dict]:
        """The rows, in the source's order (most recently written first)."""
        rows = dict(self._rows)  # a copy: another request may be refreshing
        return [rows[n][1] for n in list(self._names) if n in rows]

    def row(self, name: str) -> dict | None:
        """The row of run ``name`` (the name the browser sends), None before it was listed."""
        got = dict(self._rows).get(name)
        return None if got is None else got[1]

    def pending(self) -> int:
        return sum(1 for sig, _ in dict(self._rows).values() if sig is None)

    def _label(self, name: str, path: Path) -> str:
        return path.name if name == "." else name  # the root itself is a run: show its folder's name

    def _pending(self, name: str, path: Path) -> dict:
        try:
            algo = read_manifest(path).get("algorithm")
        except (OSError, ValueError):
            algo = None
        row = empty_row(self._label(name, path), str(path), algo)
        row.update(id=name, verdict=PENDING, steps=None)
        return row

    def _compute(self, name: str, path: Path) -> dict:
        try:
            run = self.opener(path)
        except Exception as exc:  # noqa: BLE001 - a broken run is a row saying so, not a broken page
            row = error_row(self._label(name, path), path, exc)
        else:
            try:
                row = run_row(run, run.names[0], label=self._label(name, path))
            finally:
                close = getattr(run, "close", None)
                if callable(close):
                    close()
        row["id"] = name  # the name the browser sends back when the row is clicked
        return row


# ---------------------------------------------------------------------------------------------- filter and sort
def _matches(row: dict, token: str) -> bool:
    col, sep, want = token.partition(":")
    keys = [k for k, h in COLUMNS if col in (k, h.replace(" ", "_"))] if sep and want else []
    if keys:
        return any(want in cell_text(k, row.get(k)).lower() for k in keys)
    return any(token in cell_text(k, row.get(k)).lower() for k, _ in COLUMNS)


def filter_rows(rows: list[dict], text: str | None) -> list[dict]:
    """The rows holding every whitespace-separated word of ``text`` (case-insensitive) in some cell; a word
    ``column:value`` (``verdict:collapsed``, ``state:warn``, ``first_warning:12``) must be in that column."""
    words = str(text or "").lower().split()
    return [r for r in rows if all(_matches(r, w) for w in words)]


def sort_rows(rows: list[dict], col: str | None, desc: bool = False) -> list[dict]:
    """Rows ordered by one column (numbers as numbers, state and verdict by severity), blanks last either way."""
    if col not in {k for k, _ in COLUMNS}:
        return list(rows)
    ranks = RANKS.get(col)

    def key(r: dict):
        v = r.get(col)
        if ranks is not None:
            v = ranks.get(v)
        elif col in NUMERIC:
            v = v if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) else None
        else:
            v = None if v in (None, "") else str(v).lower()
        return v

    present = [r for r in rows if key(r) is not None]
    blank = [r for r in rows if key(r) is None]
    return sorted(present, key=key, reverse=bool(desc)) + blank


def view_rows(rows: list[dict], text: str | None, sort: dict | None) -> list[dict]:
    sort = sort or DEFAULT_SORT
    return sort_rows(filter_rows(rows, text), sort.get("col"), bool(sort.get("desc")))


def summary(shown: list[dict], total: list[dict], root_name: str) -> str:
    counts: dict[str, int] = {}
    for r in total:
        counts[r.get("verdict") or "no steps"] = counts.get(r.get("verdict") or "no steps", 0) + 1
    by = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -RANKS["verdict"].get(kv[0], -1)))
    head = f"{len(total)} run(s) under {root_name}" if len(shown) == len(total) else \
        f"{len(shown)} of {len(total)} run(s) under {root_name} match the filter"
    return head + (f" · {by}" if by else "")


# ---------------------------------------------------------------------------------------------- components
def _sort_label(header: str, key: str, sort: dict | None) -> str:
    sort = sort or DEFAULT_SORT
    return header + ((" ▼" if sort.get("desc") else " ▲") if sort.get("col") == key else "")


def body_rows(rows: list[dict], selected: str | None = None) -> list:
    """One clickable html.Tr per run (pattern-matching id: the run's name); the run the views show is shaded."""
    out = []
    for r in rows:
        cells = []
        for k, _ in COLUMNS:
            v = r.get(k)
            style = {"textAlign": "right" if k in NUMERIC else "left"}
            if k in ("state", "verdict") and v in TINTS:
                style["background"] = TINTS[v]
            text = cell_text(k, v)
            if k == "verdict" and r.get("error"):
                cells.append(html.Td(text, style=style, title=str(r["error"])))
                continue
            cells.append(html.Td(html.B(text) if k == "name" else text, style=style))
        mark = {"className": "seqrow fleetrow selected", "style": {"background": SELECTED}} \
            if r["id"] == selected else {"className": "seqrow fleetrow"}  # seqrow: the page's clickable-row style
        out.append(html.Tr(cells, id={"type": "fleet-row", "index": r["id"]}, n_clicks=0, title=f"open {r['id']}",
                           **mark))
    return out


def section(root_name: str, lead: Any = None) -> html.Div:
    """The fleet block of the page: a filter box, the table (headers sort), a summary line; ``lead``: a component
    shown first on the filter's line (the page title). Filled by callbacks."""
    th_style = {"position": "sticky", "top": "0", "background": "#f4f4f4", "zIndex": 1}
    button = {"border": "none", "background": "none", "font": "inherit", "fontWeight": "bold", "cursor": "pointer",
              "padding": "0"}
    head = html.Thead(html.Tr([
        html.Th(html.Button(_sort_label(h, k, DEFAULT_SORT), id={"type": "fleet-sort", "index": k}, n_clicks=0,
                            style=button, title=f"sort by {h}"),
                style={**th_style, "textAlign": "right" if k in NUMERIC else "left"}) for k, h in COLUMNS]))
    return html.Div(id="view-fleet", children=[
        html.Div(className="controls", children=[
            *([lead] if lead is not None else []),
            html.B("runs"),
            dcc.Input(id="fleet-filter", type="text", debounce=False, placeholder="filter runs",
                      style={"width": "320px"}),
            html.Span(id="fleet-summary", className="muted", children=f"reading the runs under {root_name} ..."),
        ]),
        html.Div(style=TABLE_STYLE, children=[
            html.Table(id="fleet-table", className="seqs", children=[head, html.Tbody(id="fleet-body")])]),
        html.Div(style={"fontSize": "12px"}, className="muted",
                 children="Click a run to open it below; click a header to sort. Filter words match any cell, "
                          "column:value one column (verdict:collapsed, state:critical)."),
    ])


def stores() -> list:
    """The fleet's browser-side state: the rows' version shown, the sort order, the last run opened."""
    return [dcc.Store(id="fleet-version", data=-1), dcc.Store(id="fleet-sort", data=dict(DEFAULT_SORT)),
            dcc.Store(id="fleet-opened")]


# ---------------------------------------------------------------------------------------------- callbacks
def register(app, source: RunSource, fleet: FleetRows) -> None:
    @app.callback(Output("fleet-version", "data"), Input("tick", "n_intervals"), State("fleet-version", "data"))
    def refresh(_n, version):
        # every tick: rows of the runs whose files changed (and of new runs) are recomputed
        fleet.refresh()
        if version == fleet.version:
            raise PreventUpdate
        return fleet.version

    @app.callback(Output("fleet-body", "children"), Output("fleet-summary", "children"),
                  Output({"type": "fleet-sort", "index": ALL}, "children"),
                  Input("fleet-version", "data"), Input("fleet-filter", "value"), Input("fleet-sort", "data"),
                  Input("run-select", "value"))
    def render(version, text, sort, selected):
        if version is None or version < 0:
            raise PreventUpdate
        return render_table(fleet, text, sort, source.root.name or str(source.root),
                            selected if isinstance(selected, str) else None)

    @app.callback(Output("fleet-sort", "data"), Input({"type": "fleet-sort", "index": ALL}, "n_clicks"),
                  State("fleet-sort", "data"), prevent_initial_call=True)
    def sort_by(_clicks, sort):
        if not isinstance(ctx.triggered_id, dict) or not ctx.triggered or not ctx.triggered[0]["value"]:
            raise PreventUpdate
        col = str(ctx.triggered_id["index"])
        sort = sort or DEFAULT_SORT
        return {"col": col, "desc": (not sort.get("desc")) if sort.get("col") == col else False}

    # allow_duplicate: the run view's default selection (callbacks.register_selection) sets the run as well
    @app.callback(Output("run-select", "value", allow_duplicate=True), Output("tabs", "value", allow_duplicate=True),
                  Input({"type": "fleet-row", "index": ALL}, "n_clicks"), prevent_initial_call=True)
    def open_run(_clicks):
        # fires also when the rows are rebuilt (every n_clicks 0): only a real click opens a run
        if not isinstance(ctx.triggered_id, dict) or not ctx.triggered or not ctx.triggered[0]["value"]:
            raise PreventUpdate
        name = source.valid([str(ctx.triggered_id["index"])])
        if not name:
            raise PreventUpdate
        return name[0], "overview"

    # bring the opened run's views into sight (the fleet table sits above them)
    app.clientside_callback(
        """function(clicks) {
            if (!(clicks || []).some(c => c)) { return window.dash_clientside.no_update; }
            const t = document.getElementById('run-header');
            if (t) { t.scrollIntoView({block: 'start'}); }
            return Date.now();
        }""",
        Output("fleet-opened", "data"), Input({"type": "fleet-row", "index": ALL}, "n_clicks"),
        prevent_initial_call=True)


def render_table(fleet: FleetRows, text: str | None, sort: dict | None, root_name: str,
                 selected: str | None = None) -> tuple[list, str, list]:
    """(body rows, summary line, header labels) of the fleet table as filtered and sorted in the browser;
    ``selected``: the run the views below show (its row is shaded)."""
    rows = fleet.rows()
    shown = view_rows(rows, text, sort)
    note = summary(shown, rows, root_name)
    if fleet.pending():
        note += f" · {fleet.pending()} still computing"
    return body_rows(shown, selected), note, [_sort_label(h, k, sort) for k, h in COLUMNS]

