"""Readers of other tools' logs, for `arldiag import FORMAT PATH --out RUN`.

A step reader is a pure function ``read(path) -> Iterator[(where, row)]``: ``where`` says where the row came from
("line 3", "log_history[2]", "events file X, step 5") for error messages, ``row`` maps metric names (flattened with
"/") to values, the step included under the format's step column. They are registered in ``STEP_READERS`` with that
step column; `arldiag import` turns the rows into ``Collector.record_step`` calls.

- ``csv`` / ``jsonl``: a header-row CSV or one JSON object per line (any step column, ``--step-column``);
- ``verl-jsonl``: verl's file logger (``trainer.logger=['file']``): ``{"step": N, "data": {metric: value}}`` per line;
- ``trl-state``: a transformers/TRL ``trainer_state.json``: its ``log_history`` entries (the end-of-training
  summary with ``train_runtime`` is left out);
- ``tensorboard``: event files (a file or a folder searched recursively), read with TensorBoard's own loader:
  simple-value scalars and rank-0 tensors;
- ``wandb``: a wandb run history export, CSV or Parquet (``run.history()`` / ``run.scan_history()`` written to a
  file): the step is ``_step``; wandb's own ``_runtime``/``_timestamp`` columns are left out.

``trl-completions`` is rollout data, not step metrics (``read_trl_completions``): TRL's ``completions/*.parquet``
(``log_completions=True``) rows become ``record_rollout`` calls (groups, rewards, texts).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Iterator

from arldiag.nested import flatten

Rows = Iterator[tuple[str, dict[str, Any]]]


def read_csv(path: Path) -> Rows:
    with open(path, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            yield f"line {i}", row


def _json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"file: line {i} of {path} is not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"file: line {i} of {path} is not a JSON object")
            yield i, obj


def read_jsonl(path: Path) -> Rows:
    for i, obj in _json_lines(path):
        yield f"line {i}", flatten(obj, "/")


def read_verl_jsonl(path: Path) -> Rows:
    for i, obj in _json_lines(path):
        if "step" not in obj or not isinstance(obj.get("data"), dict):
            raise ValueError(f"file: line {i} of {path} is not a verl file-logger record "
                             f'(expected {{"step": N, "data": {{...}}}}, got keys {sorted(obj)[:6]})')
        yield f"line {i}", {"step": obj["step"], **flatten(obj["data"], "/")}


def read_trl_state(path: Path) -> Rows:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"file: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") \
            from None
    hist = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(hist, list):
        raise ValueError(f"file: {path} has no log_history list (is it a transformers trainer_state.json?)")
    for i, entry in enumerate(hist):
        if not isinstance(entry, dict):
            raise ValueError(f"file: log_history[{i}] of {path} is not an object")
        if "train_runtime" in entry:  # the end-of-training summary, not a step
            continue
        yield f"log_history[{i}]", entry


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)
    if not files:
        raise ValueError(f"file: no TensorBoard event files (*tfevents*) under {path}")
    return files


def tfrecords(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(record number, byte offset, payload) of a TFRecord file (an event file's framing: uint64 length, masked
    CRC32C of the length, payload, masked CRC32C of the payload). A truncated or corrupt record is an error naming
    the file, the record and its offset: TensorBoard's own loader stops there silently, since it expects files that
    are still being written."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data = path.read_bytes()
    pos, n = 0, 0
    while pos < len(data):
        n += 1
        where = f"file: {path}, record {n} at byte {pos}"
        if pos + 12 > len(data):
            raise ValueError(f"{where}: truncated header (not a complete TensorBoard event file)")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc32c(header) != crc:
            raise ValueError(f"{where}: length checksum mismatch (corrupt, or not a TensorBoard event file)")
        end = pos + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{where}: truncated record ({length} bytes announced)")
        payload = data[pos + 12:end]
        (crc,) = struct.unpack("<I", data[end:end + 4])
        if masked_crc32c(payload) != crc:
            raise ValueError(f"{where}: data checksum mismatch (corrupt record)")
        yield n, pos, payload
        pos = end + 4


def read_tensorboard(path: Path) -> Rows:
    """Scalars of every event file under ``path``: simple values and rank-0 tensors (TensorBoard's v2 scalar
    format); the tag is the metric name."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.util import tensor_util
    except ImportError:
        raise ValueError("format: reading TensorBoard files needs the tensorboard package "
                         "(pip install 'arldiag[import]')") from None
    for f in _event_files(path):
        for n, pos, payload in tfrecords(f):
            try:
                event = Event.FromString(payload)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
                raise ValueError(f"file: {f}, record {n} at byte {pos}: not an Event ({exc})") from None
            if not event.HasField("summary"):
                continue
            row: dict[str, Any] = {}
            for v in event.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    row[v.tag] = float(v.simple_value)
                elif kind == "tensor":
                    arr = tensor_util.make_ndarray(v.tensor)
                    if arr.ndim == 0 and arr.dtype.kind in "fiub":
                        row[v.tag] = float(arr)
            if row:
                row["step"] = int(event.step)
                yield f"{f.name} record {n}", row


def _read_parquet_rows(path: Path) -> Rows:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError for a bad file
        raise ValueError(f"file: {path} is not a readable Parquet file ({exc})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"row {i}", row


def read_wandb(path: Path) -> Rows:
    """A wandb history export (CSV or Parquet). wandb's internal columns (``_runtime``, ``_timestamp``, ...) are
    dropped; ``_step`` is the step."""
    rows = _read_parquet_rows(path) if path.suffix.lower() == ".parquet" else read_csv(path)
    for where, row in rows:
        yield where, {k: v for k, v in row.items() if k is not None and (k == "_step" or not k.startswith("_"))}


# format -> (reader, default step column)
STEP_READERS: dict[str, tuple[Callable[[Path], Rows], str]] = {
    "csv": (read_csv, "step"),
    "jsonl": (read_jsonl, "step"),
    "verl-jsonl": (read_verl_jsonl, "step"),
    "trl-state": (read_trl_state, "step"),
    "tensorboard": (read_tensorboard, "step"),
    "wandb": (read_wandb, "_step"),
}
FORMATS = tuple(STEP_READERS) + ("trl-completions",)


def read_trl_completions(path: Path) -> dict[int, list[dict[str, Any]]]:
    """step -> rows of TRL's completions Parquet files (a file or the ``completions`` folder). TRL writes the last
    generation batch at every logging step, so a batch repeated unchanged at a later step (a reused batch:
    num_iterations > 1) is kept only at the step that first logged it."""
    files = [path] if path.is_file() else sorted(path.glob("*.parquet"))
    if not files:
        raise ValueError(f"file: no Parquet files in {path}")
    out: dict[int, list[dict[str, Any]]] = {}
    last_key = None
    for f in files:
        rows = [r for _, r in _read_parquet_rows(f)]
        if not rows:
            continue
        missing = [c for c in ("step", "prompt", "completion") if c not in rows[0]]
        if missing:
            raise ValueError(f"file: {f} lacks the TRL completions column(s) {missing} (has {sorted(rows[0])})")
        key = tuple((str(r["prompt"]), str(r["completion"])) for r in rows)
        if key == last_key:
            continue
        last_key = key
        for r in rows:
            out.setdefault(int(r["step"]), []).append(r)
    return out
