"""`arldiag train --auto-stabilize module:function` on a tiny run: a policy forced to act at step 2 acts, the
actions land in the run store with their trigger, and the report and the dashboard show them."""
from __future__ import annotations

import json

import pytest

POLICY = '''
from arldiag.stabilize import Action

def fire_at_two(s):
    """Forced: at step 2, whatever the alert state, every lever at once."""
    if s.step != 2:
        return []
    why = "test: forced at step 2"
    return [Action("lr_scale", {"factor": 0.5}, "test_finding", why), Action("rollback", {}, "test_finding", why),
            Action("nalis_mask", {"delta": 0.01}, "test_finding", why), Action("clip", {"factor": 0.5}, "", why)]
'''
TINY = ["--algo", "cispo", "--env", "sokoban", "--init", "scratch", "--steps", "4", "--n-tasks", "2",
        "--group-size", "2", "--hidden-size", "16", "--n-layers", "1", "--max-new-tokens", "3", "--max-turns", "2",
        "--eval-every", "0", "--room-size", "5", "--max-walls", "0", "--token-sample-rate", "0.5", "--lr", "1e-3",
        "--threads", "1"]


@pytest.fixture(scope="module")
def stabilized_run(tmp_path_factory):
    from arldiag.cli import main

    root = tmp_path_factory.mktemp("stab")
    (root / "forced_policy.py").write_text(POLICY)
    import sys

    sys.path.insert(0, str(root))
    try:
        assert main(["train", *TINY, "--out", str(root / "run"), "--auto-stabilize", "forced_policy:fire_at_two"]) == 0
    finally:
        sys.path.remove(str(root))
    return root / "run"


def test_the_actions_are_in_the_run_store_with_their_trigger(stabilized_run):
    import arldiag

    run = arldiag.open_run(str(stabilized_run))
    try:
        acts = run.df("select step, action, params, detector, state, reason, policy, outcome from actions order by time")
        steps = run.df("select step, lr from steps order by step")
    finally:
        run.close()
    # applied in the fixed order (rollback first), all after step 2, each with the policy and its trigger
    assert list(acts["action"]) == ["rollback", "nalis_mask", "clip", "lr_scale"]
    assert set(acts["step"]) == {2} and set(acts["policy"]) == {"forced_policy:fire_at_two"}
    assert list(acts["detector"]) == ["test_finding", "test_finding", "", "test_finding"]
    assert json.loads(acts["outcome"].iloc[0]) == {"to_step": 0}  # the ok checkpoint taken at step 0
    assert json.loads(acts["params"].iloc[1]) == {"delta": 0.01}
    # cispo: eps_low 1.0 -> 0.5, eps_high 0.2 -> 0.1
    clip = json.loads(acts["outcome"].iloc[2])
    assert clip["after"] == {"clip_low": 0.5, "clip_high": 0.1} and clip["before"] == {"clip_low": 1.0, "clip_high": 0.2}
    assert json.loads(acts["params"].iloc[3]) == {"factor": 0.5, "lr": 5e-4}
    # the step metric lr: 1e-3 until the action, 5e-4 from step 3 on
    assert list(steps["lr"]) == pytest.approx([1e-3, 1e-3, 1e-3, 5e-4])
    with open(stabilized_run / "run.json") as fh:
        assert json.load(fh)["config"]["auto_stabilize"] == "forced_policy:fire_at_two"


def test_the_report_shows_the_actions(stabilized_run):
    from arldiag.report.build import build_report
    from arldiag.report.html import render_html
    from arldiag.report.jsonout import render_json
    from arldiag.report.markdown import render_markdown

    rep = build_report(str(stabilized_run), progress=False)
    md = render_markdown(rep)
    assert "### Actions taken (auto-stabilize)" in md
    assert "applied 4 actions: rollback at step 2 (test_finding, state ok)" in md
    html = render_html(rep)
    assert 'id="actions"' in html and html.count("<td>rollback</td>") == 1
    assert "rollback+nalis_mask+clip+lr_scale 2" in html  # the timeline marker's label
    data = json.loads(render_json(rep))
    assert [a["action"] for a in data["actions"]] == ["rollback", "nalis_mask", "clip", "lr_scale"]
    assert data["rows"]["actions"] == 4


def test_the_dashboard_shows_the_actions(stabilized_run):
    from arldiag.dashboards import views_alerts
    from arldiag.dashboards.source import RunSource

    src = RunSource(stabilized_run.parent)
    fig, _, rows = views_alerts.render_alerts(src, ["run"])
    labels = [a.text for a in fig.layout.annotations]
    assert "rollback+nalis_mask+clip+lr_scale" in labels
    assert [s.x0 for s in fig.layout.shapes] == [2]
    table = [r for r in rows if getattr(r, "id", None) == "actions-table"]
    assert len(table) == 1
    cells = [[td.children for td in tr.children] for tr in table[0].children[1].children]
    assert [c[1] for c in cells] == ["rollback", "nalis_mask", "clip", "lr_scale"] and cells[0][0] == "2"


def test_the_report_advises_on_the_settings_the_run_ended_with(stabilized_run):
    """The forced policy switched on the mask (delta 0.01) and halved the clip: the settings the report's advice
    reads are run.json's config with those values, so the mask is not recommended again."""
    import arldiag
    from arldiag.detectors.advice import settings_of, with_actions
    from arldiag.detectors.registry import advise
    from arldiag.report import data as D

    run = arldiag.open_run(str(stabilized_run))
    try:
        name = run.names[0]
        start = settings_of(run.manifests[name])
        end = with_actions(start, D.action_outcomes(run, name))
    finally:
        run.close()
    assert start["nalis_mask"] is not True
    assert end["nalis_mask"] is True and end["nalis_delta"] == 0.01
    assert (end["clip_low"], end["clip_high"]) == (0.5, 0.1)
    assert "mask negative-advantage" in advise("clip_pressure", start)
    assert "mask negative-advantage" not in advise("clip_pressure", end)
