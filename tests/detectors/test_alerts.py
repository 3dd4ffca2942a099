"""Alert sinks: console, webhook (local HTTP server), wandb (fake module), callback, failing sinks."""
import io
import json
import socket
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from arldiag.alerts import Alert, ConsoleSink, WandbSink, WebhookSink
from arldiag.monitor import Monitor


def alert(sev="warning", step=7):
    return Alert(step=step, detector="ppo_kl_spike", severity=sev, state=sev, risk=0.6, title="KL spike",
                 message="ppo_kl_k3 10x", evidence={"value": 0.01})


def test_alert_validates_severity():
    with pytest.raises(ValueError, match="severity"):
        alert(sev="bad")


def test_console_sink_filters_by_severity():
    buf = io.StringIO()
    s = ConsoleSink(buf, min_severity="warning")
    s(alert("watch"))
    s(alert("critical", step=9))
    out = buf.getvalue()
    assert "step 9 CRITICAL" in out and "step 7" not in out


@pytest.fixture()
def http_server():
    got = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            n = int(self.headers["Content-Length"])
            got.append(json.loads(self.rfile.read(n)))
            self.send_response(200 if len(got) > 1 or not H.fail_first else 500)
            self.end_headers()

        def log_message(self, *a):
            pass

    H.fail_first = False
    srv = HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}/hook", got, H
    srv.shutdown()


def test_webhook_posts_json_and_retries(http_server):
    url, got, handler = http_server
    handler.fail_first = True  # first POST answers 500: the sink retries
    s = WebhookSink(url, timeout=2, retries=2, backoff=0.01)
    s(alert("watch"))          # below the default min severity (warning): not sent
    s(alert("critical", step=11))
    s.close(timeout=10)
    assert s.sent == 1 and s.failed == 0
    assert len(got) == 2 and got[-1]["step"] == 11 and got[-1]["severity"] == "critical"
    assert got[-1]["evidence"] == {"value": 0.01}


def test_webhook_dead_endpoint_counts_failure_without_raising():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    s = WebhookSink(f"http://127.0.0.1:{port}/x", timeout=0.5, retries=1, backoff=0.01)
    s(alert("critical"))  # returns at once: delivery happens in the background thread
    s.close(timeout=10)
    assert s.failed == 1 and s.sent == 0


def test_webhook_rejects_bad_url():
    with pytest.raises(ValueError, match="url"):
        WebhookSink("ftp://x")


def test_wandb_sink_uses_active_run(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(run=object(), alert=lambda **kw: calls.append(kw),
                                 AlertLevel=types.SimpleNamespace(INFO="I", WARN="W", ERROR="E"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    s = WandbSink()
    s(alert("watch"))
    s(alert("critical"))
    assert len(calls) == 1 and calls[0]["level"] == "E" and "KL spike" in calls[0]["title"]
    fake.run = None  # no active run: nothing sent
    s(alert("critical"))
    assert len(calls) == 1


def test_monitor_failing_sink_warns_once_and_continues():
    delivered = []

    def bad(a):
        raise RuntimeError("boom")

    m = Monitor(sinks=[bad, delivered.append])
    with pytest.warns(RuntimeWarning, match="boom"):
        for t in range(25):
            m.on_step(t, {"grad_norm": 1.0})
        m.on_step(25, {"grad_norm": 50.0})
        m.on_step(26, {"grad_norm": float("inf")})
    assert [a.step for a in delivered][:1] == [25] and len(delivered) >= 2


def test_monitor_store_sink_uses_record_alert():
    rec = []

    class FakeCollector:
        manifest = {"name": "fake"}

        def record_alert(self, **kw):
            rec.append(kw)

        def request_stop(self, reason):
            rec.append({"stop": reason})

    m = Monitor(sinks=["store"], stop_on="critical")
    m.bind(FakeCollector())
    # a trainer with token statistics (n_tokens): the token profile, where a grad-norm spike counts in full (the
    # step-scalar profile demotes one-point spikes: test_real_runs)
    for t in range(20):
        m.on_step(t, {"grad_norm": 1.0, "n_tokens": 1000.0})
    m.on_step(20, {"grad_norm": 100.0, "n_tokens": 1000.0})  # 100x the median: a critical alert at once
    # the state turns critical (and stop_on fires) once the critical reading lasts RiskConfig.critical_steps steps
    # and, one family alone with no outcome weakening, solo_critical_steps (the corroboration gate)
    cfg = m.evaluator.risk_cfg
    for t in range(21, 20 + max(cfg.critical_steps, cfg.solo_critical_steps if cfg.corroborate else 0)):
        m.on_step(t, {"grad_norm": 100.0, "n_tokens": 1000.0})
    kinds = [r.get("severity") for r in rec if "stop" not in r]
    assert "critical" in kinds and rec[0]["source"] == "online" and rec[0]["step"] == 20
    assert any("stop" in r for r in rec) and m.stop_requested
    with pytest.raises(ValueError, match="sinks"):
        Monitor(sinks=["nope"])
