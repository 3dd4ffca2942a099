"""``verl-jsonl``: verl's file logger (``trainer.logger=['file']``): ``{"step": N, "data": {metric: value}}`` per
line."""
from __future__ import annotations

from pathlib import Path

from arldiag.importers.base import Importer, Rows, json_lines
from arldiag.nested import flatten


def read_verl_jsonl(path: Path) -> Rows:
    for i, obj in json_lines(path):
        if "step" not in obj or not isinstance(obj.get("data"), dict):
            raise ValueError(f"file: line {i} of {path} is not a verl file-logger record "
                             f'(expected {{"step": N, "data": {{...}}}}, got keys {sorted(obj)[:6]})')
        yield f"line {i}", {"step": obj["step"], **flatten(obj["data"], "/")}


IMPORTERS = (Importer("verl-jsonl", "steps", read_verl_jsonl, "verl's file logger (trainer.logger=['file'])"),)
