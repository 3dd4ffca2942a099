"""What an importer is, and the file readers several formats share.

A step importer's ``read(path)`` yields ``(where, row)``: ``where`` says where the row came from ("line 3",
"log_history[2]", "events file X, step 5") for error messages, ``row`` maps metric names (flattened with "/") to
values, the step included under the importer's ``step_column``. A rollout importer's ``read(path)`` returns
{step: [rows with prompt, completion and numeric columns]} for ``Collector.record_rollout``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

Rows = Iterator[tuple[str, dict[str, Any]]]
KINDS = ("steps", "rollout")


@dataclass(frozen=True)
class Importer:
    """One input format of `arldiag import`."""

    name: str                                   # the FORMAT argument
    kind: str                                   # "steps": step metrics; "rollout": rollout rows
    read: Callable[[Path], Any]                 # steps: Rows; rollout: {step: [row]}
    doc: str                                    # one line for the help and docs/integrations/importers.md
    guess: Callable[[Path], bool] | None = None  # True when a path looks like this format (no FORMAT given)
    step_column: str = "step"                   # the default of --step-column
    reads_folder: bool = False                  # PATH may be a folder (searched for this format's files)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"importer {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSON-lines file; blank lines skipped; a bad line is an error naming it."""
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


def parquet_rows(path: Path) -> Rows:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError for a bad file
        raise ValueError(f"file: {path} is not a readable Parquet file ({exc})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"row {i}", row
