"""``csv`` / ``jsonl``: a header-row CSV or one JSON object per line (any step column, ``--step-column``).
Nested JSON objects are flattened with "/" (``{"actor": {"entropy": 1}}`` -> ``actor/entropy``)."""
from __future__ import annotations

import csv
from pathlib import Path

from arldiag.importers.base import Importer, Rows, json_lines
from arldiag.nested import flatten


def read_csv(path: Path) -> Rows:
    with open(path, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            yield f"line {i}", row


def read_jsonl(path: Path) -> Rows:
    for i, obj in json_lines(path):
        yield f"line {i}", flatten(obj, "/")


def _is_csv(path: Path) -> bool:
    return path.suffix.lower() in (".csv", ".tsv")


def _is_jsonl(path: Path) -> bool:
    suffix = path.suffix.lower()
    return suffix in (".jsonl", ".ndjson") or (suffix == ".json" and path.name != "trainer_state.json")


IMPORTERS = (
    Importer("csv", "steps", read_csv, "a header-row CSV (.csv, .tsv)", guess=_is_csv),
    Importer("jsonl", "steps", read_jsonl, "one JSON object per line (.jsonl, .ndjson, .json)", guess=_is_jsonl),
)
