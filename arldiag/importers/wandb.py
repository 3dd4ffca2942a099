"""``wandb``: a wandb run history export, CSV or Parquet (``run.history()`` / ``run.scan_history()`` written to a
file): the step is ``_step``; wandb's own ``_runtime``/``_timestamp`` columns are left out."""
from __future__ import annotations

from pathlib import Path

from arldiag.importers.base import Importer, Rows, parquet_rows
from arldiag.importers.csv_jsonl import read_csv


def read_wandb(path: Path) -> Rows:
    """A wandb history export (CSV or Parquet). wandb's internal columns (``_runtime``, ``_timestamp``, ...) are
    dropped; ``_step`` is the step."""
    rows = parquet_rows(path) if path.suffix.lower() == ".parquet" else read_csv(path)
    for where, row in rows:
        yield where, {k: v for k, v in row.items() if k is not None and (k == "_step" or not k.startswith("_"))}


IMPORTERS = (Importer("wandb", "steps", read_wandb, "a wandb history export (CSV or Parquet)", step_column="_step"),)
