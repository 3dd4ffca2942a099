"""The comparison in the report (--baseline: "Where the runs part", html, md and json) and in the dashboard's compare
mode (dotted lines on the panels that show a parted metric, listed in the overview note)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arldiag.diff.compare import diff_runs
from arldiag.report.build import build_report
from arldiag.report.cli import render
from arldiag.report.sections import SECTIONS, parting
from diff_runs import write_steps_run

import arldiag

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff_report")
    a = write_steps_run(root / "a", range(100), seed=1)
    b = write_steps_run(root / "b", range(100), seed=2,
                        planted=lambda m, s: 0.6 if m == "entropy" and s >= 40 else 0.0)
    return a, b


def test_report_section_in_every_format(pair):
    a, b = pair
    rep = build_report(str(a), baseline=str(b), progress=False)
    want = diff_runs(arldiag.open_run(a), arldiag.open_run(b))
    assert rep.main.parting.to_dict() == want.to_dict()
    assert parting in SECTIONS and SECTIONS.index(parting) == len(SECTIONS) - 1
    md, html = render(rep, "md"), render(rep, "html")
    assert "\n## Where the runs part\n" in md and 'id="parting"' in html and '<a href="#parting">' in html
    first = want.first
    assert first.metric == "entropy" and f"first to part: entropy at step {first.step}" in md
    assert f"| {first.step} | entropy |" in md
    assert "| config.seed | 1 | 2 |" in md
    j = json.loads(render(rep, "json"))
    assert j["parting"]["first_metric"] == "entropy" and j["parting"]["first_step"] == first.step
    assert j["baseline"]["parting"] is None


def test_no_baseline_no_section(pair):
    rep = build_report(str(pair[0]), progress=False)
    assert parting.build(rep) is None and rep.main.parting is None
    assert "Where the runs part" not in render(rep, "md")
    assert json.loads(render(rep, "json"))["parting"] is None


def test_report_of_runs_that_stay_together(tmp_path):
    a = write_steps_run(tmp_path / "a", range(100), seed=5)
    b = write_steps_run(tmp_path / "b", range(100), seed=6)
    md = render(build_report(str(a), baseline=str(b), progress=False), "md")
    assert "- no parting found" in md and "Partings by step" not in md


def test_dashboard_marks_the_partings_on_the_shared_panels(tmp_path):
    pytest.importorskip("dash")
    from arldiag.dashboards import views_series
    from arldiag.dashboards.figures import PARTING_COLOR
    from arldiag.dashboards.source import RunSource

    for n in ("cispo_lag1_lr4_s78", "cispo_lag1_lr4_auto_s78"):
        shutil.copytree(SAMPLES / n, tmp_path / n)
    src = RunSource(tmp_path)
    runs = ["cispo_lag1_lr4_s78", "cispo_lag1_lr4_auto_s78"]
    fig, note = views_series.render_panels(src, runs, "overview")
    d = diff_runs(*(arldiag.open_run(tmp_path / n) for n in runs))
    by_metric = {p.metric: p.step for p in d.partings}
    drawn = fig.layout.meta["partings"]
    assert drawn and all(by_metric[m] == s for m, s in drawn.items())
    lines = [s for s in fig.layout.shapes if s.type == "line" and s.line.color == PARTING_COLOR]
    assert sorted({s.x0 for s in lines}) == sorted(set(drawn.values()))
    # each line sits on the panel (subplot row) that shows its metric
    assert all(s.yref.endswith("domain") for s in lines)
    assert f"{d.first.metric} at {d.first.step}" in note and f"outcome eval_success at {d.outcome_step}" in note
    # one run: no comparison, no dotted line
    fig1, note1 = views_series.render_panels(src, runs[:1], "overview")
    assert "partings" not in fig1.layout.meta and "part" not in note1
