"""Command-line details: a closed pipe, a missing extra, the config file named on stderr, a CSV without a step column,
and Settings.monitor keeping the step profile's fitted risk state under a [risk] section."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from arldiag import cli
from arldiag.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "cispo_s0"


def test_a_closed_pipe_exits_quietly():
    """`arldiag detect RUN | head`: the reader is gone before anything is written (its end of the pipe closed)."""
    r, w = os.pipe()
    os.close(r)
    try:
        out = subprocess.run([sys.executable, "-m", "arldiag.cli", "detect", str(SAMPLE)], stdout=w,
                             stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    assert out.returncode == 1 and out.stderr == "", out.stderr  # the Python docs' recipe: exit 1, no message


def test_a_missing_extra_is_one_line_and_exit_2(monkeypatch, capsys):
    real = cli.importlib.import_module

    def no_dash(name, *a):
        if name == "arldiag.dashboards.cli":
            raise ModuleNotFoundError("No module named 'dash'", name="dash")
        return real(name, *a)

    monkeypatch.setattr(cli.importlib, "import_module", no_dash)
    assert main(["dashboard", "runs"]) == 2
    err = capsys.readouterr().err
    assert err == "arldiag dashboard: needs dash, which is not installed: pip install 'arldiag[dashboard]'\n"


def test_the_config_file_read_is_named_on_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ARLDIAG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["info", str(SAMPLE)]) == 0
    assert "config" not in capsys.readouterr().err  # no file, nothing said
    (tmp_path / "arldiag.toml").write_text("[risk]\nexit_steps = 7\n")
    assert main(["info", str(SAMPLE)]) == 0
    assert "arldiag info: config arldiag.toml (found in the current folder)" in capsys.readouterr().err


def test_a_csv_without_a_step_column_falls_back_to_the_row_index(tmp_path, capsys):
    csv = tmp_path / "log.csv"
    csv.write_text("entropy,reward\n" + "".join(f"{0.5 + i / 100},{i / 30}\n" for i in range(30)))
    assert main(["import", str(csv), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "has no step column" in err and "--step-column NAME" in err and "imported 30 steps" in err
    from arldiag.store.reader import open_run

    steps = open_run(str(tmp_path / "run")).sql("select step from steps order by step").df()["step"].tolist()
    assert steps == list(range(30))
    # a step column named on the command line that is not there: an error naming the option
    assert main(["import", str(csv), "--out", str(tmp_path / "r2"), "--step-column", "it"]) == 2
    assert "--step-column NAME picks the column" in capsys.readouterr().err


def test_settings_monitor_keeps_the_step_profile_fitted_state(tmp_path):
    """A [risk] section changes only the keys it sets: a Monitor from the file on a step-scalar run gets the step
    profile's calibrated state with that key changed, not the token profile's state wholesale."""
    from arldiag.detectors.risk import calibrated_risk
    from arldiag.monitor import monitor_of
    from arldiag.settings import load

    f = tmp_path / "arldiag.toml"
    f.write_text("[risk]\nexit_steps = 9\n")
    mon = monitor_of(load(f, env={}), sinks=())
    mon.evaluator.update(0, {"task_score": 0.5, "entropy": 0.3})  # no token statistics: the step profile
    assert mon.evaluator.profile == "steps"
    assert mon.evaluator.risk_cfg == dataclasses.replace(calibrated_risk(profile="steps"), exit_steps=9)
