"""Would polars serve the read side's frames? pandas vs polars on the work arldiag.views does in Python, in the same
process, on the same DuckDB table.

What the views pull into Python is the ``steps`` view (one row per step, ~150 metric columns; everything bulk stays
in DuckDB). The report then finds the columns holding data and reads each as a finite (step, value) series. The
paths below do exactly that: DuckDB -> frame (``.df()``, or arrow -> ``polars.from_arrow``), then per column a
float64 numpy array with the non-finite values dropped. Prints best-of-N seconds and the ratios to pandas (< 1:
faster); a pyarrow-only path tells the DuckDB -> pandas conversion apart from what polars itself adds.

With ``--heatmap-tokens N`` it also prices the heatmap's range rule (arldiag.views.heatmap): the token heatmap of a
run with N token rows (benchmarks/dashboard_speed.write_big_run) with the q99 pass against the same histogram with
the range given, as the dashboard's former std-based rule did without reading the token rows.

    python benchmarks/views_frames.py [--steps 20000] [--cols 150] [--repeat 5] [--heatmap-tokens 2000000]
"""
from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np


def _table(con, steps: int, cols: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    names = [f"m{i}" for i in range(cols)]
    data = {"step": np.arange(steps, dtype=np.int64)}
    for i, n in enumerate(names):
        v = rng.standard_normal(steps)
        if i % 7 == 0:
            v[rng.random(steps) < 0.3] = np.nan  # sparse columns (a validation score every few steps)
        data[n] = v
    import pandas as pd

    con.register("src", pd.DataFrame(data))
    con.execute("create table steps as select * from src")
    return names


def _pandas(con, names) -> int:
    import pandas as pd

    df = con.execute("select * from steps order by step").df()
    x = df["step"].to_numpy(np.int64)
    kept = 0
    for c in names:
        y = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isfinite(y)
        kept += int(x[ok].size)
    return kept


def _polars(con, names) -> int:
    import polars as pl

    df = pl.from_arrow(con.sql("select * from steps order by step").to_arrow_table())
    x = df["step"].to_numpy()
    kept = 0
    for c in names:
        y = df[c].cast(float).fill_null(np.nan).to_numpy()
        ok = np.isfinite(y)
        kept += int(x[ok].size)
    return kept


def _arrow(con, names) -> int:
    """The same through pyarrow alone: tells the DuckDB -> pandas conversion apart from polars itself."""
    t = con.sql("select * from steps order by step").to_arrow_table()
    x = t.column("step").to_numpy()
    kept = 0
    for c in names:
        y = t.column(c).to_numpy().astype(np.float64)  # nulls come back as NaN
        ok = np.isfinite(y)
        kept += int(x[ok].size)
    return kept


def best(fn, *args, repeat: int) -> float:
    """Best of ``repeat`` wall times of fn(*args), seconds."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t)
    return min(out)


def heatmap_cost(n_tokens: int, repeat: int) -> None:
    import sys
    import tempfile
    from pathlib import Path

    import arldiag
    from arldiag.views.heatmap import ratio_heatmap

    sys.path.insert(0, str(Path(__file__).parent))
    from dashboard_speed import write_big_run

    with tempfile.TemporaryDirectory() as d:
        write_big_run(Path(d) / "big", n_tokens, 200)
        run = arldiag.open_run(Path(d) / "big")
        limit = ratio_heatmap(run, "tokens", max_x=200).limit
        for table in ("sequences", "tokens"):
            auto = best(lambda: ratio_heatmap(run, table, max_x=200), repeat=repeat)
            given = best(lambda: ratio_heatmap(run, table, max_x=200, limit=limit), repeat=repeat)
            print(f"{table} heatmap ({n_tokens:,} token rows): range rule {auto:.3f} s, range given {given:.3f} s, "
                  f"ratio {auto / given:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--cols", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--heatmap-tokens", type=int, default=0)
    a = ap.parse_args()
    con = duckdb.connect()
    names = _table(con, a.steps, a.cols)
    assert _pandas(con, names) == _polars(con, names) == _arrow(con, names)  # the same values kept
    tp, tl, ta = (best(f, con, names, repeat=a.repeat) for f in (_pandas, _polars, _arrow))
    print(f"steps frame {a.steps} x {a.cols}: pandas {tp:.4f} s, polars {tl:.4f} s, pyarrow {ta:.4f} s; "
          f"polars / pandas {tl / tp:.2f}, pyarrow / pandas {ta / tp:.2f}")
    if a.heatmap_tokens:
        heatmap_cost(a.heatmap_tokens, a.repeat)


if __name__ == "__main__":
    main()
