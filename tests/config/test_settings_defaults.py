"""settings_defaults.json: the plain-data defaults arldiag.settings reads (it sits below the code that owns them)
agree with that code (arldiag.config_defaults.build), and a missing or stale file is caught."""
import inspect
import json

import pytest

from arldiag import config_defaults, settings
from arldiag.collectors.collector import Collector
from arldiag.detectors.registry import REGISTRY
from arldiag.stabilize import Limits


def test_the_defaults_file_agrees_with_the_code():
    text = settings.DEFAULTS_FILE.read_text(encoding="utf-8")
    assert text == config_defaults.render(), ("arldiag/settings_defaults.json is stale: a default changed in the code "
                                              "(a detector parameter, a signature, calibrated.json); run "
                                              "`python -m arldiag.config_defaults`")
    data = json.loads(text)
    # spot checks against the owners themselves, not through build()
    params = inspect.signature(Collector).parameters
    assert [data["collector"][k] for k in ("token_sample_rate", "flush_every", "strict")] == [
        params[k].default for k in ("token_sample_rate", "flush_every", "strict")]
    assert list(data["detectors"]) == list(REGISTRY)
    assert data["stabilize"]["cooldown"] == Limits().cooldown


def test_defaults_is_a_fresh_copy_each_call():
    d = settings.defaults()
    d["risk"]["exit_steps"] = -1
    d["detectors"].clear()
    fresh = settings.defaults()
    assert fresh["risk"]["exit_steps"] != -1 and list(fresh["detectors"]) == list(REGISTRY)


def test_write_rewrites_only_a_stale_file(tmp_path):
    f = tmp_path / "defaults.json"
    assert config_defaults.write(f) is True
    assert json.loads(f.read_text()) == config_defaults.build()
    assert config_defaults.write(f) is False
    data = json.loads(f.read_text())
    data["risk"]["exit_steps"] += 1
    f.write_text(json.dumps(data, indent=1) + "\n")
    assert config_defaults.write(f) is True and json.loads(f.read_text()) == config_defaults.build()


def test_a_missing_defaults_file_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "DEFAULTS_FILE", tmp_path / "nope.json")
    monkeypatch.setattr(settings, "_DEFAULTS", {})
    with pytest.raises(RuntimeError, match=r"nope\.json.*python -m arldiag\.config_defaults"):
        settings.load(env={})
