"""Offender sequences: one query for the sequence rows both UIs rank (the report's top offenders of a window, the
dashboard's worst sequences of a step), and the token rows of a few sequences.

``kl_share`` is a row's share of its step's k3 policy-update KL (every update and rank of the step): the denominator
of the step metrics' KL shares (neg_adv_low_is_kl_share, kl_top1pct_share), so a share read in the sequence
explorer and one read in the report or on a chart are the same number. The step filter is applied before the window
sum: it selects whole steps, so the share is unchanged and DuckDB never sums over the whole table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from arldiag.views._sql import columns, q, query, run_filter, table_rows

SEQ_COLUMNS = ["sample_id", "update", "rank", "group_id", "turn", "n_tokens", "advantage", "seq_ratio",
               "ppo_kl_k3_sum", "neg_adv_low_is", "reward", "success", "format_valid", "nonfinite"]
# ORDER BY of each ranking; the key columns break ties, so the same run always lists the same rows
ORDERS = {
    # why: the largest k3 contributors carry the policy-update KL (ARLArena: collapse is driven by few sequences)
    "ppo_kl_k3_sum": "ppo_kl_k3_sum desc nulls last",
    # the ARLArena negative-advantage low-IS set first, lowest sequence ratio first
    "neg_adv_low_is": "neg_adv_low_is desc nulls last, seq_ratio asc nulls last",
    "seq_ratio": "seq_ratio asc nulls last",
}


def sequence_rows(run: Any, steps: tuple[int, int] | None, by: str = "ppo_kl_k3_sum", where: str = "true",
                  params: Sequence[Any] = (), limit: int = 25, name: str | None = None,
                  cols: Sequence[str] = SEQ_COLUMNS) -> pd.DataFrame:
    """Sequence rows of steps [lo, hi] (all steps when None) matching ``where`` (SQL over the columns, with
    ``params``), ranked by ``by`` (a key of ORDERS), with ``step``, ``cols`` (null where the run lacks one),
    ``text`` and ``kl_share``. Empty (with those columns) when the run has no sequence rows."""
    if by not in ORDERS:
        raise ValueError(f"by must be one of {sorted(ORDERS)}, got {by!r}")
    want = ["step", *dict.fromkeys(c for c in cols if c != "step"), "text"]
    have = columns(run, "sequences")
    if "ppo_kl_k3_sum" not in have or "step" not in have:
        return pd.DataFrame(columns=want + ["kl_share"])
    sel = ", ".join(q(c) if c in have else f"null as {q(c)}" for c in want)
    cond, rparams = run_filter(name)
    rng, sparams = ("true", []) if steps is None else ("step between ? and ?", [int(steps[0]), int(steps[1])])
    ties = "".join(f", {q(c)}" for c in ("step", "update", "rank", "sample_id") if c in have)
    return query(run, f"""
        with s as (
            select {sel}, ppo_kl_k3_sum / nullif(sum(ppo_kl_k3_sum) over (partition by step), 0) as kl_share
            from sequences where {cond} and {rng})
        select * from s where {where} order by {ORDERS[by]}{ties} limit {max(1, int(limit))}""",
                 [*rparams, *sparams, *params])


def worst_sequences(run: Any, step: int, by: str = "ppo_kl_k3_sum", limit: int = 25) -> pd.DataFrame:
    """The step's worst sequence rows by ``by`` (a key of ORDERS), with each row's KL share and whether its token
    rows were kept (``has_tokens``). The dashboard's sequence explorer."""
    if by not in ORDERS:
        raise ValueError(f"by must be one of {sorted(ORDERS)}, got {by!r}")
    step, limit = int(step), max(1, min(int(limit), 500))
    df = sequence_rows(run, (step, step), by, limit=limit)
    df = df[SEQ_COLUMNS + ["kl_share"]].copy()
    df["has_tokens"] = False
    if len(df) and "sample_id" in columns(run, "tokens"):
        ids = [int(s) for s in df["sample_id"].unique()]
        kept = query(run, 'select distinct sample_id, "update", rank from tokens where step = $1 and '
                          'list_contains($2, sample_id)', [step, ids])
        keys = set(map(tuple, kept[["sample_id", "update", "rank"]].astype(int).to_numpy().tolist()))
        df["has_tokens"] = [(int(a), int(b), int(c)) in keys
                            for a, b, c in zip(df["sample_id"], df["update"], df["rank"])]
    return df


# ---------------------------------------------------------------- the report's offenders --------------------------


@dataclass
class Offender:
    step: int
    update: int
    sample_id: int
    advantage: float
    seq_ratio: float
    kl_k3_sum: float
    kl_share: float                     # share of its step's k3 policy-update KL
    neg_adv_low_is: bool
    n_tokens: int
    text: str | None = None
    tokens: pd.DataFrame | None = None  # pos, token_id, log_ratio (ordered by pos)
    source: str = "top KL"              # why it was picked: a detector name, "top KL" or "neg-adv low-IS"
    extra: dict = field(default_factory=dict)


_NEED = ("step", "update", "sample_id", "advantage", "seq_ratio", "ppo_kl_k3_sum", "neg_adv_low_is", "n_tokens")


def top_offenders(run: Any, name: str | None, steps: tuple[int, int] | None, n: int = 6,
                  pinned: Sequence[dict] = ()) -> list[Offender]:
    """The sequences that drove the window: those named by findings' evidence (``pinned``, dicts with step and
    sample_id), then the largest k3 policy-update KL contributors, half of them among the negative-advantage low-IS
    set (the ARLArena collapse driver); rows with a zero advantage are never picked by KL."""
    if table_rows(run, "sequences", name) == 0 or not all(c in columns(run, "sequences") for c in _NEED):
        return []
    frames, sources = [], []
    for p in list(pinned)[:n]:
        if "step" in p and "sample_id" in p:
            f = sequence_rows(run, (int(p["step"]), int(p["step"])), where="sample_id = ?",
                              params=[int(p["sample_id"])], limit=1, name=name)
            frames.append(f)
            sources += [str(p.get("source", "finding"))] * len(f)
    picks = (("neg_adv_low_is", max(1, n // 2), "neg-adv low-IS"),
             # a zero-advantage row has no gradient through the policy loss: it cannot have driven anything
             ("advantage <> 0", n, "top KL"))
    for where, limit, src in picks:
        f = sequence_rows(run, steps, where=where, limit=limit, name=name)
        frames.append(f)
        sources += [src] * len(f)
    out, seen = [], set()
    for row, src in zip(pd.concat(frames, ignore_index=True).itertuples(index=False), sources):
        key = (int(row.step), int(row.update), int(row.sample_id))
        if key in seen or len(out) >= n:
            continue
        seen.add(key)
        out.append(Offender(step=key[0], update=key[1], sample_id=key[2], advantage=_num(row.advantage),
                            seq_ratio=_num(row.seq_ratio), kl_k3_sum=_num(row.ppo_kl_k3_sum),
                            kl_share=_num(row.kl_share), neg_adv_low_is=bool(row.neg_adv_low_is),
                            n_tokens=int(row.n_tokens or 0),
                            text=None if row.text is None or isinstance(row.text, float) else str(row.text),
                            source=src))
    attach_tokens(run, name, out)
    return out


def _num(v: Any) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def attach_tokens(run: Any, name: str | None, offenders: list[Offender]) -> None:
    """One query for the token rows of all offenders (tokens are always kept for anomalous sequences)."""
    if not offenders or table_rows(run, "tokens", name) == 0:
        return
    steps = sorted({o.step for o in offenders})
    ids = sorted({o.sample_id for o in offenders})
    tid = "token_id" if "token_id" in columns(run, "tokens") else "-1 as token_id"
    cond, rparams = run_filter(name)
    df = query(run, f"""
        select step, "update", sample_id, pos, {tid}, log_ratio from tokens
        where {cond} and step in ({",".join("?" * len(steps))}) and sample_id in ({",".join("?" * len(ids))})
        order by step, "update", sample_id, pos""", rparams + steps + ids)
    for o in offenders:
        t = df[(df["step"] == o.step) & (df["update"] == o.update) & (df["sample_id"] == o.sample_id)]
        if not t.empty:
            o.tokens = t[["pos", "token_id", "log_ratio"]].reset_index(drop=True)


def token_labels(offender: Offender, decode: Callable[[int], str] | None = None) -> tuple[list[str], str]:
    """Display labels for an offender's tokens and how they were obtained:
    "decoded" (a tokenizer), "text" (the text split on whitespace has exactly one word per token),
    "ids" (token ids only) or "positions" (neither ids nor text recorded)."""
    t = offender.tokens
    if t is None or t.empty:
        return [], "none"
    ids = t["token_id"].to_numpy(dtype=np.int64)
    have_ids = bool((ids >= 0).all())
    if decode is not None and have_ids:
        return [decode(int(i)) for i in ids], "decoded"
    words = offender.text.split() if offender.text else []
    if words and len(words) == len(ids):
        return words, "text"
    if have_ids:
        return [f"#{int(i)}" for i in ids], "ids"
    return [f"@{int(p)}" for p in t["pos"].to_numpy()], "positions"


# ---------------------------------------------------------------- one sequence (dashboard explorer) ---------------

TOKEN_COLUMNS = ["pos", "turn", "token_id", "logp", "logp_old", "logp_rollout", "logp_ref", "entropy", "advantage",
                 "log_ratio", "sampled"]


def sequence_tokens(run: Any, step: int, sample_id: int, update: int, rank: int = 0) -> pd.DataFrame:
    """Token rows of one sequence row, ordered by position, with each token's k3 KL contribution r - log r - 1
    (log r = log_ratio) and its share of the sequence's sum."""
    have = columns(run, "tokens")
    if not have:
        return pd.DataFrame(columns=TOKEN_COLUMNS + ["kl_k3", "kl_share"])
    sel = ", ".join(q(c) if c in have else f"null as {q(c)}" for c in TOKEN_COLUMNS)
    df = query(run, f"""select {sel}, exp(log_ratio) - log_ratio - 1 as kl_k3 from tokens
                        where step = $1 and sample_id = $2 and "update" = $3 and rank = $4 order by pos""",
               [int(step), int(sample_id), int(update), int(rank)])
    tot = float(np.nansum(df["kl_k3"].to_numpy(float))) if len(df) else 0.0
    df["kl_share"] = df["kl_k3"] / tot if tot > 0 else 0.0
    return df


def sequence_row(run: Any, step: int, sample_id: int, update: int, rank: int = 0) -> dict[str, Any]:
    """The sequences row (as a dict) of one sample/update, or {} if absent."""
    if not columns(run, "sequences"):
        return {}
    df = query(run, 'select * from sequences where step = $1 and sample_id = $2 and "update" = $3 and rank = $4 '
                    'limit 1', [int(step), int(sample_id), int(update), int(rank)])
    return {} if df.empty else df.iloc[0].to_dict()
