"""`arldiag query RUN "SQL"`: run SQL over the run's DuckDB views and print the result."""
from __future__ import annotations

import sys

from arldiag.store.reader import open_run


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory, a root of runs, or a glob")
    p.add_argument("sql", help="SQL over the views tokens, sequences, turns, groups, steps, steps_raw, alerts")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    p.add_argument("--limit", type=int, default=None, help="print at most this many rows")


def main(args) -> int:
    import duckdb

    run = open_run(args.run)
    try:
        rel = run.sql(args.sql)
    except duckdb.Error as exc:
        print(f"arldiag query: {exc}", file=sys.stderr)
        return 2
    if rel is None:
        return 0
    if args.limit is not None:
        rel = rel.limit(args.limit)
    df = rel.df()
    if args.format == "csv":
        df.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        sys.stdout.write(df.to_json(orient="records", date_format="iso") + "\n")
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200):
            print(df.to_string(index=False) if len(df) else "(no rows)")
    return 0
