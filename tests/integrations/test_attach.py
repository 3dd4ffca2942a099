"""arldiag.attach: recognises TRL and verl, wires what it can and lists what it cannot."""
import pytest

from integrations.need import need

import arldiag  # noqa: E402


def test_attach_trl_grpo_trainer_records_tokens(tmp_path, capsys):
    need("trl")
    from integrations.trl_setup import grpo_trainer

    tr = grpo_trainer(str(tmp_path / "out"), max_steps=2, beta=0.0)
    att = arldiag.attach(tr, tmp_path / "run")
    assert att.framework == "trl" and type(tr).__name__ == "ArldiagGRPOTrainer"
    printed = capsys.readouterr().err
    assert "NOT recorded: KL to the reference: beta = 0" in printed
    assert any("mismatch" in m for m in att.missing)
    tr.train()
    run = arldiag.open_run(tmp_path / "run")
    rows = run.sql("select step, n_tokens, entropy, kl_ref_k3 from steps order by step").fetchall()
    assert [r[0] for r in rows] == [1, 2] and all(r[1] > 0 and r[2] > 0 for r in rows)
    assert all(r[3] is None for r in rows)  # beta = 0: no reference, reported as missing, recorded as null
    logged = [h["entropy"] for h in tr.state.log_history if "entropy" in h]
    assert [r[2] for r in rows] == pytest.approx(logged, rel=1e-4)


def test_attach_verl_config_sets_loss_mode_and_run(tmp_path, monkeypatch):
    need("verl")
    from omegaconf import OmegaConf

    from arldiag.collectors import verl_loss

    monkeypatch.setenv(verl_loss.RUN_ENV, "")  # so that teardown removes what attach sets
    cfg = OmegaConf.create({"actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "gspo"}}}})
    att = arldiag.attach(cfg, tmp_path / "v", quiet=True)
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "arldiag_gspo"
    import os

    assert os.environ[verl_loss.RUN_ENV] == str(tmp_path / "v")
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    assert get_policy_loss_fn("arldiag_gspo") is not None
    assert any("rollout side" in m for m in att.missing)


def test_attach_rejects_unknown_objects(tmp_path):
    with pytest.raises(ValueError, match="trainer_or_config"):
        arldiag.attach(object(), tmp_path / "x")
