"""arldiag.toml: `arldiag init` writes every default (read from the code), load() applies file < env < kwargs,
bad input names the file/setting, and the settings build a working Monitor with its channels."""
import dataclasses
import inspect

import pytest

from arldiag.cli import main as cli
from arldiag.channels import channels_of
from arldiag.detectors.registry import REGISTRY, configured
from arldiag.detectors.risk import RiskConfig, calibrated_risk, risk_of
from arldiag.monitor import monitor_of
from arldiag.settings import env_name, load


def test_init_writes_every_default_with_its_meaning(tmp_path, capsys):
    f = tmp_path / "arldiag.toml"
    assert cli(["init", str(f)]) == 0
    text = f.read_text()
    s = load(f, env={})
    # every detector and every parameter, with the registry's values (not copies)
    for name, d in REGISTRY.items():
        assert f"[detectors.{name}]" in text
        for k, v in d.params.items():
            got = s.values["detectors"][name][k]
            assert (list(v) if isinstance(v, tuple) else v) == got, (name, k)
    for fld in dataclasses.fields(RiskConfig):
        want = getattr(calibrated_risk(), fld.name)  # the shipped (calibrated) defaults
        assert s.values["risk"][fld.name] == (list(want) if isinstance(want, tuple) else want)
    from arldiag.collectors.collector import Collector

    assert s.values["collector"]["token_sample_rate"] == inspect.signature(Collector).parameters[
        "token_sample_rate"].default
    # every parameter line carries its meaning
    missing = sorted(f"{d.name}.{k}" for d in REGISTRY.values() for k in d.params if not d.param_doc(k))
    assert not missing, f"document detector parameter(s) {missing} (Detector.param_docs or base.PARAM_DOCS)"
    assert all("  # " in line for line in text.splitlines() if " = " in line and not line.startswith("#"))
    assert cli(["init", str(f)]) == 2 and "exists" in capsys.readouterr().err
    assert cli(["init", str(f), "--force"]) == 0


def test_precedence_file_env_kwargs(tmp_path):
    f = tmp_path / "a.toml"
    f.write_text("[risk]\nexit_steps = 5\nenter_steps = 3\n[detectors.ppo_kl_spike]\nratio_levels = [4, 9, 30]\n"
                 "[alerts.slack]\nmin_severity = \"critical\"\n")
    env = {env_name(("risk", "enter_steps")): "4", "ARLDIAG_ALERTS_SLACK_URL": "http://127.0.0.1:9/hook",
           "ARLDIAG_DETECTORS_KL_REF_DRIFT_ENABLED": "false"}
    s = load(f, env=env, **{"risk.exit_steps": 6})
    assert s.values["risk"]["exit_steps"] == 6        # kwargs beat the file
    assert s.values["risk"]["enter_steps"] == 4       # env beats the file
    assert risk_of(s).enter_steps == 4 and risk_of(s).exit_steps == 6
    dets = {d.name: d for d in configured(s)}
    assert dets["ppo_kl_spike"].params["ratio_levels"] == (4, 9, 30)
    assert "kl_ref_drift" not in dets
    chans = channels_of(s)
    assert len(chans) == 1 and type(chans[0]).__name__ == "SlackSink" and chans[0].min_severity == "critical"
    mon = monitor_of(s, sinks=[])
    assert {d.name for d in mon.evaluator.detectors} == set(dets)
    assert load(env={}).source is None  # no file here: defaults


def test_monitor_from_settings_alerts_through_its_channel(tmp_path, monkeypatch):
    """End to end: a settings-built monitor raises an alert on a KL spike and posts it to the Slack URL from the
    environment (a local HTTP server)."""
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import numpy as np

    import arldiag

    got = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = load(env={"ARLDIAG_ALERTS_SLACK_URL": f"http://127.0.0.1:{srv.server_port}/s",
                      "ARLDIAG_MONITOR_SINKS": '["store"]', "ARLDIAG_ALERTS_SLACK_MIN_SEVERITY": "watch"})
        mon = monitor_of(s)
        rng = np.random.default_rng(0)
        with arldiag.Collector(tmp_path / "r", monitor=mon, **s.collector_kwargs()) as col:
            for step in range(30):
                old = rng.normal(-1, 0.2, (8, 6)).astype(np.float32)
                shift = 0.02 if step < 25 else 1.5  # a policy-update KL spike at step 25
                col.record_update(step, logp=old + rng.normal(0, shift, old.shape).astype(np.float32),
                                  logp_old=old, advantages=rng.normal(size=8), response_mask=np.ones((8, 6), bool))
                col.record_step(step, {})
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        srv.shutdown()
    assert got and any("ppo_kl_spike" in json.dumps(p) or "KL" in json.dumps(p) for p in got)


def test_bad_input_names_file_and_setting(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("[risk]\nexit_steps = \n")
    with pytest.raises(ValueError, match=r"bad.toml is not valid TOML .*line 2"):
        load(f, env={})
    f.write_text("[risk]\nexit_stepz = 3\n")
    with pytest.raises(ValueError, match=r"bad.toml: unknown setting 'risk.exit_stepz'"):
        load(f, env={})
    f.write_text("[detectors.nosuch]\nenabled = true\n")
    with pytest.raises(ValueError, match="unknown setting 'detectors.nosuch'"):
        load(f, env={})
    with pytest.raises(ValueError, match=r"environment: risk.exit_steps must be a int"):
        load(env={"ARLDIAG_RISK_EXIT_STEPS": "three"})
    with pytest.raises(ValueError, match="does not exist"):
        load(tmp_path / "nope.toml", env={})
