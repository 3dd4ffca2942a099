"""Step-only runs for the diff tests, written through the public Collector API (a module of its own, not
conftest.py, so that no other folder's conftest shadows it)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import arldiag

# metric -> (level, per-point noise sd) of a stationary run
LEVELS = {"success_rate": (0.5, 0.08), "entropy": (1.2, 0.05), "grad_norm": (0.8, 0.2), "response_length_mean": (120.0, 6.0)}


def write_steps_run(path: Path, steps: Sequence[int], seed: int,
                    planted: Callable[[str, int], float] | None = None, config: dict | None = None) -> Path:
    """A run logging LEVELS' metrics at ``steps`` with independent normal noise (the same stationary process for every
    seed); ``planted(metric, step)`` adds a shift."""
    rng = np.random.default_rng(seed)
    with arldiag.Collector(path, config=config or {"synthetic": True, "seed": seed}, name=path.name) as col:
        for step in steps:
            m = {k: lv + sd * rng.normal() + (planted(k, step) if planted else 0.0) for k, (lv, sd) in LEVELS.items()}
            m["grad_norm"] = abs(m["grad_norm"])
            col.record_step(int(step), metrics=m)
    return path
