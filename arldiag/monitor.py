"""Online monitor: evaluates the registered detectors as each step completes and sends alerts to sinks.

    monitor = arldiag.Monitor(webhook="https://hooks.example/...", stop_on="critical")
    with arldiag.Collector("runs/exp1", monitor=monitor, ...) as col: ...

The Collector calls ``bind(collector)`` once and ``on_step(step, metrics)`` after each step is finalised. The
Monitor feeds the same ``Evaluator`` the batch ``detect`` uses (one rule per detector, DESIGN.md "Two evaluators,
one definition"), so its findings equal ``detect(open_run(...))`` on the finished run. Its state is bounded (a
window of steps), so the per-step cost is flat however long the run is. It imports numpy only: no DuckDB, pandas,
Dash or plotly in the training process.

Alerts: one when the run's alert state changes (ok/watch/warning/critical, with hysteresis) and one when a detector
reaches a level above its previous maximum (at most three per detector per run).
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Iterable, Mapping

from arldiag.alerts import Alert, CallbackSink, ConsoleSink, StoreSink, WandbSink, WebhookSink
from arldiag.channels import channels_of
from arldiag.detectors.advice import settings_of, with_actions
from arldiag.detectors.engine import Evaluator, StepResult
from arldiag.detectors.registry import configured
from arldiag.detectors.risk import RiskConfig
from arldiag.findings import Finding
from arldiag.levels import ALERTING, LEVELS
from arldiag.settings import active

log = logging.getLogger("arldiag")
DEFAULT_SINKS = ("console", "store", "wandb")


class Monitor:
    """Args:
        detectors: registry names and/or Detector objects (default: the whole registry).
        risk: RiskConfig (level scores, state thresholds, hysteresis).
        risk_model: "rules" (noisy-OR of the detectors' levels) or "learned" (detectors.learned); default: the one
            calibrated.json ships (risk.calibrated_model).
        config: the run's settings for config-fitted advice (default: the bound Collector's run.json).
        sinks: names among "console", "store", "wandb", and/or callables ``sink(alert)``.
        webhook: URL to POST alerts to (or a WebhookSink); callback: ``fn(alert, monitor)``.
        stop_on: "warning" | "critical" | None: ask the trainer to stop (collector.request_stop) at that state.
        min_severity: lowest severity sent to the console.
    """

    def __init__(self, detectors=None, *, risk: RiskConfig | None = None,
                 sinks: Iterable[str | Callable[[Alert], None]] = DEFAULT_SINKS, webhook: Any = None,
                 callback: Callable[[Alert, "Monitor"], Any] | None = None, stop_on: str | None = None,
                 min_severity: str = "watch", source: str = "online", run: str | None = None,
                 console_stream=None, config: Mapping[str, Any] | None = None,
                 risk_model: str | None = None, settings: Any = None) -> None:
        if stop_on is not None and stop_on not in ALERTING:
            raise ValueError(f"stop_on must be None or one of {ALERTING}, got {stop_on!r}")
        self.evaluator = Evaluator(detectors, risk=risk, config=config, risk_model=risk_model, settings=settings)
        self._config_given = config is not None
        self.source, self.run, self.stop_on = source, run, stop_on
        self.collector = None
        self.alerts_sent = 0
        self.stop_requested: str | None = None
        self.last_result: StepResult | None = None  # the latest step's result (arldiag.stabilize reads it)
        self._sinks: list[Callable[[Alert], None]] = []
        self._wants_store = False
        self._failed: set[int] = set()
        for s in sinks:
            if s == "console":
                self._sinks.append(ConsoleSink(console_stream, min_severity))
            elif s == "store":
                self._wants_store = True  # attached in bind(): needs the collector
            elif s == "wandb":
                self._sinks.append(WandbSink())
            elif callable(s):
                self._sinks.append(s)
            else:
                raise ValueError(f"sinks: unknown sink {s!r}; use 'console', 'store', 'wandb' or a callable")
        if sinks is DEFAULT_SINKS:
            # the alert channels of the active arldiag.toml / environment (Slack, Discord, webhook, email): a
            # Monitor built without sinks of its own sends where the configuration says (monitor_of passes its
            # sinks explicitly, so nothing is added twice)
            self._sinks.extend(channels_of(active()))
        if webhook is not None:
            self._sinks.append(webhook if isinstance(webhook, WebhookSink) else WebhookSink(str(webhook)))
        if callback is not None:
            self._sinks.append(CallbackSink(callback, self))

    # ------------------------------------------------------------------ Collector hook
    def bind(self, collector: Any) -> None:
        self.collector = collector
        if self._wants_store and hasattr(collector, "record_alert"):
            self._sinks.append(StoreSink(collector.record_alert))
        manifest = getattr(collector, "manifest", None) or {}
        if self.run is None:
            self.run = manifest.get("name")
        if not self._config_given:  # recommendations fit the run's own settings (run.json config)
            self.evaluator.config = settings_of(manifest)

    def note_action(self, outcome: Mapping[str, Any] | None) -> None:
        """An auto-stabilize action changed the run's settings (its outcome's ``after`` values): later advice fits
        them, so a run the loop has masked is not told to add the mask (advice.with_actions)."""
        self.evaluator.config = with_actions(self.evaluator.config, [outcome or {}])

    def on_step(self, step: int, metrics: Mapping[str, Any]) -> StepResult:
        res = self.evaluator.update(step, metrics)
        self.last_result = res
        for alert in self.alerts_for(res):
            self.emit(alert)
        if (self.stop_on is not None and LEVELS.index(res.state) >= LEVELS.index(self.stop_on)
                and self.stop_requested is None):
            self.request_stop(f"alert state {res.state} at step {res.step} (risk {res.risk:.2f}; "
                              f"leading detector {res.top})")
        return res

    # ------------------------------------------------------------------ alerts
    def explain(self, res: StepResult) -> tuple[str, dict]:
        """(message, evidence) of a state change: every firing signal with its level and value, the outcome
        context, and the leading detector's recommendation fitted to the run's config."""
        ordered = sorted(res.signals.items(), key=lambda kv: -kv[1].level)
        lines = [f"{n} {LEVELS[s.level]}: {s.metric} = {s.value:.4g} ({s.note})" for n, s in ordered]
        ctx = self.evaluator.window.context
        evidence: dict[str, Any] = {
            "signals": {n: {"level": LEVELS[s.level], "metric": s.metric, "value": s.value, "note": s.note}
                        for n, s in ordered},
            "risk": res.risk, "top_value": res.signals[res.top].value if res.top else None}
        if ctx is not None and ctx.known:
            evidence["outcome"] = {"metric": ctx.source, "value": ctx.level, "peak": ctx.peak, "rise": ctx.rise}
        learned = getattr(self.evaluator, "learned", None)
        if learned is not None:
            # the learned score's state follows its logit, not the detectors: name the features that raised it
            # (level = z against the run's early median, shift = z against the 20 steps before, peak = log10 of the
            # last 30 steps' largest value over the early median: detectors/learned.py)
            terms = learned.contributions()
            evidence["learned"] = [{"feature": f, "z": z, "logit_term": t} for f, z, t in terms]
            lines.append("learned score from " + (", ".join(f"{f} z {z:+.1f} (+{t:.2f})" for f, z, t in terms)
                                                   or "no feature raised it"))
        if LEVELS.index(res.state) > LEVELS.index(res.previous_state):
            msg = f"risk {res.risk:.2f} from: " + ("; ".join(lines) or "no detector")
        else:
            msg = (f"risk {res.risk:.2f}; " + ("still firing: " + "; ".join(lines) if lines
                                                else "no detector is firing"))
        if ctx is not None and ctx.known:
            msg += f". Outcome: {ctx.describe()}"
        if res.top and LEVELS.index(res.state) > LEVELS.index(res.previous_state):
            d = next(d for d in self.evaluator.detectors if d.name == res.top)
            rec = self.evaluator.recommendation(d)
            evidence["recommendation"] = rec
            msg += f". Recommendation ({res.top}): {rec}"
        return msg, evidence

    def alerts_for(self, res: StepResult) -> list[Alert]:
        out = []
        if res.changed:
            msg, evidence = self.explain(res)
            out.append(Alert(step=res.step, detector=res.top or "risk",
                             severity=res.state if res.state != "ok" else "info", state=res.state, risk=res.risk,
                             title=f"alert state {res.previous_state} -> {res.state}", message=msg,
                             evidence=evidence, source=self.source, run=self.run))
        for name in res.escalated:
            s = res.signals[name]
            if res.changed and name == res.top and LEVELS[s.level] == res.state:
                continue  # the state-change alert above already names this detector at this level
            d = next(d for d in self.evaluator.detectors if d.name == name)
            out.append(Alert(step=res.step, detector=name, severity=LEVELS[s.level], state=res.state,
                             risk=res.risk, title=d.title,
                             message=f"{s.metric} = {s.value:.4g}: {s.note}. {self.evaluator.recommendation(d)}",
                             evidence={"metric": s.metric, "value": s.value,
                                       "recommendation": self.evaluator.recommendation(d)},
                             source=self.source, run=self.run))
        return out

    def emit(self, alert: Alert) -> None:
        self.alerts_sent += 1
        for i, sink in enumerate(self._sinks):
            try:
                sink(alert)
            except Exception as exc:  # noqa: BLE001 - a sink must never take training down
                if i not in self._failed:
                    self._failed.add(i)
                    msg = f"arldiag: alert sink {type(sink).__name__} failed ({type(exc).__name__}: {exc})"
                    warnings.warn(msg, RuntimeWarning, stacklevel=2)
                    log.warning(msg)

    def request_stop(self, reason: str) -> None:
        self.stop_requested = reason
        if self.collector is not None and hasattr(self.collector, "request_stop"):
            self.collector.request_stop(reason)

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        return self.evaluator.alert.state

    @property
    def last_step(self) -> int | None:
        return self.evaluator.last_step

    def findings(self) -> list[Finding]:
        return self.evaluator.findings(self.run)

    def close(self) -> None:
        for sink in self._sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass


def monitor_of(settings, **kwargs: Any) -> Monitor:
    """A Monitor with an arldiag.settings.Settings' detectors, risk settings and sinks (``kwargs`` go to Monitor and
    win)."""
    m = settings.values["monitor"]
    # no whole RiskConfig: the Evaluator picks the run's profile (token statistics or step scalars) and applies only
    # the [risk] keys this configuration changes on top of that profile's fitted state (detectors.risk.risk_for)
    args = dict(detectors=configured(settings), settings=settings, sinks=list(m["sinks"]) + channels_of(settings),
                stop_on=m["stop_on"] or None, min_severity=m["min_severity"])
    args.update(kwargs)
    return Monitor(**args)
