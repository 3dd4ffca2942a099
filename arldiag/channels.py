"""Alert channels: Slack and Discord incoming webhooks, email over SMTP, with severity routing.

Each channel is an alert sink (``sink(alert)``) built on ``alerts.BackgroundSink``: the trainer's thread only renders
the message and enqueues it; a daemon thread delivers with retries; failures and drops are counted, never raised.

Payload templates are JSON text with ``${name}`` placeholders (``TEMPLATE_FIELDS``). They are checked when the
channel is built: unknown placeholders, a render of a sample alert that is not valid JSON, or a payload without
the service's required key (Slack ``text``/``blocks``, Discord ``content``/``embeds``) raise ``ValueError`` naming
the template. Values are JSON-escaped as they are substituted, so a message with quotes cannot break the payload.

Severity routing: a channel sends alerts at or above ``min_severity``; the ``mention`` (Slack ``<!channel>``,
Discord ``@here``, an email's extra ``critical_to`` recipients) is added only at or above ``mention_severity``
(default critical).
"""
from __future__ import annotations

import json
import math
import smtplib
import string
from email.message import EmailMessage
from typing import Any

from arldiag.alerts import Alert, BackgroundSink, WebhookSink
from arldiag.findings import severity_rank
from arldiag.levels import SEVERITIES

TEMPLATE_FIELDS = ("run", "step", "detector", "severity", "SEVERITY", "state", "risk", "title", "message",
                   "mention", "emoji")
EMOJI = {"info": ":information_source:", "watch": ":eyes:", "warning": ":warning:", "critical": ":rotating_light:"}
SLACK_TEMPLATE = ('{"text": "${mention}${emoji} arldiag ${SEVERITY} ${run} step ${step}: ${title}",'
                  ' "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": '
                  '"${mention}${emoji} *${SEVERITY}* `${detector}` ${run} step ${step} (risk ${risk})\\n'
                  '*${title}*\\n${message}"}}]}')
DISCORD_TEMPLATE = ('{"content": "${mention}**arldiag ${SEVERITY}** ${run} step ${step}: ${title}",'
                    ' "embeds": [{"title": "${detector}: ${title}", "description": "${message}",'
                    ' "footer": {"text": "state ${state}, risk ${risk}"}}],'
                    ' "allowed_mentions": {"parse": ["everyone"]}}')
# service limits checked on the rendered sample (Slack: text 40000 chars; Discord: content 2000)
LIMITS = {"slack": ("text", 40000), "discord": ("content", 2000)}
REQUIRED = {"slack": ("text", "blocks"), "discord": ("content", "embeds")}
_SAMPLE = Alert(step=12, detector="kl_spike", severity="critical", state="critical", risk=0.93,
                title='sample "title"', message="sample message\nwith a second line", run="sample-run")


def _check_severity(name: str, value: str) -> None:
    if value not in SEVERITIES:
        raise ValueError(f"{name} must be one of {SEVERITIES}, got {value!r}")


def _fields(alert: Alert, mention: str) -> dict[str, str]:
    risk = f"{alert.risk:.2f}" if math.isfinite(alert.risk) else "n/a"
    return {"run": alert.run or "", "step": str(alert.step), "detector": alert.detector, "severity": alert.severity,
            "SEVERITY": alert.severity.upper(), "state": alert.state, "risk": risk, "title": alert.title,
            "message": alert.message, "mention": mention, "emoji": EMOJI.get(alert.severity, "")}


def render(template: str, alert: Alert, mention: str = "") -> dict:
    """The payload: ``template`` with each ``${field}`` replaced by the JSON-escaped value, parsed as JSON."""
    esc = {k: json.dumps(v)[1:-1] for k, v in _fields(alert, mention).items()}
    return json.loads(string.Template(template).substitute(esc))


def check_template(template: str, service: str, name: str = "template") -> None:
    """ValueError naming ``name`` when the template cannot produce a valid payload for ``service``."""
    if not isinstance(template, str):
        raise ValueError(f"{name}: expected JSON text with ${{field}} placeholders, got {type(template).__name__}")
    t = string.Template(template)
    unknown = sorted({m.group("named") or m.group("braced") for m in t.pattern.finditer(template)
                      if (m.group("named") or m.group("braced")) and (m.group("named") or m.group("braced"))
                      not in TEMPLATE_FIELDS})
    if unknown:
        raise ValueError(f"{name}: unknown placeholder(s) {unknown}; known: {', '.join(TEMPLATE_FIELDS)}")
    try:
        payload = render(template, _SAMPLE, mention="@here ")
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{name}: a sample alert does not render to valid JSON ({exc})") from None
    if not isinstance(payload, dict) or not any(k in payload for k in REQUIRED[service]):
        raise ValueError(f"{name}: a {service} payload needs one of {REQUIRED[service]}, the template gives "
                         f"{sorted(payload) if isinstance(payload, dict) else type(payload).__name__}")
    key, limit = LIMITS[service]
    if len(str(payload.get(key, ""))) > limit:
        raise ValueError(f"{name}: {service} {key!r} is limited to {limit} characters")


class _ChatSink(WebhookSink):
    service = ""
    default_template = ""
    default_mention = ""

    def __init__(self, url: str, template: str | None = None, mention: str | None = None,
                 mention_severity: str = "critical", min_severity: str = "warning", **kwargs: Any):
        _check_severity("min_severity", min_severity)
        _check_severity("mention_severity", mention_severity)
        self.template = template or self.default_template
        check_template(self.template, self.service, f"{self.service} template")
        self.mention = self.default_mention if mention is None else mention
        self.mention_severity = mention_severity
        super().__init__(url, min_severity=min_severity, payload=self.render, **kwargs)

    def render(self, alert: Alert) -> dict:
        loud = severity_rank(alert.severity) >= severity_rank(self.mention_severity)
        payload = render(self.template, alert, mention=f"{self.mention} " if loud and self.mention else "")
        key, limit = LIMITS[self.service]
        if isinstance(payload.get(key), str) and len(payload[key]) > limit:  # a long message: cut, keep valid
            payload[key] = payload[key][: limit - 1] + "…"
        return payload


class SlackSink(_ChatSink):
    """Slack incoming webhook (https://api.slack.com/messaging/webhooks): ``text`` plus a mrkdwn block."""
    service, default_template, default_mention = "slack", SLACK_TEMPLATE, "<!channel>"
    thread_name = "arldiag-slack"


class DiscordSink(_ChatSink):
    """Discord webhook (https://discord.com/developers/docs/resources/webhook): ``content`` plus an embed."""
    service, default_template, default_mention = "discord", DISCORD_TEMPLATE, "@here"
    thread_name = "arldiag-discord"


class EmailSink(BackgroundSink):
    """Email over SMTP (``smtplib``): one message per alert to ``to``; ``critical_to`` are added at or above
    ``mention_severity``. ``starttls``/``ssl`` for encrypted servers; ``username``/``password`` to log in."""

    thread_name = "arldiag-email"

    def __init__(self, host: str, port: int = 25, sender: str = "arldiag@localhost", to: list[str] | str = (),
                 critical_to: list[str] | str = (), username: str | None = None, password: str | None = None,
                 starttls: bool = False, ssl: bool = False, timeout: float = 10.0, min_severity: str = "warning",
                 mention_severity: str = "critical", retries: int = 3, backoff: float = 0.5, queue_size: int = 100):
        _check_severity("min_severity", min_severity)
        _check_severity("mention_severity", mention_severity)
        self.to = [to] if isinstance(to, str) else list(to)
        self.critical_to = [critical_to] if isinstance(critical_to, str) else list(critical_to)
        if not self.to:
            raise ValueError("to: give at least one recipient address")
        bad = [a for a in self.to + self.critical_to + [sender] if "@" not in a]
        if bad:
            raise ValueError(f"to/critical_to/sender: not email addresses: {bad}")
        if not host or not 0 < int(port) < 65536:
            raise ValueError(f"host/port: need a host and a port in 1..65535, got {host!r}:{port!r}")
        if starttls and ssl:
            raise ValueError("starttls and ssl are exclusive (ssl: SMTPS from the start, starttls: upgrade)")
        super().__init__(retries, backoff, min_severity, queue_size)
        self.host, self.port, self.sender = host, int(port), sender
        self.username, self.password, self.starttls, self.ssl = username, password, starttls, ssl
        self.timeout, self.mention_severity = float(timeout), mention_severity

    def _item(self, alert: Alert) -> EmailMessage:
        loud = severity_rank(alert.severity) >= severity_rank(self.mention_severity)
        msg = EmailMessage()
        run = f" {alert.run}" if alert.run else ""
        msg["Subject"] = f"[arldiag {alert.severity.upper()}]{run} step {alert.step}: {alert.title}"[:200]
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.to + (self.critical_to if loud else []))
        risk = f"{alert.risk:.2f}" if math.isfinite(alert.risk) else "n/a"
        msg.set_content(f"{alert.title}\n\n{alert.message}\n\ndetector: {alert.detector}\nseverity: {alert.severity}"
                        f"\nrun state: {alert.state}\nrisk: {risk}\nstep: {alert.step}\n"
                        f"evidence: {json.dumps(alert.evidence, default=str)}\n")
        return msg

    def _deliver(self, msg: EmailMessage) -> None:
        cls = smtplib.SMTP_SSL if self.ssl else smtplib.SMTP
        with cls(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(msg)


def channels_of(settings) -> list:
    """The alert sinks of an arldiag.settings.Settings' [alerts.*] sections whose url/host is set."""
    a, out = settings.values["alerts"], []
    for key, cls in (("slack", SlackSink), ("discord", DiscordSink)):
        c = a[key]
        if c["url"]:
            out.append(cls(c["url"], template=c["template"] or None, mention=c["mention"],
                           mention_severity=c["mention_severity"], min_severity=c["min_severity"]))
    if a["webhook"]["url"]:
        out.append(WebhookSink(a["webhook"]["url"], min_severity=a["webhook"]["min_severity"]))
    e = a["email"]
    if e["host"]:
        out.append(EmailSink(e["host"], **{k: (v or None) if k in ("username", "password") else v
                                           for k, v in e.items() if k != "host"}))
    return out
