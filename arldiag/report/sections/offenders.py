"""Top offender sequences: the sequences that drove the build-up (arldiag.views.offenders), with their tokens
coloured by log ratio (HTML) or their largest |log r| tokens (Markdown)."""
from __future__ import annotations

import math

import numpy as np

from arldiag.report import text as T
from arldiag.report.blocks import Bullets, Heading, Item, Note, Pre, Section, Span, Text, Tokens
from arldiag.views.offenders import token_labels

ID, TITLE = "offenders", "Top offender sequences"
HTML, MD = ("html",), ("md",)


def _scale(offenders) -> float:
    """|log r| of full colour: the 95th percentile over every offender's tokens (at least 1e-3)."""
    lr = np.concatenate([o.tokens["log_ratio"].to_numpy(dtype=np.float64) for o in offenders
                         if o.tokens is not None] or [np.zeros(1)])
    lr = lr[np.isfinite(lr)]
    return max(float(np.quantile(np.abs(lr), 0.95)) if lr.size else 0.0, 1e-3)


def _tokens(o, decode, scale: float) -> tuple[Tokens | None, str]:
    labels, mode = token_labels(o, decode)
    if not labels:
        return None, mode
    lr = o.tokens["log_ratio"].to_numpy(dtype=np.float64)
    titles = [f"pos {int(p)} | id {int(i)} | log r = {T.num(x)}"
              for x, i, p in zip(lr, o.tokens["token_id"].to_numpy(), o.tokens["pos"].to_numpy())]
    return Tokens(labels, lr.tolist(), titles, scale, formats=HTML), mode


def _largest(o, decode, k: int = 8) -> str:
    """The k tokens with the largest |log-ratio|, as `label` (log r)."""
    labels, mode = token_labels(o, decode)
    if not labels:
        return T.LABEL_NOTES["none"]
    lr = o.tokens["log_ratio"].to_numpy(dtype=np.float64)
    order = np.argsort(-np.nan_to_num(np.abs(lr), nan=-1.0))[:k]
    return ", ".join(f"`{labels[i]}` ({T.num(lr[i], '.3g')})" for i in sorted(order)) + f" ({T.LABEL_NOTES[mode]})"


def _share(o) -> float:
    return o.kl_share * 100 if math.isfinite(o.kl_share) else o.kl_share


def build(report) -> Section:
    rep, decode = report.main, report.decode
    if not rep.offenders:
        return Section(ID, TITLE, [Note(T.offenders_missing(rep))], nav="offenders")
    scale = _scale(rep.offenders)
    blocks = [Text([f"Taken from {T.window_line(rep)}. Token colour: log-ratio lp - lp_old, ",
                    Span("r < 1", cls="tok tok-neg"), " ", Span("r > 1", cls="tok tok-pos"),
                    f", full colour at |log r| = {T.num(scale, '.3g')} (95th percentile); hover a token for its "
                    "value."],
                   formats=HTML),
              Text(f"From {T.window_line(rep)}.", formats=MD)]
    if report.decode_note:
        blocks.append(Note(report.decode_note))
    items = []
    for o in rep.offenders:
        toks, mode = _tokens(o, decode, scale)
        blocks += [Heading([f"step {o.step}, update {o.update}, sample {o.sample_id}",
                            *([" ", Span("neg-adv low-IS", strong=True)] if o.neg_adv_low_is else []), " ",
                            Span(f"(picked by: {o.source})", cls="muted")], level=4, formats=HTML),
                   Text(f"A = {T.num(o.advantage)}, s_i = {T.num(o.seq_ratio)}, k3 KL sum = {T.num(o.kl_k3_sum)} "
                        f"({T.num(_share(o), '.3g')} % of its step), {o.n_tokens} tokens", formats=HTML),
                   Pre(o.text, formats=HTML) if o.text else
                   Note("No text recorded for this sequence (record_rollout(texts=...)).", formats=HTML)]
        blocks += ([toks] if toks is not None else []) + [Text(T.LABEL_NOTES[mode], muted=True, formats=HTML)]
        text = [f"text: `{o.text[:300].replace('`', chr(39))}`"] if o.text else []
        items.append(Item(f"step {o.step}, update {o.update}, sample {o.sample_id}"
                          f"{' (neg-adv low-IS)' if o.neg_adv_low_is else ''}, picked by {o.source}: "
                          f"A = {T.num(o.advantage)}, s_i = {T.num(o.seq_ratio)}, {T.num(_share(o), '.3g')} % of its "
                          "step's KL", text + [f"largest |log r| tokens: {_largest(o, decode)}"]))
    blocks.append(Bullets(items, formats=MD))
    return Section(ID, TITLE, blocks, nav="offenders")


def data(rep) -> dict:
    return {"offenders": [{"step": o.step, "update": o.update, "sample_id": o.sample_id, "advantage": o.advantage,
                           "seq_ratio": o.seq_ratio, "kl_k3_sum": o.kl_k3_sum, "kl_share": o.kl_share,
                           "neg_adv_low_is": o.neg_adv_low_is, "source": o.source, "has_text": bool(o.text),
                           "n_token_rows": 0 if o.tokens is None else len(o.tokens)} for o in rep.offenders]}
