"""The few DuckDB helpers every view uses: parameterised queries, quoted identifiers, column checks and the run
filter (a view over several runs is narrowed to one with ``run = ?``; ``name=None`` reads the whole view)."""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd


def query(run: Any, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
    """Parameterised SQL on the run's DuckDB connection (views registered by open_run)."""
    return run.con.execute(sql, list(params)).df()


def q(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + str(name).replace('"', '""') + '"'


def columns(run: Any, table: str) -> list[str]:
    """Columns of a table's view; [] for a table the run has never written (it has no view, or an empty one)."""
    try:
        return list(run.columns(table))
    except Exception:  # noqa: BLE001 - a missing view reads as an empty table
        return []


def has_column(run: Any, table: str, col: str) -> bool:
    try:
        return bool(run.has_column(table, col))
    except Exception:  # noqa: BLE001 - a missing view has no columns
        return False


def run_filter(name: str | None) -> tuple[str, list]:
    """(SQL condition, params) selecting run ``name`` of the view; every row when ``name`` is None."""
    return ("true", []) if name is None else ("run = ?", [name])


def table_rows(run: Any, table: str, name: str | None = None) -> int:
    """Rows of ``table`` that belong to run ``name`` (0 when the view is missing or empty)."""
    try:
        if run.count(table) == 0:
            return 0
        cond, params = run_filter(name)
        return int(query(run, f"select count(*) as n from {table} where {cond}", params)["n"].iloc[0])
    except Exception:  # noqa: BLE001 - a view that does not exist for this store counts as empty
        return 0
