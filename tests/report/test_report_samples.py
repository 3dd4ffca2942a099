"""Reports of the committed sample runs (sample_runs/*): verdict consistent with the detectors' collapse label,
recommendations exactly when something fired, HTML under 10 MB. Skipped while the folder holds no run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
RUNS = sorted(p.parent for p in SAMPLES.glob("*/run.json")) if SAMPLES.is_dir() else []


@pytest.mark.skipif(not RUNS, reason="no sample runs committed yet")
@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_sample_run_report(run_dir, tmp_path):
    import arldiag
    from arldiag.detectors import collapse_step, detect
    from arldiag.report.cli import write_report

    run = arldiag.open_run(str(run_dir))
    name = run.names[0]
    collapse = collapse_step(run)[name]
    fired = [f for f in detect(run) if f.fired]
    j = json.loads(Path(write_report(str(run_dir), str(tmp_path / "r.json"), progress=False)).read_text())
    assert j["collapse_step"] == collapse
    assert (j["verdict"] == "collapsed") == (collapse is not None)
    assert bool(j["recommendations"]) == bool(fired)
    md = Path(write_report(str(run_dir), str(tmp_path / "r.md"), progress=False)).read_text()
    assert f"**{j['verdict'].upper()}**" in md
    html = Path(write_report(str(run_dir), str(tmp_path / "r.html"), progress=False))
    assert html.stat().st_size < 10_000_000
