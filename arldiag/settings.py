"""``arldiag.toml``: detector parameters, risk settings, collector options and alert sinks in one file.

Precedence, lowest first: the defaults, the file, the environment, keyword arguments. The defaults are plain data,
``settings_defaults.json`` next to this module, generated from the code that owns each value (each detector's
``params``, the calibrated ``RiskConfig``, the Collector's, Monitor's and channels' signatures, the stabilizer's
``Limits``) by ``python -m arldiag.config_defaults``; tests/config/test_settings_defaults.py fails when the two
disagree. So this module imports nothing of arldiag but its TOML reader: it turns the file, the environment and the
overrides into plain, validated values, and the objects built from them live with those objects
(``arldiag.monitor.monitor_of``, ``channels.channels_of``, ``detectors.registry.configured``,
``detectors.risk.risk_of``/``risk_for``, ``stabilize.limits_of``).

Every setting has an environment name, ``ARLDIAG_`` + its path in capitals joined by "_" (``alerts.slack.url`` ->
``ARLDIAG_ALERTS_SLACK_URL``), which is where secrets such as webhook URLs and SMTP passwords belong. Values from the environment are parsed as TOML values (``3``, ``0.5``, ``true``, ``[1, 2]``),
and as plain strings otherwise.

    settings = arldiag.settings.load()                       # ./arldiag.toml or $ARLDIAG_CONFIG, if present
    col = arldiag.Collector("runs/x", monitor=monitor_of(settings), **settings.collector_kwargs())

`arldiag init` writes a file with every default and its meaning.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Mapping

from arldiag._toml import loads

ENV_PREFIX = "ARLDIAG_"
CONFIG_ENV = "ARLDIAG_CONFIG"
DEFAULT_FILE = "arldiag.toml"
# every default, generated from the code by arldiag.config_defaults (a test checks that they agree)
DEFAULTS_FILE = Path(__file__).with_name("settings_defaults.json")

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


_DEFAULTS: dict = {}


def defaults() -> dict[str, Any]:
    """Every setting with its default (a fresh copy): settings_defaults.json, read once per process."""
    if not _DEFAULTS:
        try:
            _DEFAULTS.update(json.loads(DEFAULTS_FILE.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"settings: cannot read the defaults {DEFAULTS_FILE} ({exc}); regenerate it with "
                               "`python -m arldiag.config_defaults`") from None
    return copy.deepcopy(_DEFAULTS)


def _merge(base: dict, new: Mapping, where: str, path: tuple = ()) -> None:
    """Merge ``new`` into ``base``; keys that ``base`` (the defaults) does not have are errors."""
    for k, v in new.items():
        p = path + (k,)
        if path == ("aliases",):  # [aliases]: free-form, logged name -> arldiag name (arldiag.aliases); "" or
            # "ignore" leaves the logged name unplaced (arldiag.names.IGNORE_VALUES)
            if not isinstance(v, str):
                raise ValueError(f"{where}: aliases.{k} must be an arldiag metric name (a string), or \"ignore\", "
                                 f"got {v!r}")
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

    def risk_changes(self) -> dict[str, Any]:
        """The [risk] fields this file / environment / keywords set to something other than the shipped token-
        profile default (`arldiag init` writes every default, and those change nothing)."""
        if self._cache.get("risk_changes") is None:
            shipped = defaults()["risk"]
            self._cache["risk_changes"] = {k: tuple(v) if isinstance(v, list) else v
                                           for k, v in self.values["risk"].items() if v != shipped.get(k)}
        return dict(self._cache["risk_changes"])

    def detectors_changed(self) -> bool:
        """Whether any detector is disabled or has a parameter other than its default."""
        if self._cache.get("detectors_changed") is None:
            self._cache["detectors_changed"] = self.values["detectors"] != defaults()["detectors"]
        return self._cache["detectors_changed"]

    def stabilize_policy(self) -> str | None:
        """The [stabilize] policy (None when unset)."""
        return self.values["stabilize"]["policy"] or None


def config_path(env: Mapping[str, str] | None = None) -> str | None:
    """The configuration file in force: $ARLDIAG_CONFIG, else ./arldiag.toml if it exists, else None."""
    env = os.environ if env is None else env
    return env.get(CONFIG_ENV) or (DEFAULT_FILE if Path(DEFAULT_FILE).is_file() else None)


def file_aliases(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``[aliases]`` table of the active arldiag.toml ($ARLDIAG_CONFIG, else ./arldiag.toml), read on its own
    (standard library only: the Collector reads it inside the training process); {} without a file or table. A
    name mapped to "" or "ignore" is kept: it leaves that name unplaced (aliases.MetricResolver).
    A malformed file is left to ``load`` to report: here it gives {}."""
    path = config_path(env)
    if not path:
        return {}
    try:
        table = loads(Path(path).read_text(encoding="utf-8")).get("aliases") or {}
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in table.items() if isinstance(v, str)} if isinstance(table, dict) else {}


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
