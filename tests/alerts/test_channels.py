"""Slack / Discord webhooks against a local HTTP server, email against a local SMTP server (aiosmtpd), severity
routing, template checks, and delivery that never blocks or raises into training."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from integrations.need import need

from arldiag.alerts import Alert
from arldiag.channels import DiscordSink, EmailSink, SlackSink, check_template, render


def alert(sev="warning", step=7, message='ratio "low" tail'):
    return Alert(step=step, detector="ppo_kl_spike", severity=sev, state=sev, risk=0.61, title="KL spike",
                 message=message, evidence={"value": 0.01}, run="exp1")


@pytest.fixture()
def http_server():
    got, block = [], threading.Event()

    class H(BaseHTTPRequestHandler):
        status = 200
        slow = False

        def do_POST(self):  # noqa: N802
            if H.slow:
                block.wait(5)
            n = int(self.headers["Content-Length"])
            got.append((self.path, self.headers["Content-Type"], json.loads(self.rfile.read(n))))
            self.send_response(H.status)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}", got, H, block
    block.set()
    srv.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def test_slack_payload_and_mention_only_on_critical(http_server):
    base, got, _, _ = http_server
    s = SlackSink(base + "/slack", min_severity="warning", backoff=0.01)
    s(alert("watch"))              # below min_severity: not sent
    s(alert("warning", step=8))
    s(alert("critical", step=9))
    s.close()
    assert wait_for(lambda: len(got) == 2) and s.sent == 2 and s.failed == 0
    (path, ctype, warn), (_, _, crit) = got
    assert path == "/slack" and ctype == "application/json"
    assert warn["text"] == "⚠ arldiag WARNING exp1 step 8: KL spike".replace("⚠", ":warning:")
    assert "<!channel>" not in json.dumps(warn)
    assert crit["text"].startswith("<!channel> :rotating_light: arldiag CRITICAL exp1 step 9")
    assert 'ratio \\"low\\" tail' in json.dumps(crit["blocks"])  # quotes escaped, payload still valid


def test_discord_payload_and_failure_counted(http_server):
    base, got, handler, _ = http_server
    d = DiscordSink(base + "/discord", mention_severity="warning", backoff=0.01, retries=1)
    d(alert("warning"))
    d.close()
    assert wait_for(lambda: d.sent == 1)
    payload = got[0][2]
    assert payload["content"].startswith("@here **arldiag WARNING** exp1 step 7")
    assert payload["embeds"][0]["title"] == "ppo_kl_spike: KL spike"
    handler.status = 500
    d2 = DiscordSink(base + "/discord", backoff=0.01, retries=1)
    d2(alert("critical"))
    assert wait_for(lambda: d2.failed == 1) and d2.sent == 0 and "500" in d2.last_error
    long = alert("critical", message="x" * 5000)
    assert len(d.render(long)["content"]) <= 2000


def test_delivery_never_blocks_the_caller(http_server):
    base, got, handler, block = http_server
    handler.slow = True  # the endpoint hangs until released
    s = SlackSink(base + "/s", queue_size=2, timeout=5, retries=0)
    t0 = time.perf_counter()
    for i in range(10):
        s(alert("critical", step=i))
    elapsed = time.perf_counter() - t0
    block.set()
    s.close()
    assert s.dropped >= 7  # queue of 2 (+1 in flight): the rest dropped and counted, not waited for
    assert elapsed < 5     # not a timing benchmark: only "did not wait for the 5 s endpoint"


def test_templates_are_checked_before_sending():
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) \['titel'\]"):
        SlackSink("http://127.0.0.1:9/x", template='{"text": "${titel}"}')
    with pytest.raises(ValueError, match="does not render to valid JSON"):
        SlackSink("http://127.0.0.1:9/x", template='{"text": ${title}}')
    with pytest.raises(ValueError, match="needs one of"):
        DiscordSink("http://127.0.0.1:9/x", template='{"text": "${title}"}')
    with pytest.raises(ValueError, match="mention_severity"):
        SlackSink("http://127.0.0.1:9/x", mention_severity="loud")
    check_template('{"content": "${SEVERITY} ${title}"}', "discord")
    assert render('{"content": "${title} @ ${step}"}', alert())["content"] == "KL spike @ 7"


def test_email_over_local_smtp_with_critical_recipients():
    aiosmtpd = need("aiosmtpd.controller")  # a real SMTP server on 127.0.0.1 (test extra; required in CI)
    got = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802
            got.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content.decode()))
            return "250 OK"

    port = free_port()  # aiosmtpd's start() connects to its own port to check it is up: give it a real one
    ctl = aiosmtpd.Controller(Handler(), hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        e = EmailSink("127.0.0.1", port, sender="bot@example.org", to="team@example.org",
                      critical_to=["oncall@example.org"], backoff=0.01)
        e(alert("warning", step=3))
        e(alert("critical", step=4))
        e.close()
        assert wait_for(lambda: len(got) == 2) and e.sent == 2
    finally:
        ctl.stop()
    (frm, rcpt_w, body_w), (_, rcpt_c, body_c) = sorted(got, key=lambda g: len(g[1]))
    assert frm == "bot@example.org" and rcpt_w == ["team@example.org"]
    assert rcpt_c == ["team@example.org", "oncall@example.org"]
    assert "Subject: [arldiag WARNING] exp1 step 3: KL spike" in body_w and "detector: ppo_kl_spike" in body_w
    assert "[arldiag CRITICAL] exp1 step 4" in body_c


def test_email_refused_connection_is_counted_and_inputs_checked():
    e = EmailSink("127.0.0.1", free_port(), to="a@b.c", retries=1, backoff=0.01, timeout=2)
    e(alert("critical"))
    assert wait_for(lambda: e.failed == 1) and e.sent == 0
    with pytest.raises(ValueError, match="to"):
        EmailSink("127.0.0.1", 25, to=[])
    with pytest.raises(ValueError, match="not email addresses"):
        EmailSink("127.0.0.1", 25, to="nobody")
