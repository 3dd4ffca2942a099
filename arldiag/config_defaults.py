"""The default of every setting, read from the code that owns it (each detector's ``params``, the calibrated
``RiskConfig``, the Collector's, Monitor's and channels' signatures, the stabilizer's ``Limits``), and the text
`arldiag init` writes with each default's meaning.

``arldiag.settings`` sits below all of these, so it reads the defaults as plain data from the file this module
writes (``settings.DEFAULTS_FILE``); ``python -m arldiag.config_defaults`` regenerates it after a default changes
in the code (a detector's parameter, a fresh calibration), and tests/config/test_settings_defaults.py fails while
the two disagree.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from arldiag.channels import DiscordSink, EmailSink, SlackSink
from arldiag.collectors.collector import Collector
from arldiag.detectors.registry import REGISTRY
from arldiag.detectors.risk import RiskConfig, calibrated_risk
from arldiag.monitor import Monitor
from arldiag.settings import (CHANNEL_KEYS, COLLECTOR_KEYS, DEFAULTS_FILE, MONITOR_KEYS, STABILIZE_POLICY_DOC,
                              defaults)
from arldiag.stabilize import Limits


def stabilize_keys() -> dict[str, str]:
    """[stabilize]: the policy, then every field of arldiag.stabilize.Limits with its doc (the Stabilizer's own
    bounds and each action's, declared on its ActionSpec)."""
    return {"policy": STABILIZE_POLICY_DOC, **{f.name: f.metadata["doc"] for f in dataclasses.fields(Limits)}}


def _signature_defaults(fn: Any, keys) -> dict[str, Any]:
    sig = inspect.signature(fn)
    return {k: sig.parameters[k].default for k in keys}


def _plain(v: Any) -> Any:
    """TOML-friendly value: tuples -> lists, None -> "" (TOML has no null)."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return "" if v is None else v


def build() -> dict[str, Any]:
    """Every setting with its default, read from the code (what settings_defaults.json holds)."""
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
    d = defaults()  # what load() starts from (the file this module writes)
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


def render() -> str:
    """settings_defaults.json's text for the code as it is."""
    return json.dumps(build(), indent=1) + "\n"


def write(path: str | Path = DEFAULTS_FILE) -> bool:
    """Write the defaults file when it differs from the code's defaults; whether it was rewritten."""
    path, text = Path(path), render()
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.write_text(text, encoding="utf-8")
    return True


if __name__ == "__main__":
    changed = write(sys.argv[1] if len(sys.argv) > 1 else DEFAULTS_FILE)
    print(f"{'wrote' if changed else 'unchanged:'} {sys.argv[1] if len(sys.argv) > 1 else DEFAULTS_FILE}")
