"""Fixtures for the report tests: a collapsing and a stable synthetic run written through the Collector, and a
step-only run written by `arldiag import`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # report_synth / report_browser helpers (no tests/__init__.py)

from report_synth import make_run, make_steps_csv  # noqa: E402


@pytest.fixture(scope="session")
def collapse_run(tmp_path_factory) -> str:
    return make_run(tmp_path_factory.mktemp("report") / "collapse", collapsing=True)


@pytest.fixture(scope="session")
def stable_run(tmp_path_factory) -> str:
    return make_run(tmp_path_factory.mktemp("report") / "stable", collapsing=False, seed=1)


@pytest.fixture(scope="session")
def steps_only_run(tmp_path_factory) -> str:
    from arldiag.commands.import_steps import import_steps

    d = tmp_path_factory.mktemp("report")
    csv = make_steps_csv(d / "steps.csv")
    import_steps(csv, str(d / "imported"), name="imported")
    return str(d / "imported")
