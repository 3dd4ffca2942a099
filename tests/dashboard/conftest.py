"""Fixtures for the dashboard tests: small synthetic runs written through the public Collector API."""
from __future__ import annotations

from pathlib import Path

import pytest

from synthetic_runs import write_steps


@pytest.fixture()
def runs_root(tmp_path: Path) -> Path:
    """A root with two runs: root/alpha (12 steps) and root/sweep/beta (30 steps whose policy-update ratios widen:
    the detectors fire on it), the newest."""
    write_steps(tmp_path / "alpha", range(12), seed=1)
    write_steps(tmp_path / "sweep" / "beta", range(30), seed=2, drift=0.01)
    return tmp_path
