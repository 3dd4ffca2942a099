"""The task score leads every view: an imported verl log (critic/score/mean, no success flag) shows its score as
the first panel, and the collapse line the label finds on that score."""
from arldiag.cli import main
from arldiag.dashboards.source import RunSource
from arldiag.dashboards.views_series import PANELS, SCORE_PANEL, render_panels


def _verl_csv(path):
    rows = ["step,critic/score/mean,actor/entropy,response_length/mean,val-core/openai/gsm8k/acc/mean@1"]
    for s in range(1, 61):
        score = 0.1 + 0.012 * s if s < 45 else 0.0  # learns to 0.6, then nothing scores from step 45
        val = f"{score:.3f}" if s % 10 == 0 else ""
        rows.append(f"{s},{score:.3f},{0.5 - 0.003 * s:.4f},{300 - s},{val}")
    path.write_text("\n".join(rows) + "\n")


def test_every_view_starts_with_the_task_score(tmp_path):
    assert all(panels[0] == SCORE_PANEL for panels in PANELS.values())
    _verl_csv(tmp_path / "verl.csv")
    assert main(["import", "csv", str(tmp_path / "verl.csv"), "--out", str(tmp_path / "root" / "verl")]) == 0
    src = RunSource(tmp_path / "root")
    fig, _ = render_panels(src, ["verl"], "overview")
    first_panel = [t for t in fig.data if t.xaxis in (None, "x")]
    assert {t.name for t in first_panel} == {"task_score", "val_score"}
    assert "not recorded: task score" not in (fig.layout.title.text or "")
    # the label rule of real runs on the 0/1 score: the first point at 1/3 of the best centred mean, step 45
    assert fig.layout.meta["collapse"] == {"verl": 45}
