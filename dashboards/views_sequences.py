"""Sequence explorer: a step's worst sequences, then one sequence's tokens coloured by log ratio or KL contribution."""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
from dash import html

from arldiag.dashboards import detectors_bridge, figures, queries
from arldiag.dashboards.source import RunSource
from arldiag.views._sql import table_rows

TABLE_COLUMNS = [  # (id, header, format digits or None)
    ("sample_id", "sample", None), ("update", "update", None), ("rank", "rank", None), ("group_id", "group", None),
    ("n_tokens", "tokens", None), ("advantage", "A", 4), ("seq_ratio", "s_i", 4), ("ppo_kl_k3_sum", "k3 sum", 4),
    ("kl_share", "KL share", 3), ("neg_adv_low_is", "neg-A low-IS", None), ("reward", "reward", 3),
    ("has_tokens", "tokens kept", None),
]
MAX_TOKEN_SPANS = 4096  # longer sequences show their first tokens as spans (the bar chart shows all)


def _cell(v: Any, digits: int | None) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if digits is not None:
        return round(float(v), digits)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def resolve_step(source: RunSource, name: str, step: Any) -> int | None:
    """The step the user picked; when none was, the first step whose alert state reached warning (where the
    build-up shows), else the last step with a non-zero-advantage sequence row (a collapsed run's last steps hold
    only zero-advantage rows), else the last step."""
    return resolve_default(source, name, step)[0]


def resolve_default(source: RunSource, name: str, step: Any) -> tuple[int | None, str]:
    """(step, why it was chosen) -- see resolve_step."""
    if step not in (None, ""):
        try:
            return int(float(step)), ""
        except (TypeError, ValueError):
            raise ValueError(f"step must be an integer, got {step!r}") from None
    t, _ = source.cached(name, ("timeline",), detectors_bridge.timeline)
    if t is not None and len(t):
        warn = t[t["state"].astype(str).isin(("warning", "critical"))]
        if len(warn):
            return int(warn["step"].min()), "first warning"
    last = source.cached(name, ("last_signal_step",), queries.last_signal_step)
    if last is not None:
        return last, "last step with non-zero advantages"
    _, hi, _ = source.cached(name, ("step_range",), queries.step_range)
    return hi, "latest"


def has_sequences(source: RunSource, name: str) -> bool:
    """Whether the run holds sequence rows (record_rollout / record_update); an imported log holds step metrics only,
    so the explorer has nothing to show for it."""
    return source.cached(name, ("has_sequences",), lambda run: table_rows(run, "sequences") > 0)


def no_sequences_text(name: str) -> str:
    return (f"{name} has no sequence rows to inspect: it holds step metrics only (an imported log, a trainer "
            "that calls only record_step) or its sequence files could not be read.")


def render_table(source: RunSource, name: str, step: Any, by: str) -> tuple[list[dict], str]:
    """(DataTable rows, info line) for the worst sequences of ``step`` (the last step when None)."""
    s, why = resolve_default(source, name, step)
    if s is None:
        return [], "no steps recorded yet"
    df = source.cached(name, ("worst", s, by), lambda run: queries.worst_sequences(run, s, by))
    if df.empty:
        return [], f"step {s}: no sequence rows"
    rows = [{c: _cell(r.get(c), d) for c, _, d in TABLE_COLUMNS}
            | {"step": s, "id": row_key(s, r["sample_id"], r["update"], r["rank"])} for r in df.to_dict("records")]
    pick = "" if step not in (None, "") else f" ({why}; click a chart point or type a step)"
    return rows, f"step {s}{pick}: {len(rows)} worst sequence rows by {by}; click a row to see its tokens"


def row_key(step: Any, sample_id: Any, update: Any, rank: Any) -> str:
    return f"{int(step)}:{int(sample_id)}:{int(update)}:{int(rank)}"


def parse_row_key(key: str) -> dict[str, int]:
    """Inverse of row_key; ValueError for anything else (the key comes back from the browser)."""
    parts = str(key).split(":")
    if len(parts) != 4:
        raise ValueError(f"sequence key must be 'step:sample_id:update:rank', got {key!r}")
    try:
        return dict(zip(("step", "sample_id", "update", "rank"), map(int, parts)))
    except ValueError:
        raise ValueError(f"sequence key must hold integers, got {key!r}") from None


def table_component(rows: list[dict]) -> Any:
    """Clickable table of the worst sequences: each row is an html.Tr with a pattern-matching id."""
    if not rows:
        return html.Div("no sequence rows", className="muted")
    head = html.Thead(html.Tr([html.Th(h) for _, h, _ in TABLE_COLUMNS]))
    body = html.Tbody([html.Tr([html.Td(r[c]) for c, _, _ in TABLE_COLUMNS], id={"type": "seq-row", "index": r["id"]},
                               n_clicks=0, className="seqrow") for r in rows])
    return html.Table([head, body], className="seqs")


def render_tokens(source: RunSource, name: str, row: Mapping[str, Any] | None, color_by: str
                  ) -> tuple[list, list, Any]:
    """(header, token spans, per-position figure) of one sequence row of the table."""
    if not row:
        return [html.Span("Select a sequence in the table.", className="muted")], [], \
            figures.message_figure("no sequence selected", height=160)
    try:
        step, sid, upd, rank = (int(row[k]) for k in ("step", "sample_id", "update", "rank"))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"row must carry integer step, sample_id, update and rank, got {row!r}") from None
    toks = source.cached(name, ("tokens", step, sid, upd, rank),
                         lambda run: queries.sequence_tokens(run, step, sid, upd, rank))
    seq = source.cached(name, ("seqrow", step, sid, upd, rank),
                        lambda run: queries.sequence_row(run, step, sid, upd, rank))
    header = [html.B(f"step {step} · sample {sid} · update {upd} · rank {rank}"),
              html.Span(f"  A = {_fmt(seq.get('advantage'))}, s_i = {_fmt(seq.get('seq_ratio'))}, "
                        f"k3 sum = {_fmt(seq.get('ppo_kl_k3_sum'))}, tokens = {seq.get('n_tokens', '?')}",
                        className="muted")]
    if seq.get("text"):
        header.append(html.Pre(str(seq["text"])[:2000], className="seqtext"))
    if toks.empty:
        rate = source.cached(name, ("manifest",), lambda run: dict(getattr(run, "manifest", {}) or {})
                             ).get("token_sample_rate")
        note = html.Div(f"The tokens of this sequence were not sampled (token_sample_rate = {rate}); only its "
                        "sequence-level values are stored.", className="notice", id="tokens-not-sampled")
        return header + [note], [], figures.message_figure("tokens not sampled", height=160)
    kept = "hash-sampled" if bool(toks["sampled"].fillna(False).any()) else "kept because the sequence is anomalous"
    header.append(html.Div(f"{len(toks)} token rows ({kept}); colour: "
                           + ("log r_t = lp - lp_old (blue < 0 < red)" if color_by == "log_ratio"
                              else "k3 KL contribution r - log r - 1 (share of the sequence's sum)"),
                           className="muted"))
    return header, token_spans(toks, color_by), figures.token_figure(toks, color_by)


def token_spans(toks, color_by: str) -> list:
    col = "log_ratio" if color_by == "log_ratio" else "kl_k3"
    t = toks.head(MAX_TOKEN_SPANS)
    colors = figures.token_colors(t[col].to_numpy(float), color_by)
    spans = []
    for (pos, tid, turn, lr, kl, share), c in zip(
            t[["pos", "token_id", "turn", "log_ratio", "kl_k3", "kl_share"]].itertuples(index=False), colors):
        label = str(int(tid)) if tid is not None and not _isnan(tid) and int(tid) >= 0 else f"#{int(pos)}"
        spans.append(html.Span(label, className="tok", style={"backgroundColor": c},
                               title=f"pos {pos}, turn {turn}, log r {_fmt(lr)}, k3 {_fmt(kl)} "
                                     f"({_fmt(100 * share if share == share else share)}% of the sequence)"))
    return spans


def _isnan(x: Any) -> bool:
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return False


def _fmt(x: Any) -> str:
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return "-"
