"""The shipped behaviour-cloning warm start: the lag set's runs load it from the package (never retrain it), and
run.json records which warm start a run started from."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

import arldiag.trainer.bc as bc
from arldiag.trainer.config import make_config
from arldiag.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]


def lag_setting() -> dict:
    sys.path.insert(0, str(ROOT / "sample_runs"))
    try:
        import suite
    finally:
        sys.path.remove(str(ROOT / "sample_runs"))
    return dict(suite.LAG)


def test_shipped_file_is_small_and_package_data():
    files = sorted(bc.SHIPPED_DIR.glob("*.pt"))
    assert files, "no shipped warm start"
    assert all(f.stat().st_size < 2_000_000 for f in files)  # one tiny-model state dict each (1.2 MB)
    assert bc.shipped_fingerprints() == sorted(f.stem.split("-", 1)[1] for f in files)


def _no_cloning(*args, **kwargs):
    raise AssertionError("behaviour cloning ran although the warm start is shipped")


@pytest.mark.parametrize("seed", [73, 4])
def test_lag_set_loads_the_shipped_warm_start(seed, tmp_path, monkeypatch):
    monkeypatch.setattr(bc, "behaviour_clone", _no_cloning)
    options = {k: v for k, v in lag_setting().items() if k not in ("steps", "eval_every")}
    out = tmp_path / f"run{seed}"
    cfg = make_config("cispo", **options, seed=seed, steps=0, eval_every=0, out=str(out),
                      bc_cache=str(tmp_path / "empty-cache"))
    train(cfg, log=lambda line: None)
    record = json.loads((out / "run.json").read_text())["config"]["warm_start"]
    assert record["source"] == "shipped"
    assert record["fingerprint"] in bc.shipped_fingerprints()
    shipped = bc.SHIPPED_DIR / f"sokoban-{record['fingerprint']}.pt"
    assert record["sha256"] == hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert not (tmp_path / "empty-cache").exists()  # nothing trained, nothing cached


def test_unshipped_bc_config_trains_then_caches(tmp_path):
    logs: list[str] = []
    common = dict(env="sokoban", init="bc", bc_episodes=4, bc_steps=2, bc_seed=5, hidden_size=32, steps=0,
                  eval_every=0, bc_cache=str(tmp_path / "cache"))
    train(make_config("cispo", **common, seed=1, out=str(tmp_path / "a")), log=logs.append)
    first = json.loads((tmp_path / "a" / "run.json").read_text())["config"]["warm_start"]
    assert first["source"] == "trained" and first["fingerprint"] not in bc.shipped_fingerprints()
    # another run seed with the same BC settings shares the warm start: loaded from the cache, same weights
    train(make_config("cispo", **common, seed=2, out=str(tmp_path / "b")), log=logs.append)
    second = json.loads((tmp_path / "b" / "run.json").read_text())["config"]["warm_start"]
    assert second == dict(first, source="cache")
