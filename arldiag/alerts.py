"""Alert sinks: where the Monitor's alerts go. A sink is any callable ``sink(alert) -> None``.

Built in: the console, the run's ``alerts`` table (in-process through ``collector.record_alert``; out-of-process
through ``RunAlertWriter``), ``wandb.alert`` when a wandb run is active, a webhook (JSON POST from a background
thread with timeout and retry: it never blocks training) and a user callback. Sinks never raise into training:
the Monitor catches and warns once per sink.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import queue
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from arldiag.findings import severity_rank
from arldiag.levels import SEVERITIES
from arldiag.schema import arrow_schema
from arldiag.store.writer import StoreWriter

log = logging.getLogger("arldiag")
WATCH_WRITER_RANK = 99_999  # part-file rank of alerts written by `arldiag watch` (never collides with trainers)


@dataclass
class Alert:
    step: int
    detector: str          # registry name, or "risk" for a state change without a single leading detector
    severity: str          # info | watch | warning | critical
    state: str             # alert state of the run after this alert: ok | watch | warning | critical
    risk: float
    title: str
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    source: str = "online"  # online | watch | detect
    run: str | None = None
    time: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time"] = self.time.isoformat()
        d["risk"] = self.risk if math.isfinite(self.risk) else None
        return d

    def record_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of Collector.record_alert."""
        return dict(step=self.step, detector=self.detector, severity=self.severity, state=self.state,
                    risk=self.risk, title=self.title, message=self.message, evidence=self.evidence,
                    source=self.source)


def _at_least(alert: Alert, min_severity: str) -> bool:
    return severity_rank(alert.severity) >= severity_rank(min_severity)


class ConsoleSink:
    def __init__(self, stream=None, min_severity: str = "info") -> None:
        self.stream, self.min_severity = stream, min_severity

    def __call__(self, alert: Alert) -> None:
        if not _at_least(alert, self.min_severity):
            return
        run = f"{alert.run} " if alert.run else ""
        print(f"[arldiag] {run}step {alert.step} {alert.severity.upper():8s} state={alert.state} "
              f"risk={alert.risk:.2f} {alert.detector}: {alert.title}"
              + (f" - {alert.message}" if alert.message else ""), file=self.stream or sys.stderr, flush=True)


class StoreSink:
    """In-process: append to the run's alerts table through ``collector.record_alert``."""

    def __init__(self, record_alert: Callable[..., None], min_severity: str = "info") -> None:
        self.record_alert, self.min_severity = record_alert, min_severity

    def __call__(self, alert: Alert) -> None:
        if _at_least(alert, self.min_severity):
            self.record_alert(**alert.record_kwargs())


class RunAlertWriter:
    """Out-of-process: publish alert rows into ``run_dir/alerts/`` (atomic parts, own rank number), for
    `arldiag watch`. ``flush()`` publishes what was written since the last flush."""

    def __init__(self, run_dir: str | Path, min_severity: str = "info") -> None:
        self.min_severity = min_severity
        self._writer = StoreWriter(Path(run_dir), rank=WATCH_WRITER_RANK)

    def __call__(self, alert: Alert) -> None:
        import pyarrow as pa

        if not _at_least(alert, self.min_severity):
            return
        row = {"step": int(alert.step), "time": alert.time, "detector": alert.detector,
               "severity": alert.severity, "state": alert.state, "risk": float(alert.risk), "title": alert.title,
               "message": alert.message, "evidence": json.dumps(alert.evidence, default=str),
               "source": alert.source}
        self._writer.put("alerts", pa.Table.from_pylist([row], schema=arrow_schema("alerts")))

    def flush(self) -> None:
        self._writer.flush(wait=True)

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """``wandb.alert`` when wandb is already imported and a run is active; a silent no-op otherwise (arldiag never
    imports wandb itself: that would slow every trainer that does not use it)."""

    _LEVELS = {"info": "INFO", "watch": "INFO", "warning": "WARN", "critical": "ERROR"}

    def __init__(self, min_severity: str = "warning", wait_duration: float = 60.0) -> None:
        self.min_severity, self.wait_duration = min_severity, wait_duration

    def __call__(self, alert: Alert) -> None:
        wandb = sys.modules.get("wandb")
        if wandb is None or getattr(wandb, "run", None) is None or not _at_least(alert, self.min_severity):
            return
        level_enum = getattr(wandb, "AlertLevel", None)
        level = getattr(level_enum, self._LEVELS[alert.severity]) if level_enum is not None else None
        wandb.alert(title=f"arldiag: {alert.title}"[:64], text=f"step {alert.step}: {alert.message}"[:1000],
                    level=level, wait_duration=self.wait_duration)


class BackgroundSink:
    """Deliver alerts from a daemon thread. The caller only enqueues (a full queue drops the alert and counts it),
    so a slow or dead endpoint never blocks training. Each delivery gets up to ``retries`` retries with exponential
    backoff; ``sent``/``failed``/``dropped`` count the outcomes. Subclasses implement ``_deliver(item)`` (raise on
    failure) and ``_item(alert)`` (what to queue: built in the caller's thread, so a bad template fails there)."""

    thread_name = "arldiag-sink"

    def __init__(self, retries: int = 3, backoff: float = 0.5, min_severity: str = "warning", queue_size: int = 100):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.retries, self.backoff, self.min_severity = int(retries), float(backoff), min_severity
        self.sent = self.failed = self.dropped = 0
        self.last_error: str | None = None
        self._q: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, alert: Alert) -> None:
        if not _at_least(alert, self.min_severity):
            return
        item = self._item(alert)
        self._ensure_thread()
        try:
            self._q.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def _item(self, alert: Alert) -> Any:
        return alert.to_dict()

    def _deliver(self, item: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            self._attempt(item)
            self._q.task_done()

    def _attempt(self, item: Any) -> None:
        for attempt in range(self.retries + 1):
            try:
                self._deliver(item)
                self.sent += 1
                return
            except Exception as exc:  # noqa: BLE001 - delivery errors are retried, then counted
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("arldiag %s attempt %d failed: %s", self.thread_name, attempt + 1, exc)
            if attempt < self.retries:
                time.sleep(self.backoff * 2 ** attempt)
        self.failed += 1

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` seconds for queued alerts to be delivered, then stop the thread."""
        if self._thread is None or not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout
        while self._q.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass


class WebhookSink(BackgroundSink):
    """POST each alert as JSON to ``url`` (``payload(alert)``, default the alert's fields) from a daemon thread, with
    ``timeout`` seconds per POST (see BackgroundSink for retries and counters)."""

    thread_name = "arldiag-webhook"

    def __init__(self, url: str, timeout: float = 5.0, retries: int = 3, backoff: float = 0.5,
                 min_severity: str = "warning", headers: dict[str, str] | None = None, queue_size: int = 100,
                 payload: Callable[[Alert], dict] | None = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        if timeout <= 0 or retries < 0:
            raise ValueError("timeout must be > 0 and retries >= 0")
        super().__init__(retries, backoff, min_severity, queue_size)
        self.url, self.timeout = url, float(timeout)
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.payload = payload

    def _item(self, alert: Alert) -> Any:
        return alert.to_dict() if self.payload is None else self.payload(alert)

    def _deliver(self, payload: dict) -> None:
        body = json.dumps(payload, default=str).encode()
        req = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - user-given URL
            if not 200 <= resp.status < 300:
                raise OSError(f"HTTP {resp.status}")


class CallbackSink:
    """Call ``fn(alert, monitor)`` for each alert; the callback may call ``monitor.request_stop(reason)`` (or return
    the string "stop") to ask the trainer to stop."""

    def __init__(self, fn: Callable[[Alert, Any], Any], monitor: Any, min_severity: str = "info") -> None:
        if not callable(fn):
            raise ValueError(f"callback must be callable, got {type(fn).__name__}")
        self.fn, self.monitor, self.min_severity = fn, monitor, min_severity

    def __call__(self, alert: Alert) -> None:
        if _at_least(alert, self.min_severity) and self.fn(alert, self.monitor) == "stop":
            self.monitor.request_stop(f"callback asked to stop at step {alert.step} ({alert.detector})")
