"""``arldiag.toml``: detector parameters, risk settings, collector options and alert sinks in one file.

Precedence, lowest first: the defaults (read from the code: each detector's ``params``, ``RiskConfig``, the
Collector's and Monitor's signatures, the channels' signatures, so this file never copies a number), the file, the
environment, keyword arguments. Every setting has an environment name, ``ARLDIAG_`` + its path in capitals joined
by "_" (``alerts.slack.url`` -> ``ARLDIAG_ALERTS_SLACK_URL``), which is where secrets such as webhook URLs and SMTP
passwords belong. Values from the environment are parsed as TOML values (``3``, ``0.5``, ``true``, ``[1, 2]``),
and as plain strings otherwise.

    settings = arldiag.settings.load()                       # ./arldiag.toml or $ARLDIAG_CONFIG, if present
    col = arldiag.Collector("runs/x", monitor=settings.monitor(), **settings.collector_kwargs())

`arldiag init` writes a file with every default and its meaning.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
from pathlib import Path
from typing import Any, Mapping

from arldiag._toml import loads

ENV_PREFIX = "ARLDIAG_"
CONFIG_ENV = "ARLDIAG_CONFIG"
DEFAULT_FILE = "arldiag.toml"

COLLECTOR_KEYS = {"token_sample_rate": "fraction of samples whose token rows are kept (anomalous rows always)",
                  "flush_every": "publish buffered rows every this many steps",
                  "neg_adv_delta": "delta of the negative-advantage low-IS mask (ARLArena)",
                  "dual_clip_c": "verl clip_ratio_c for pg_clipfrac_lower",
                  "strict": "raise on the collector's own errors instead of warning once"}
MONITOR_KEYS = {"min_severity": "lowest severity printed on the console",
                "stop_on": "ask the trainer to stop at this alert state (\"\" = never; watch, warning, critical)",
                "sinks": "built-in sinks: console, store (the run's alerts table), wandb"}
STABILIZE_POLICY_DOC = ("--auto-stabilize policy when the flag is not given: a registered name (default, "
                        "conservative, levers) or module:function (\"\" = off)")
CHANNEL_KEYS = {
    "slack": {"url": "incoming-webhook URL (secret: set ARLDIAG_ALERTS_SLACK_URL); empty = off",
              "min_severity": "lowest severity sent", "mention_severity": "lowest severity that mentions",
              "mention": "the mention text", "template": "payload template (JSON with ${field}); empty = built in"},
    "discord": {"url": "webhook URL (secret: set ARLDIAG_ALERTS_DISCORD_URL); empty = off",
                "min_severity": "lowest severity sent", "mention_severity": "lowest severity that mentions",
                "mention": "the mention text", "template": "payload template (JSON with ${field}); empty = built in"},
    "webhook": {"url": "URL that receives each alert as JSON (secret: ARLDIAG_ALERTS_WEBHOOK_URL); empty = off",
                "min_severity": "lowest severity sent"},
    "email": {"host": "SMTP server; empty = off", "port": "SMTP port", "sender": "From address",
              "to": "recipients", "critical_to": "extra recipients at mention_severity and above",
              "username": "SMTP login (empty = none)", "password": "SMTP password (secret: ARLDIAG_ALERTS_EMAIL_"
              "PASSWORD)", "starttls": "upgrade the connection with STARTTLS", "ssl": "SMTPS from the start",
              "min_severity": "lowest severity sent", "mention_severity": "lowest severity sent to critical_to"},
}


def stabilize_keys() -> dict[str, str]:
    """[stabilize]: the policy, then every field of arldiag.stabilize.Limits with its doc (the Stabilizer's own
    bounds and each action's, declared on its ActionSpec)."""
    from arldiag.stabilize import Limits

    return {"policy": STABILIZE_POLICY_DOC, **{f.name: f.metadata["doc"] for f in dataclasses.fields(Limits)}}


def _signature_defaults(fn: Any, keys) -> dict[str, Any]:
    sig = inspect.signature(fn)
    return {k: sig.parameters[k].default for k in keys}


def _plain(v: Any) -> Any:
    """TOML-friendly value: tuples -> lists, None -> "" (TOML has no null)."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return "" if v is None else v


def defaults() -> dict[str, Any]:
    """Every setting with its default, read from the code."""
    from arldiag.channels import DiscordSink, EmailSink, SlackSink
    from arldiag.collectors.collector import Collector
    from arldiag.detectors.registry import REGISTRY
    from arldiag.detectors.risk import calibrated_risk
    from arldiag.monitor import Monitor
    from arldiag.stabilize import Limits

    risk = calibrated_risk()  # the shipped defaults (fitted on dev runs by benchmarks/calibrate.py)
    mon = _signature_defaults(Monitor.__init__, MONITOR_KEYS)
    slack = _signature_defaults(SlackSink.__init__, ["mention_severity", "min_severity"])
    discord = _signature_defaults(DiscordSink.__init__, ["mention_severity", "min_severity"])
    email = _signature_defaults(EmailSink.__init__, [k for k in CHANNEL_KEYS["email"] if k != "host"])
    return {
        "aliases": {},  # logged name -> arldiag name, on top of arldiag/aliases.py (import and live record_step)
        "collector": {k: _plain(v) for k, v in _signature_defaults(Collector.__init__, COLLECTOR_KEYS).items()},
        "monitor": {k: _plain(v) for k, v in mon.items()},
        "risk": {f.name: _plain(getattr(risk, f.name)) for f in dataclasses.fields(risk)},
        "stabilize": {"policy": "", **{f.name: getattr(Limits(), f.name) for f in dataclasses.fields(Limits)}},
        "detectors": {name: {"enabled": True, **{k: _plain(v) for k, v in d.params.items()}}
                      for name, d in REGISTRY.items()},
        "alerts": {
            "slack": {"url": "", **slack, "mention": SlackSink.default_mention, "template": ""},
            "discord": {"url": "", **discord, "mention": DiscordSink.default_mention, "template": ""},
            "webhook": {"url": "", "min_severity": "warning"},
            "email": {"host": "", **{k: _plain(v) for k, v in email.items()}},
        },
    }


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is JSON-compatible for these values
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def render_default_file() -> str:
    """The text `arldiag init` writes: every default, with its meaning as a comment."""
    from arldiag.detectors.registry import REGISTRY
    from arldiag.detectors.risk import RiskConfig

    d = defaults()
    out = ["# arldiag.toml: detector parameters, risk settings, collector options and alert sinks.",
           "# Precedence: these values < environment (ARLDIAG_<SECTION>_<KEY>, e.g. ARLDIAG_ALERTS_SLACK_URL) <",
           "# keyword arguments. Put secrets (webhook URLs, SMTP passwords) in the environment, not here.",
           "# Written by `arldiag init` with every default; delete what you do not change.", ""]

    def section(name: str, values: Mapping[str, Any], meanings: Mapping[str, str], header: list[str] = ()):
        out.extend(f"# {h}" for h in header)
        out.append(f"[{name}]")
        for k, v in values.items():
            m = meanings.get(k)
            out.append(f"{k} = {_toml_value(v)}" + (f"  # {m}" if m else ""))
        out.append("")

    out += ["# Logged metric names -> arldiag's names, on top of the built-in table (docs/integrations/importers.md",
            "# \"Metric names\"), for `arldiag import` and a trainer's live record_step, e.g.",
            '# "train/my_entropy" = "entropy"   or   "eval/pass_at_1" = "task_score"', "[aliases]", ""]
    section("collector", d["collector"], COLLECTOR_KEYS)
    section("monitor", d["monitor"], MONITOR_KEYS)
    section("risk", d["risk"], {f.name: f.metadata["doc"] for f in dataclasses.fields(RiskConfig)},
            ["Online risk: detectors' levels -> one risk -> alert state."])
    section("stabilize", d["stabilize"], stabilize_keys(), ["arldiag train --auto-stabilize: the policy's bounds."])
    for name, vals in d["detectors"].items():
        det = REGISTRY[name]
        meanings = {"enabled": "run this detector", **{k: det.param_doc(k) for k in det.params}}
        section(f"detectors.{name}", vals, meanings, [f"{det.title}: {det.explanation}"[:300]])
    for ch, vals in d["alerts"].items():
        section(f"alerts.{ch}", vals, CHANNEL_KEYS[ch])
    return "\n".join(out)


def _merge(base: dict, new: Mapping, where: str, path: tuple = ()) -> None:
    """Merge ``new`` into ``base``; keys that ``base`` (the defaults) does not have are errors."""
    for k, v in new.items():
        p = path + (k,)
        if path == ("aliases",):  # [aliases]: free-form, logged name -> arldiag name (arldiag.aliases)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{where}: aliases.{k} must be an arldiag metric name (a string), got {v!r}")
            base[k] = v
            continue
        if k not in base:
            raise ValueError(f"{where}: unknown setting {'.'.join(p)!r}; known here: "
                             f"{', '.join(sorted(base)) or '(none)'}")
        if isinstance(base[k], dict):
            if not isinstance(v, Mapping):
                raise ValueError(f"{where}: {'.'.join(p)} must be a table, got {v!r}")
            _merge(base[k], v, where, p)
        else:
            base[k] = _coerce(base[k], v, where, ".".join(p))


def _coerce(default: Any, v: Any, where: str, name: str) -> Any:
    if isinstance(default, bool):
        ok = isinstance(v, bool)
    elif isinstance(default, (int, float)):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        v = float(v) if ok and isinstance(default, float) else v
    elif isinstance(default, list):
        ok = isinstance(v, list)
    else:
        ok = isinstance(v, str)
    if not ok:
        raise ValueError(f"{where}: {name} must be a {type(default).__name__} like {default!r}, got {v!r}")
    return v


def _env_overrides(tree: Mapping, env: Mapping[str, str], path: tuple = ()) -> dict:
    out: dict = {}
    for k, v in tree.items():
        p = path + (k,)
        if isinstance(v, dict):
            sub = _env_overrides(v, env, p)
            if sub:
                out[k] = sub
            continue
        name = env_name(p)
        if name in env:
            out[k] = _parse_env(env[name], v)
    return out


def env_name(path: tuple) -> str:
    return ENV_PREFIX + "_".join("".join(c if c.isalnum() else "_" for c in str(x)) for x in path).upper()


def _parse_env(text: str, default: Any) -> Any:
    if isinstance(default, str):
        return text
    try:
        return loads(f"v = {text}")["v"]
    except ValueError:
        return text  # reported by _coerce with the setting's name


def _dotted(kwargs: Mapping[str, Any]) -> dict:
    """{"risk.exit_steps": 4} or {"risk": {"exit_steps": 4}} -> nested."""
    out: dict = {}
    for k, v in kwargs.items():
        parts = k.split(".")
        cur = out
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v
    return out


@dataclasses.dataclass
class Settings:
    values: dict
    source: str | None = None  # the file read, if any
    _cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def collector_kwargs(self) -> dict[str, Any]:
        # "" is TOML's stand-in for None (e.g. dual_clip_c: None = take the run config's own setting)
        return {k: (None if v == "" else v) for k, v in self.values["collector"].items()}

    def detectors(self) -> list:
        from arldiag.detectors.registry import REGISTRY

        out = []
        for name, vals in self.values["detectors"].items():
            if vals["enabled"]:
                d = REGISTRY[name]
                params = {k: tuple(v) if isinstance(d.params[k], tuple) else v for k, v in vals.items()
                          if k != "enabled"}
                out.append(d.with_params(**params))
        return out

    def risk(self):
        from arldiag.detectors.risk import RiskConfig

        return RiskConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in self.values["risk"].items()})

    def risk_changes(self) -> dict[str, Any]:
        """The [risk] fields this file / environment / keywords set to something other than the shipped token-
        profile default (`arldiag init` writes every default, and those change nothing)."""
        if self._cache.get("risk_changes") is None:
            shipped = defaults()["risk"]
            self._cache["risk_changes"] = {k: tuple(v) if isinstance(v, list) else v
                                           for k, v in self.values["risk"].items() if v != shipped.get(k)}
        return dict(self._cache["risk_changes"])

    def risk_for(self, profile: str):
        """The risk settings of a profile ("tokens" or "steps", detectors.risk.PROFILES): its calibrated fit with
        this configuration's changes applied on top, each relative to the shipped (token) settings the file shows
        (RiskConfig.with_changes: of ``enter``, only the thresholds the user changed)."""
        from arldiag.detectors.risk import calibrated_risk

        return calibrated_risk(profile=profile).with_changes(self.risk_changes(), calibrated_risk())

    def detectors_changed(self) -> bool:
        """Whether any detector is disabled or has a parameter other than its default."""
        if self._cache.get("detectors_changed") is None:
            self._cache["detectors_changed"] = self.values["detectors"] != defaults()["detectors"]
        return self._cache["detectors_changed"]

    def channels(self) -> list:
        """The alert sinks whose url/host is set."""
        from arldiag.alerts import WebhookSink
        from arldiag.channels import DiscordSink, EmailSink, SlackSink

        a, out = self.values["alerts"], []
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

    def stabilize_policy(self) -> str | None:
        """The [stabilize] policy (None when unset)."""
        return self.values["stabilize"]["policy"] or None

    def stabilize_limits(self):
        from arldiag.stabilize import Limits

        return Limits(**{k: v for k, v in self.values["stabilize"].items() if k != "policy"})

    def monitor(self, **kwargs: Any):
        """A Monitor with these detectors, risk settings and sinks (``kwargs`` go to Monitor and win)."""
        from arldiag.monitor import Monitor

        m = self.values["monitor"]
        # no whole RiskConfig: the Evaluator picks the run's profile (token statistics or step scalars) and applies
        # only the [risk] keys this configuration changes on top of that profile's fitted state (risk_for)
        args = dict(detectors=self.detectors(), settings=self, sinks=list(m["sinks"]) + self.channels(),
                    stop_on=m["stop_on"] or None, min_severity=m["min_severity"])
        args.update(kwargs)
        return Monitor(**args)


def config_path(env: Mapping[str, str] | None = None) -> str | None:
    """The configuration file in force: $ARLDIAG_CONFIG, else ./arldiag.toml if it exists, else None."""
    env = os.environ if env is None else env
    return env.get(CONFIG_ENV) or (DEFAULT_FILE if Path(DEFAULT_FILE).is_file() else None)


def file_aliases(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``[aliases]`` table of the active arldiag.toml ($ARLDIAG_CONFIG, else ./arldiag.toml), read on its own
    (standard library only: the Collector reads it inside the training process); {} without a file or table.
    A malformed file is left to ``load`` to report: here it gives {}."""
    path = config_path(env)
    if not path:
        return {}
    try:
        table = loads(Path(path).read_text(encoding="utf-8")).get("aliases") or {}
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in table.items() if isinstance(v, str) and v} if isinstance(table, dict) else {}


_ACTIVE: dict[tuple, Settings] = {}


def active() -> Settings:
    """The configuration every consumer applies when it is not handed one: ``load()`` (./arldiag.toml or
    $ARLDIAG_CONFIG, then the environment), read once per process and file version (the file's path and mtime
    and the ARLDIAG_* environment are the cache key, so an edited file is read again)."""
    path = config_path()
    try:
        stamp = (str(Path(path).resolve()), Path(path).stat().st_mtime_ns) if path else None
    except OSError:
        stamp = (path, None)
    key = (stamp, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX))))
    hit = _ACTIVE.get(key)
    if hit is None:
        _ACTIVE.clear()
        hit = _ACTIVE[key] = load()
    return hit


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Defaults < file (``path``, else $ARLDIAG_CONFIG, else ./arldiag.toml if it exists) < environment <
    ``overrides`` (nested dicts or dotted names: ``load(**{"risk.exit_steps": 4})``, ``load(risk={...})``)."""
    env = os.environ if env is None else env
    values = defaults()
    source = None
    if path is None:
        path = config_path(env)
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"config: {str(p)!r} does not exist")
        try:
            data = loads(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"config: {p} is not valid TOML ({exc})") from None
        _merge(values, data, str(p))
        source = str(p)
    _merge(values, _env_overrides(values, env), "environment")
    _merge(values, _dotted(overrides), "keyword arguments")
    return Settings(values, source)
