"""One configuration, honoured everywhere: an arldiag.toml in the working folder (or --config, or
$ARLDIAG_CONFIG) changes what detect, eval-detect, report, watch, the dashboard's detector bridge and the Monitor
do, each checked by changing one setting and seeing its effect."""
import json
import os
import shutil
from pathlib import Path

import pytest

from arldiag.cli import main
from arldiag.settings import CONFIG_ENV, active

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "grpo_s3"  # stable: ok by default
# every state threshold low: the first watch-level signal is already critical
LOW = "[risk]\nenter = [0.05, 0.1, 0.15]\nexit_margin = 0.01\n"


@pytest.fixture
def run_copy(tmp_path):
    d = tmp_path / "grpo_s3"
    shutil.copytree(SAMPLE, d)
    return d


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    return folder


def _states(run_dir):
    from arldiag.detectors import alert_timeline

    return alert_timeline(str(run_dir))["state"].tolist()


def test_risk_in_the_working_folder_changes_detect_and_the_timeline(run_copy, in_folder, capsys):
    assert main(["detect", str(run_copy)]) in (0, 1)  # the text output ends with the run's alert state
    before = capsys.readouterr().out
    n_before = sum(s in ("warning", "critical") for s in _states(run_copy))
    (in_folder / "arldiag.toml").write_text(LOW)
    assert active().risk_changes()["enter"] == (0.05, 0.1, 0.15)
    assert main(["detect", str(run_copy)]) in (0, 1)
    assert capsys.readouterr().out != before
    assert sum(s in ("warning", "critical") for s in _states(run_copy)) > n_before


def test_config_flag_and_environment(run_copy, in_folder, tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "team.toml"
    cfg.write_text(LOW)
    main(["eval-detect", str(run_copy), "--json"])
    base = json.loads(capsys.readouterr().out)["runs"][0]
    main(["eval-detect", str(run_copy), "--json", "--config", str(cfg)])
    flagged = json.loads(capsys.readouterr().out)["runs"][0]
    assert flagged["warning_share"] > base["warning_share"]
    monkeypatch.setenv(CONFIG_ENV, str(cfg))  # the flag sets the same variable
    assert active().source == str(cfg)
    assert main(["detect", str(run_copy), "--config", str(tmp_path / "none.toml")]) == 2


def test_report_and_watch_read_it(run_copy, in_folder, tmp_path, capsys):
    def report_states():
        out = tmp_path / "r.json"
        assert main(["report", str(run_copy), "--format", "json", "-o", str(out), "--no-progress"]) == 0
        return out.read_text()

    before = report_states()
    capsys.readouterr()
    main(["watch", str(run_copy), "--once", "--no-store"])
    quiet = capsys.readouterr()
    (in_folder / "arldiag.toml").write_text(LOW)
    assert report_states() != before
    main(["watch", str(run_copy), "--once", "--no-store"])
    loud = capsys.readouterr()
    # the state changes the low thresholds cause are alerts on the console
    assert (loud.out + loud.err).count("state") > (quiet.out + quiet.err).count("state")


def test_detector_settings_reach_the_monitor_and_the_dashboard_bridge(in_folder, run_copy):
    import arldiag
    from arldiag.dashboards import detectors_bridge

    rows = [{"grad_norm": 1.0, "n_tokens": 100.0}] * 20 + [{"grad_norm": 100.0, "n_tokens": 100.0}]
    m = arldiag.Monitor(sinks=[])
    fired = [set(m.evaluator.update(t, r).signals) for t, r in enumerate(rows)]
    assert "grad_norm_spike" in fired[-1]
    (in_folder / "arldiag.toml").write_text("[detectors.grad_norm_spike]\nenabled = false\n")
    m = arldiag.Monitor(sinks=[])
    assert "grad_norm_spike" not in {d.name for d in m.evaluator.detectors}
    found, _ = detectors_bridge.findings(arldiag.open_run(run_copy))
    assert found and "grad_norm_spike" not in {f["detector"] for f in found}
    os.remove(in_folder / "arldiag.toml")
    assert "grad_norm_spike" in {d.name for d in arldiag.Monitor(sinks=[]).evaluator.detectors}


def test_alert_channels_reach_a_plain_monitor(in_folder):
    import arldiag
    from arldiag.alerts import WebhookSink

    assert not any(isinstance(s, WebhookSink) for s in arldiag.Monitor()._sinks)
    (in_folder / "arldiag.toml").write_text('[alerts.webhook]\nurl = "http://127.0.0.1:9/hook"\n')
    hooks = [s for s in arldiag.Monitor()._sinks if isinstance(s, WebhookSink)]
    assert len(hooks) == 1
    # a Monitor with sinks of its own (Settings.monitor passes them) gets nothing added
    assert not any(isinstance(s, WebhookSink) for s in arldiag.Monitor(sinks=["console"])._sinks)
