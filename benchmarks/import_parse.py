"""Would polars (or pandas) serve the importers' CSV/JSONL parsing? The current reader against both, in the same
process, on one large log made here.

The log: ROWS rows x COLS metric columns plus a step column, as a CSV and as JSON lines (the JSONL nests half the
metrics one level, ``{"actor": {"m1": ...}}``, as verl and TRL do). Like real logs, a few columns are sparse (a
validation score every 10th row), one holds text and one is empty.

Each path produces what the importer needs, ``{step: {metric: float}}`` and the never-numeric columns:
- ``current``: ``arldiag.importers.steps.load_steps`` over the format's reader (csv.DictReader / json + flatten);
- ``polars`` / ``pandas``: the file parsed by the library with every cell read as text (the only way to keep
  ``as_number``'s rules: " 1.5 ", "True", a column that mixes text and numbers), cast to float per column, then the
  same step table built from the columns.
The parse alone (file -> the library's frame, types inferred: the library's best case) is timed too, to tell the
parser from the per-cell work every path shares. Prints best-of-N seconds and ratios to ``current`` (< 1: faster).
``--whole-rows N`` also times the whole `arldiag import` of an N-row CSV (the table, the name plan and one
``Collector.record_step`` per step) against its ``load_steps`` part: the share a faster parser could save.

    python benchmarks/import_parse.py [--rows 200000] [--cols 60] [--repeat 2] [--whole-rows 20000]
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np


def write_logs(d: Path, rows: int, cols: int, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    names = [f"m{i}" for i in range(cols)]
    data = rng.standard_normal((rows, cols))
    sparse = [j for j in range(cols) if j % 10 == 3]
    csv_path, jsonl_path = d / "log.csv", d / "log.jsonl"
    with open(csv_path, "w") as fc, open(jsonl_path, "w") as fj:
        fc.write(",".join(["step"] + names + ["note", "empty"]) + "\n")
        for i in range(rows):
            vals = [("" if (j in sparse and i % 10) else repr(float(data[i, j]))) for j in range(cols)]
            fc.write(",".join([str(i)] + vals + ["warmup" if i < 10 else "", ""]) + "\n")
            flat = {n: float(data[i, j]) for j, n in enumerate(names) if not (j in sparse and i % 10)}
            obj = {"step": i, "actor": {k: v for k, v in flat.items() if int(k[1:]) % 2},
                   **{k: v for k, v in flat.items() if not int(k[1:]) % 2}, "note": "warmup" if i < 10 else None}
            fj.write(json.dumps(obj) + "\n")
    return csv_path, jsonl_path


def current(path: Path, fmt: str):
    from arldiag.importers import IMPORTERS
    from arldiag.importers.steps import load_steps

    got = load_steps(path, IMPORTERS[fmt], "step")
    return got.steps, got.never_numeric


def _as_float(values: list) -> list:
    from arldiag.importers.steps import as_number

    return [as_number(v) for v in values]


def _table(step: np.ndarray, columns: dict[str, np.ndarray]):
    """{step: {metric: float}} (later rows of a step update earlier ones; NaN from a null is skipped, as the
    current reader skips empty cells) and the columns without a numeric value. Filled column by column (one
    Python loop over the numeric cells); the keys of a step keep the column order."""
    steps = step.astype(np.int64).tolist()
    out: dict[int, dict[str, float]] = {s: {} for s in steps}
    never = set()
    for name, col in columns.items():
        ok = ~np.isnan(col)
        if not ok.any():
            never.add(name)
            continue
        for st, v in zip(step[ok].astype(np.int64).tolist(), col[ok].tolist()):
            out[st][name] = v
    return out, never


def _cast_text(col: list) -> np.ndarray:
    """A column of text cells -> float64 with as_number's rules (NaN where it gives None)."""
    return np.array([math.nan if x is None else x for x in _as_float(col)], dtype=np.float64)


def polars_csv(path: Path):
    import polars as pl

    df = pl.read_csv(path, infer_schema=False)  # every cell as text, as csv.DictReader gives it
    step = np.array([float(s) for s in df["step"].to_list()])
    cols = {}
    for c in df.columns:
        if c == "step":
            continue
        # the vectorised cast (strip, then Float64), with as_number's text rules on the cells it cannot read
        s = df[c].str.strip_chars()
        f = s.cast(pl.Float64, strict=False)
        low = s.str.to_lowercase()
        f = pl.select(pl.when(low == "true").then(1.0).when(low == "false").then(0.0).otherwise(f)).to_series()
        cols[c] = f.fill_null(math.nan).to_numpy()
    return _table(step, cols)


def pandas_csv(path: Path):
    import pandas as pd

    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    step = df["step"].astype(float).to_numpy()
    cols = {}
    for c in df.columns:
        if c == "step":
            continue
        s = df[c].str.strip()
        f = pd.to_numeric(s, errors="coerce")
        low = s.str.lower()
        f = f.where(low != "true", 1.0).where(low != "false", 0.0)
        cols[c] = f.to_numpy(dtype=np.float64, na_value=np.nan)
    return _table(step, cols)


def polars_jsonl(path: Path):
    import polars as pl

    df = pl.read_ndjson(path, infer_schema_length=None)
    while any(isinstance(t, pl.Struct) for t in df.dtypes):  # flatten nested objects with "/"
        df = df.select([pl.col(c).struct.rename_fields([f"{c}/{f.name}" for f in t.fields]).struct.unnest()
                        if isinstance(t, pl.Struct) else pl.col(c) for c, t in zip(df.columns, df.dtypes)])
    step = df["step"].cast(pl.Float64).to_numpy()
    cols = {c: (df[c].cast(pl.Float64).fill_null(math.nan).to_numpy() if df[c].dtype.is_numeric()
                else _cast_text(df[c].to_list())) for c in df.columns if c != "step"}
    return _table(step, cols)


def pandas_jsonl(path: Path):
    import pandas as pd

    df = pd.json_normalize([json.loads(line) for line in open(path)], sep="/")
    step = df["step"].astype(float).to_numpy()
    cols = {c: (df[c].to_numpy(dtype=np.float64, na_value=np.nan) if df[c].dtype.kind in "fiub"
                else _cast_text(df[c].where(df[c].notna(), None).tolist())) for c in df.columns if c != "step"}
    return _table(step, cols)


def parse_only(lib: str, path: Path):
    if lib == "polars":
        import polars as pl

        return pl.read_csv(path) if path.suffix == ".csv" else pl.read_ndjson(path)
    import pandas as pd

    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_json(path, lines=True)


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def _same(a, b) -> bool:
    (sa, na), (sb, nb) = a, b
    return na == nb and sa.keys() == sb.keys() and all(
        sa[k].keys() == sb[k].keys() and all(sa[k][m] == sb[k][m] for m in sa[k]) for k in sa)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--cols", type=int, default=60)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--whole-rows", type=int, default=20_000)
    args = p.parse_args(argv)
    import pandas  # noqa: F401 - imported before the clock starts
    import polars  # noqa: F401

    with tempfile.TemporaryDirectory() as d:
        csv_path, jsonl_path = write_logs(Path(d), args.rows, args.cols)
        print(f"{args.rows} rows x {args.cols} metrics: CSV {csv_path.stat().st_size / 1e6:.0f} MB, "
              f"JSONL {jsonl_path.stat().st_size / 1e6:.0f} MB; best of {args.repeat}")
        for fmt, path, paths in (("csv", csv_path, (polars_csv, pandas_csv)),
                                 ("jsonl", jsonl_path, (polars_jsonl, pandas_jsonl))):
            base, ref = best(lambda: current(path, fmt), args.repeat)
            print(f"{fmt:5s} current (load_steps)      {base:7.2f} s  1.00")
            for fn in paths:
                t, got = best(lambda: fn(path), args.repeat)
                print(f"{fmt:5s} {fn.__name__:<24s} {t:7.2f} s  {t / base:.2f}  same table: {_same(ref, got)}")
            for lib in ("polars", "pandas"):
                t, _ = best(lambda: parse_only(lib, path), args.repeat)
                print(f"{fmt:5s} {lib} parse only (typed)   {t:7.2f} s  {t / base:.2f}")
        if args.whole_rows:
            whole(Path(d), args.whole_rows, args.cols)
    return 0


def whole(d: Path, rows: int, cols: int) -> None:
    import contextlib
    import io

    from arldiag.commands.import_steps import import_steps

    (d / "w").mkdir()
    csv_path, _ = write_logs(d / "w", rows, cols)
    t_load, _ = best(lambda: current(csv_path, "csv"), 1)
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        import_steps(str(csv_path), str(d / "w" / "run"), keep_names=True)
    t_all = time.perf_counter() - t0
    print(f"whole import of {rows} rows x {cols} metrics: {t_all:.2f} s, of which load_steps {t_load:.2f} s "
          f"({100 * t_load / t_all:.0f} %)")


if __name__ == "__main__":
    raise SystemExit(main())
