"""Framework adapters map verl/TRL names onto the Collector API."""
from types import SimpleNamespace

import numpy as np
import pytest

import arldiag
from arldiag.collectors.verl import record_verl_rollout, record_verl_update, stable_ids


def test_verl_adapter_records_same_as_direct_call(tmp_path):
    rng = np.random.default_rng(1)
    B, T = 6, 5
    old = rng.normal(-1, 0.3, (B, T)).astype(np.float32)
    new = old + rng.normal(0, 0.1, (B, T)).astype(np.float32)
    data = {"old_log_probs": old, "advantages": rng.normal(size=(B, T)).astype(np.float32),
            "response_mask": np.ones((B, T), bool), "ref_log_prob": old - 0.1,
            "responses": rng.integers(0, 50, (B, T)), "token_level_scores": np.eye(B, T)}
    uids = ["a", "a", "b", "b", "c", "c"]
    with arldiag.Collector(tmp_path / "v") as col:
        record_verl_rollout(col, 0, data, uids=uids, sample_ids=[f"s{i}" for i in range(B)])
        record_verl_update(col, 0, 0, data, log_prob=new, sample_ids=[f"s{i}" for i in range(B)])
        m = col.record_step(0)
    assert m["ppo_kl"] == pytest.approx(float(np.mean(old - new)), rel=1e-5)
    assert m["kl_ref_k1"] == pytest.approx(float(np.mean(new - (old - 0.1))), rel=1e-5)
    assert m["n_groups"] == 3 and m["reward_mean"] == pytest.approx(5 / 6)
    assert stable_ids(["a"])[0] == stable_ids(["a"])[0] != stable_ids(["b"])[0]
    with pytest.raises(ValueError, match="missing verl keys"):
        record_verl_update(col, 0, 0, {"advantages": 1}, log_prob=new)


def test_trl_callback_forwards_logs_and_stops(tmp_path):
    pytest.importorskip("transformers")
    from arldiag.collectors.trl import ArldiagCallback

    col = arldiag.Collector(tmp_path / "t")
    cb = ArldiagCallback(col)
    control = SimpleNamespace(should_training_stop=False)
    cb.on_log(None, SimpleNamespace(global_step=3), control,
              logs={"clip_ratio/low_mean": 0.1, "grad_norm": 2.5, "note": "x", "bad": float("nan")})
    col.request_stop("test")
    cb.on_log(None, SimpleNamespace(global_step=4), control, logs={"grad_norm": 1.0})
    assert control.should_training_stop
    cb.on_train_end(None, None, control)
    run = arldiag.open_run(tmp_path / "t")
    assert run.sql('select step, "clip_ratio/low_mean", grad_norm from steps order by step').fetchall() == [
        (3, 0.1, 2.5), (4, None, 1.0)]
