"""Choosing a policy: the flag, the [stabilize] section of arldiag.toml (policy and limits), and one-line errors."""
from __future__ import annotations

import pytest

from arldiag.settings import load
from arldiag.stabilize import Limits, limits_of
from arldiag.trainer.config import make_config
from arldiag.trainer.loop import stabilize_policy


def test_the_section_sets_policy_and_limits(tmp_path, monkeypatch):
    f = tmp_path / "arldiag.toml"
    f.write_text('[stabilize]\npolicy = "conservative"\ncooldown = 2\nlr_floor = 0.25\n')
    s = load(f, env={})
    assert s.stabilize_policy() == "conservative"
    assert limits_of(s) == Limits(cooldown=2, lr_floor=0.25)
    assert load(env={}).stabilize_policy() is None  # default: off
    monkeypatch.setenv("ARLDIAG_CONFIG", str(f))
    assert stabilize_policy(make_config("cispo", env="toy")) == "conservative"     # flag unset: the file's
    assert stabilize_policy(make_config("cispo", env="toy", auto_stabilize="off")) is None
    assert stabilize_policy(make_config("cispo", env="toy", auto_stabilize="default")) == "default"
    monkeypatch.delenv("ARLDIAG_CONFIG")
    monkeypatch.chdir(tmp_path / "..")
    assert stabilize_policy(make_config("cispo", env="toy")) is None                 # no file: off


def test_bad_settings_fail_with_one_line_naming_them(tmp_path, capsys):
    with pytest.raises(ValueError, match="stabilize.checkpoint_every must be >= 1"):
        Limits(checkpoint_every=0)
    with pytest.raises(ValueError, match="stabilize.lr_floor must be in"):
        Limits(lr_floor=0.0)
    with pytest.raises(ValueError, match="auto_stabilize: unknown policy 'nope'"):
        make_config("cispo", auto_stabilize="nope")
    with pytest.raises(ValueError, match="use --monitor alert"):
        make_config("cispo", auto_stabilize="default", monitor="stop")
    from arldiag.cli import main

    assert main(["train", "--auto-stabilize", "no.such.module:fn", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load 'no.such.module:fn'" in err[0]
