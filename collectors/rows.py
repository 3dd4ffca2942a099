"""The row buffer of the collector: the rows of the run store's tables held between publishes, converted to one
Arrow table per table when they are handed to the writer (hold / release), the token-row selection (token
sample rate, anomalous and top-KL sequences), and the publish cadence (``flush_every`` steps or ``flush_every_s``).

Held rows are numpy columns: the conversion's cost is mostly per column (~40 columns), so once per publish instead
of once per update or step (docs/integrations/overhead.md); the writer buffers until the publish anyway, so nothing
is lost that a crash would not have lost before.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from arldiag.collectors.align import AlignedUpdate
from arldiag.collectors.arrow_rows import cached_schema, concat_columns, rows_table, table as _table
from arldiag.schema import TABLE_COLUMNS, TABLES, USER_METRIC_PREFIX, arrow_schema
from arldiag.stats import splitmix_unit
from arldiag.store.writer import PART_ROWS, StoreWriter

# held rows (all tables) that make the collector convert and hand them over before the next publish: bounds the
# memory of the numpy columns kept between publishes on steps with many rows (the token rows of a large step)
HOLD_ROWS = 65_536


class RowBuffer:
    """Rows of one rank held for the writer (None: the store could not be opened, rows are dropped)."""

    def __init__(self, writer: StoreWriter | None, rank: int, token_sample_rate: float, flush_every: int,
                 flush_every_s: float):
        self.writer, self.rank, self.token_sample_rate = writer, rank, token_sample_rate
        self.flush_every, self.flush_every_s = flush_every, flush_every_s
        self.held: dict[str, list[tuple[dict, int]]] = {}
        self.held_rows = 0
        # finalised steps' rows, converted to one Arrow table when they are published (a ~100-column row cost more
        # to convert on its own than its step's statistics on small steps); the trainer metric names seen, in order
        self.step_rows: list[dict[str, Any]] = []
        self.step_user: dict[str, None] = {}
        self.steps_since_flush = 0
        self.last_flush = time.monotonic()

    def put(self, table: str, data: pa.Table) -> None:
        if self.writer is not None:  # write failures are reported (once) by the writer itself
            self.writer.put(table, data)

    def add_step(self, row: dict[str, Any], user: Sequence[str]) -> None:
        """Hold a finalised step's row (``user``: its trainer metric names); the held rows go first when they are
        past HOLD_ROWS or the step rows fill a part."""
        if self.held_rows >= HOLD_ROWS:
            self.release_held()
        if self.writer is None:
            return
        self.step_rows.append(row)
        for k in user:
            self.step_user.setdefault(k)
        if len(self.step_rows) >= PART_ROWS["steps"]:  # the writer's part size: it publishes them at once
            self.release_held()
            self.release_steps()

    def step_done(self) -> None:
        """Publish every ``flush_every`` finalised steps or ``flush_every_s`` seconds, whichever comes first."""
        self.steps_since_flush += 1
        if self.writer is not None and (self.steps_since_flush >= self.flush_every
                                        or time.monotonic() - self.last_flush >= self.flush_every_s):
            self.steps_since_flush = 0
            self.last_flush = time.monotonic()
            self.release_held()
            self.release_steps()
            self.writer.flush()

    def hold(self, table: str, cols: dict, n: int) -> None:
        """Keep ``n`` rows of ``table`` (columns named as in its schema.TABLE_COLUMNS; fresh arrays, not changed
        afterwards) for the next publish (release_held)."""
        if self.writer is not None and n:
            self.held.setdefault(table, []).append((cols, n))
            self.held_rows += n

    def release_held(self) -> None:
        """Convert the held rows to one table per table (per set of columns given) and hand them to the writer."""
        held, self.held, self.held_rows = self.held, {}, 0
        for table in TABLES:  # the writer publishes in this order too: a step's rows before its step row
            parts = held.get(table)
            if not parts:
                continue
            by_cols: dict[tuple, list] = {}
            for cols, n in parts:
                by_cols.setdefault(tuple(cols), []).append((cols, n))
            tables = [_table(TABLE_COLUMNS[table], concat_columns([c for c, _ in same]), sum(n for _, n in same))
                      for same in by_cols.values()]
            self.put(table, pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0])

    def release_steps(self) -> None:
        """Hand the held step rows to the writer as one table (schema: the raw columns + every trainer metric seen;
        a row without one of them has a null there, as the writer's concatenation of one-row tables gave)."""
        rows, self.step_rows = self.step_rows, []
        user, self.step_user = tuple(self.step_user), {}
        if rows:
            self.put("steps", rows_table(cached_schema(("steps",) + user, lambda: _steps_schema(user)), rows))

    def keys(self, n: int, step, update) -> dict[str, np.ndarray]:
        """Key columns of ``n`` rows; ``step`` and ``update`` are one value or one per row ([n])."""
        upd = np.full(n, update, np.int32) if np.ndim(update) == 0 else update.astype(np.int32, copy=False)
        st = np.full(n, step, np.int64) if np.ndim(step) == 0 else step.astype(np.int64, copy=False)
        return {"step": st, "update": upd, "rank": np.full(n, self.rank, np.int32)}

    def emit(self, preps: list[AlignedUpdate], res) -> None:
        """Hold the sequences, turns and tokens rows of ``preps`` (their rows stacked in this order in ``res``)."""
        if len(preps) == 1:
            pr = preps[0]
            B = pr.inp.mask.shape[0]
            step, update, sid, sizes, rcols, turn, texts = pr.step, pr.update, pr.sid, pr.sizes, pr.cols, pr.turn, \
                pr.texts
        else:
            Bs = [pr.inp.mask.shape[0] for pr in preps]
            B = sum(Bs)
            step = np.repeat(np.array([pr.step for pr in preps], np.int64), Bs)
            update = np.concatenate([np.broadcast_to(np.asarray(pr.update, np.int32), (n,)) for pr, n in zip(preps, Bs)])
            sid = np.concatenate([pr.sid for pr in preps])
            sizes = [n for pr in preps for n in pr.sizes]
            rcols = concat_columns([pr.cols for pr in preps])
            turn = None if preps[0].turn is None else np.concatenate([pr.turn for pr in preps])
            texts = None if preps[0].texts is None else [t for pr in preps for t in pr.texts]
        seq = res.seq
        cols = dict(seq)
        cols.update(self.keys(B, step, update))
        cols["sample_id"] = sid
        cols.update(rcols)
        if cols.get("turn") is not None and (seq["turn"] < 0).all() and turn is not None:
            cols["turn"] = turn
        keep = np.flatnonzero(res.nonempty)  # samples with no (finite) token carry no statistics
        if texts is not None:
            cols["text"] = [texts[i] for i in keep.tolist()]
        cols = {k: (v if isinstance(v, list) else np.asarray(v)[keep] if not isinstance(v, np.ma.MaskedArray)
                    else v[keep]) for k, v in cols.items()}
        self.hold("sequences", cols, keep.size)

        tr = res.turn
        if tr is not None and tr["row"].size:
            r = tr["row"]
            tcols = {k: v for k, v in tr.items() if k != "row"}
            tcols.update(self.keys(r.size, step if np.ndim(step) == 0 else step[r],
                                    update if np.ndim(update) == 0 else update[r]))
            tcols["sample_id"] = sid[r]
            self.hold("turns", tcols, r.size)

        self.tokens(step, update, sizes, sid, res)

    def tokens(self, step, update, sizes, sid, res) -> None:
        """Token rows of the sampled, anomalous and top-1% KL samples; ``sizes``: rows per update of the batch."""
        rate = self.token_sample_rate
        seq_k3 = res.seq_k3
        B = sid.shape[0]
        sampled = splitmix_unit(sid) < rate if rate < 1.0 else np.ones(B, bool)
        keep = sampled | res.anomalous
        start = 0
        for nb in sizes:  # always keep the top-1% KL contributors of each update
            seg = seq_k3[start:start + nb]
            fin = np.isfinite(seg)
            if nb and fin.any():
                k = max(1, int(np.ceil(0.01 * nb)))
                keep[start + np.argpartition(np.where(fin, seg, -np.inf), nb - k)[nb - k:]] = True
            start += nb
        if not keep.any():
            return
        tok = res.token_rows(keep)  # only the kept rows leave the device
        r = tok["rows"]
        n = r.size
        cols = self.keys(n, step if np.ndim(step) == 0 else step[r], update if np.ndim(update) == 0 else update[r])
        cols.update(sample_id=sid[r], pos=tok["pos"].astype(np.int32), turn=tok["turn"], logp=tok["logp"],
                    logp_old=tok["logp_old"], advantage=tok["advantage"],
                    log_ratio=tok["log_ratio"].astype(np.float32), sampled=sampled[r])
        for name in ("logp_rollout", "logp_ref", "entropy"):
            if tok[name] is not None:
                cols[name] = tok[name].astype(np.float32, copy=False)
        for name in ("token_id", "token_id_rollout"):
            cols[name] = tok[name].astype(np.int32) if tok[name] is not None else np.full(n, -1, np.int32)
        self.hold("tokens", cols, n)


def _steps_schema(user: Sequence[str]) -> pa.Schema:
    """The raw steps columns plus one float64 column per trainer metric."""
    schema = arrow_schema("steps")
    for k in user:
        schema = schema.append(pa.field(USER_METRIC_PREFIX + k, pa.float64()))
    return schema
