"""numpy columns and Python rows -> Arrow tables for the run store, without ``pa.array``/``from_pylist`` (they probe
for pandas and import it, which would put pandas on the trainer's hot path).

Built from buffers, zero-copy where the dtype already matches. How each column of a table is converted (its kind and
numpy dtype) and the table's Arrow schema are worked out once per column list or schema and cached: the collector
builds a few tables per step with ~35 (sequences) to ~100 (steps) columns, and re-deriving the schema and the
per-column type tests on every call was a large part of the collector's fixed cost per update
(docs/integrations/overhead.md).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

_NP_TYPES = {pa.float32(): np.float32, pa.float64(): np.float64, pa.int16(): np.int16, pa.int32(): np.int32,
             pa.int64(): np.int64, pa.bool_(): np.bool_}
_CACHE_MAX = 256  # schemas kept (steps schemas differ by the trainer's metric names, normally a handful)


def _kind(typ: pa.DataType) -> tuple[str, Any]:
    """(kind, numpy dtype) of an Arrow column type: str, ts (timestamp), bool, float or int."""
    if typ == pa.string():
        return "str", None
    if pa.types.is_timestamp(typ):
        return "ts", np.int64
    if typ == pa.bool_():
        return "bool", np.bool_
    np_t = _NP_TYPES[typ]
    return ("float" if np.dtype(np_t).kind == "f" else "int"), np_t


class _Layout:
    """A table's schema and, per column, (name, type, kind, numpy dtype); for one-row tables also the columns
    grouped by type, so that a row is converted with one array per type."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.cols = [(f.name, f.type, *_kind(f.type)) for f in schema]
        groups: dict[pa.DataType, list[int]] = {}
        self.strings = []
        for i, (_, typ, kind, _) in enumerate(self.cols):
            if kind == "str":
                self.strings.append(i)
            else:
                groups.setdefault(typ, []).append(i)
        self.groups = [(typ, *_kind(typ), idx, [self.cols[i][0] for i in idx]) for typ, idx in groups.items()]


_LAYOUTS: dict[int, tuple[Any, _Layout]] = {}


def _layout(key: Any, make) -> _Layout:
    """Layout cached by the identity of ``key`` (a schema.Col list, module constants, or a cached pa.Schema; the
    key is kept alive with it, so its id cannot be reused)."""
    hit = _LAYOUTS.get(id(key))
    if hit is not None and hit[0] is key:
        return hit[1]
    lay = _Layout(make())
    if len(_LAYOUTS) >= _CACHE_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[id(key)] = (key, lay)
    return lay


_SCHEMAS: dict[tuple, pa.Schema] = {}


def cached_schema(key: tuple, make) -> pa.Schema:
    """One schema object per ``key`` (e.g. the steps table's trainer metric names), built by ``make()`` once."""
    sch = _SCHEMAS.get(key)
    if sch is None:
        if len(_SCHEMAS) >= _CACHE_MAX:
            _SCHEMAS.clear()
        sch = _SCHEMAS[key] = make()
    return sch


def bits(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def strings(values: list) -> pa.Array:
    """Arrow string array from Python strings (None = null), built from offset/data buffers."""
    enc = [b"" if x is None else str(x).encode() for x in values]
    offsets = np.zeros(len(enc) + 1, np.int32)
    np.cumsum([len(b) for b in enc], out=offsets[1:])
    miss = np.array([x is None for x in values], bool)
    validity = bits(~miss) if miss.any() else None
    return pa.Array.from_buffers(pa.string(), len(enc), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))],
                                 null_count=int(miss.sum()))


def _convert(v: np.ndarray, typ: pa.DataType, kind: str, np_t: Any) -> pa.Array:
    n = v.shape[0]
    if kind == "str":
        return strings(list(v))
    validity, nulls = None, 0
    if isinstance(v, np.ma.MaskedArray):
        miss = np.ma.getmaskarray(v)
        nulls = int(np.count_nonzero(miss))
        validity = bits(~miss) if nulls else None
        v = v.filled(0)
    if kind == "ts":
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(np.ascontiguousarray(v, np.int64))],
                                     null_count=nulls)
    if kind == "bool":
        return pa.Array.from_buffers(typ, n, [validity, bits(v.astype(bool, copy=False))], null_count=nulls)
    v = np.ascontiguousarray(v, dtype=np_t)
    if kind == "float" and validity is None:  # NaN -> null
        nan = np.isnan(v)
        nulls = int(np.count_nonzero(nan))
        if nulls:
            validity = bits(~nan)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(v)], null_count=nulls)


def _convert_block(mat: np.ndarray, typ: pa.DataType, kind: str, np_t: Any, miss: np.ndarray | None) -> list:
    """Columns of one type at once: ``mat`` [k, n] (row i = column i) -> k Arrow arrays, slices of one array built
    from two buffers. Converting column by column cost ~10 us each (a ~100-column step row, ~40-column sequences
    rows): one conversion and k slices cost a fraction of that. ``miss`` [k, n]: null entries (floats: also NaN)."""
    k, n = mat.shape
    if kind == "bool":
        data = bits(mat.reshape(-1).astype(bool, copy=False))
    else:
        flat = np.ascontiguousarray(mat, dtype=np_t).reshape(-1)
        if kind == "float":
            nan = np.isnan(flat)
            miss = nan if miss is None else miss.reshape(-1) | nan
        data = pa.py_buffer(flat)
    if miss is not None:
        miss = miss.reshape(-1)
        nulls = int(np.count_nonzero(miss))
    else:
        nulls = 0
    whole = pa.Array.from_buffers(typ, k * n, [bits(~miss) if nulls else None, data], null_count=nulls)
    return [whole.slice(i * n, n) for i in range(k)]


def np_to_arrow(v: np.ndarray, typ: pa.DataType) -> pa.Array:
    """Zero-copy numpy -> Arrow for primitive columns (NaN floats and masked entries become nulls)."""
    return _convert(v, typ, *_kind(typ))


def table(cols_spec: Sequence, cols: Mapping[str, Any], n: int) -> pa.Table:
    """Arrow table of ``n`` rows in the order of ``cols_spec`` (schema.Col list); absent columns become nulls."""
    lay = _layout(cols_spec, lambda: pa.schema([pa.field(c.name, c.type) for c in cols_spec]))
    arrays: list = [None] * len(lay.cols)
    blocks: dict[pa.DataType, list[int]] = {}  # numeric columns by type, converted together (_convert_block)
    for i, (name, typ, kind, np_t) in enumerate(lay.cols):
        v = cols.get(name)
        if v is None:
            arrays[i] = pa.nulls(n, typ)  # (unlike pa.array, pa.nulls does not import pandas)
        elif isinstance(v, (pa.Array, pa.ChunkedArray)):
            arrays[i] = v.cast(typ) if v.type != typ else v
        elif isinstance(v, list):
            arrays[i] = strings(v)
        elif kind == "str":
            arrays[i] = _convert(np.asarray(v), typ, kind, np_t)
        else:
            blocks.setdefault(typ, []).append(i)
    for typ, idx in blocks.items():
        _, _, kind, np_t = lay.cols[idx[0]]
        vals = [cols[lay.cols[i][0]] for i in idx]
        if len(idx) == 1:
            v = vals[0]
            arrays[idx[0]] = _convert(v if isinstance(v, np.ma.MaskedArray) else np.asarray(v), typ, kind, np_t)
            continue
        masked = any(isinstance(v, np.ma.MaskedArray) for v in vals)
        miss = np.stack([np.ma.getmaskarray(v) for v in vals]) if masked else None
        mat = np.stack([np.ma.getdata(v) for v in vals], dtype=np_t, casting="unsafe") if masked else \
            np.stack(vals, dtype=np_t, casting="unsafe")
        for i, arr in zip(idx, _convert_block(mat, typ, kind, np_t, miss)):
            arrays[i] = arr
    return pa.Table.from_arrays(arrays, schema=lay.schema)


def concat_columns(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Column dicts with the same keys (numpy arrays, masked arrays or lists of strings) joined row-wise, in order."""
    if len(parts) == 1:
        return dict(parts[0])
    out: dict[str, Any] = {}
    for name in parts[0]:
        vals = [p[name] for p in parts]
        if isinstance(vals[0], list):
            out[name] = [x for v in vals for x in v]
        elif any(isinstance(v, np.ma.MaskedArray) for v in vals):
            out[name] = np.ma.concatenate([np.ma.asarray(v) for v in vals])
        else:
            out[name] = np.concatenate([np.asarray(v) for v in vals])
    return out


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def rows_table(schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Table of Python rows (steps, alerts, actions rows): the values of each type are converted as one
    [rows, columns] array, then column by column. None (absent), and NaN in a non-float column, are nulls. The
    collector holds its step rows (~100 columns each) and converts them once per publish, not once per step. Pass
    the same schema object for the same columns (cached_schema) to reuse its layout."""
    lay = _layout(schema, lambda: schema)
    n = len(rows)
    cols: list = [None] * len(lay.cols)
    for typ, kind, np_t, idx, names in lay.groups:
        if kind == "float":  # NaN (and None) -> null in _convert_block
            # (numpy turns None into NaN for a float dtype)
            mat = np.array([[r.get(nm) for r in rows] for nm in names], dtype=np_t).reshape(len(names), n)
            miss = None
        else:
            vals = [[r.get(nm) for r in rows] for nm in names]
            miss = np.array([[_missing(v) for v in vs] for vs in vals], bool).reshape(len(names), n)
            mat = np.array([[0 if _missing(v) else v for v in vs] for vs in vals], dtype=np_t).reshape(len(names), n)
        for i, arr in zip(idx, _convert_block(mat, typ, kind, np_t, miss if kind != "float" else None)):
            cols[i] = arr
    for i in lay.strings:
        name = lay.cols[i][0]
        cols[i] = strings([None if _missing(r.get(name)) else r.get(name) for r in rows])
    return pa.Table.from_arrays(cols, schema=schema)


def row_table(schema: pa.Schema, row: Mapping[str, Any]) -> pa.Table:
    """One-row table (alerts, actions rows): rows_table of one row."""
    return rows_table(schema, [row])
