"""Background Parquet writer for the run store.

One thread per Collector drains a bounded queue of Arrow tables, buffers them per table and publishes parts
atomically: each part is written to ``<name>.parquet.tmp`` and renamed (``os.replace``), or on object storage
uploaded in one PUT (store/location.py), so a reader (DuckDB globs ``*.parquet``) never sees a partial file, and a crash loses at most the rows not yet flushed. Each rank writes its
own files (``rank00003-part000017.parquet``): no coordination is needed to write.

Write errors (unwritable directory, full disk) never reach the training loop: the writer warns once, keeps the
rows for a retry at the next flush (bounded), and counts what it had to drop. With ``strict=True`` the error is
re-raised at the caller's next call instead.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa

from arldiag.schema import TABLES
from arldiag.store.location import StoreRoot, write_json_atomic

log = logging.getLogger("arldiag")

PART_RE = re.compile(r"rank(\d+)-part(\d+)\.parquet$")
# Rows buffered per table before a part is published even without a flush request.
PART_ROWS = {"tokens": 2_000_000, "sequences": 500_000, "turns": 500_000, "groups": 200_000, "steps": 50_000,
             "alerts": 10_000, "actions": 10_000}
MAX_RETRY_FACTOR = 4  # keep at most this many parts' worth of failed rows for retry, then drop (counted)


def parquet_options(table: str, schema: pa.Schema) -> dict[str, Any]:
    """Encodings tuned for the bulk token rows: no dictionary on float columns (high-cardinality floats make
    dictionaries useless and slow), BYTE_STREAM_SPLIT for floats (groups exponent bytes so zstd compresses them),
    dictionary for small-cardinality ints (step, update, rank, turn), LZ4 (benchmarks/collector_throughput.py:
    on 7.9 M token rows LZ4 wrote 11.8 M rows/s at 18.3 B/row against zstd(1)'s 9.0 M rows/s at 17.3 B/row and
    the defaults' 5.1 M rows/s at 23.8 B/row). The small tables use zstd(1), with BYTE_STREAM_SPLIT for their
    floats too (on the 17 compacted sample runs: sequences 24.3 -> 18.2 MB, turns 6.8 -> 5.3 MB)."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    if table != "tokens":
        return {"compression": "zstd", "compression_level": 1,
                "use_dictionary": [f.name for f in schema if f.name not in floats],
                "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in floats}}
    dict_cols = [f.name for f in schema if f.name in ("step", "update", "rank", "turn", "sampled")]
    return {
        "compression": "lz4",
        "use_dictionary": dict_cols,
        "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in floats},
        "write_statistics": ["step", "update", "sample_id"],
        "row_group_size": 1 << 20,
        "data_page_size": 1 << 20,
    }


def next_part_numbers(root: "Path | StoreRoot", rank: int) -> dict[str, int]:
    """Continue part numbering after what is already stored (a resumed run appends, never overwrites)."""
    loc = root if isinstance(root, StoreRoot) else StoreRoot(root)
    out = {}
    for t in TABLES:
        n = 0
        for name in loc.list_names(t):
            m = PART_RE.search(name)
            if m and int(m.group(1)) == rank:
                n = max(n, int(m.group(2)))
        out[t] = n + 1
    return out


class StoreWriter:
    """Thread-backed writer. ``put`` enqueues (blocks when the queue is full: back-pressure, never data loss);
    ``flush(wait=True)`` publishes everything buffered; ``close`` flushes and stops the thread."""

    def __init__(self, root: "str | Path | StoreRoot", rank: int = 0, queue_size: int = 64, strict: bool = False):
        self.loc = root if isinstance(root, StoreRoot) else StoreRoot(root)
        self.root = self.loc.url or Path(self.loc.path)
        self.rank = rank
        self.strict = strict
        self.error: BaseException | None = None       # pending error to raise (strict mode only)
        self.last_error: BaseException | None = None  # last write failure, kept for diagnostics
        self.dropped_rows = 0
        self.written_rows: dict[str, int] = {t: 0 for t in TABLES}
        self.bytes_written = 0
        self._warned = False
        self._parts = next_part_numbers(self.loc, rank)
        self._buf: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
        self._buf_rows: dict[str, int] = {t: 0 for t in TABLES}
        self._q: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name=f"arldiag-writer-{rank}", daemon=True)
        self._closed = False
        self._thread.start()

    # ------------------------------------------------------------------ caller side
    def put(self, table: str, data: pa.Table) -> None:
        self._raise_if_strict()
        if self._closed:
            raise RuntimeError("StoreWriter is closed")
        if data.num_rows:
            self._q.put(("data", table, data))

    def flush(self, wait: bool = False) -> None:
        self._raise_if_strict()
        ev = threading.Event() if wait else None
        self._q.put(("flush", None, ev))
        if ev is not None:
            ev.wait()
        self._raise_if_strict()

    def close(self) -> None:
        if self._closed:
            return
        ev = threading.Event()
        self._q.put(("flush", None, ev))
        self._q.put(("stop", None, None))
        self._closed = True
        self._thread.join()
        self._raise_if_strict()

    def _raise_if_strict(self) -> None:
        if self.strict and self.error is not None:
            err, self.error = self.error, None
            raise RuntimeError(f"arldiag: writing the run store under {self.root} failed: {err}") from err

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            kind, table, payload = self._q.get()
            if kind == "stop":
                return
            if kind == "data":
                self._buf[table].append(payload)
                self._buf_rows[table] += payload.num_rows
                if self._buf_rows[table] >= PART_ROWS[table]:
                    # the tables before it too: parts go out in TABLES order (a step's rows before its step row),
                    # which is what lets a reader that lists in reverse order see whole steps (store/reader.py)
                    for t in TABLES[:TABLES.index(table) + 1]:
                        if self._buf_rows[t]:
                            self._publish(t)
            else:  # flush
                for t in TABLES:
                    if self._buf_rows[t]:
                        self._publish(t)
                if payload is not None:
                    payload.set()

    def _publish(self, table: str) -> None:
        parts = self._buf[table]
        try:
            data = pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]
            size = self.loc.write_parquet(f"{table}/rank{self.rank:05d}-part{self._parts[table]:06d}.parquet",
                                          data, **parquet_options(table, data.schema))
        except Exception as exc:  # noqa: BLE001 - the writer must never take the trainer down
            self._on_error(table, exc)
            return
        self._parts[table] += 1
        self.written_rows[table] += data.num_rows
        self.bytes_written += size
        self._buf[table] = []
        self._buf_rows[table] = 0

    def _on_error(self, table: str, exc: BaseException) -> None:
        self.last_error = exc
        if self.strict:
            self.error = exc
        if not self._warned:
            self._warned = True
            msg = (f"arldiag: could not write the run store under {self.root} ({type(exc).__name__}: {exc}); "
                   "training continues, rows are kept for a retry and dropped (counted) if it keeps failing")
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
        # keep a bounded backlog for the next flush
        while self._buf_rows[table] > MAX_RETRY_FACTOR * PART_ROWS[table] and self._buf[table]:
            dropped = self._buf[table].pop(0)
            self._buf_rows[table] -= dropped.num_rows
            self.dropped_rows += dropped.num_rows
