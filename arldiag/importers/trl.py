"""TRL / transformers files.

- ``trl-state``: a ``trainer_state.json``: its ``log_history`` entries (the end-of-training summary with
  ``train_runtime`` is left out);
- ``trl-completions``: rollout data, not step metrics: TRL's ``completions/*.parquet`` (``log_completions=True``)
  rows become ``record_rollout`` calls (groups, rewards, texts).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arldiag.importers.base import Importer, Rows, parquet_rows


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
        rows = [r for _, r in parquet_rows(f)]
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


IMPORTERS = (
    Importer("trl-state", "steps", read_trl_state, "a transformers/TRL trainer_state.json (its log_history)",
             guess=lambda p: p.name == "trainer_state.json"),
    Importer("trl-completions", "rollout", read_trl_completions,
             "TRL's completions/*.parquet (log_completions=True): rollout rows", reads_folder=True),
)
