"""The reference trainer carries out every action: a rollback restores policy and optimizer bit for bit (keeping
the learning rate), lr scaling reaches the optimizer's param groups, the mask and the clip reach the loss."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arldiag.stabilize import Stabilizable
from arldiag.trainer.config import make_config
from arldiag.trainer.losses import policy_loss
from arldiag.trainer.stabilize import TrainerControls


def tiny(algo="cispo", **kw):
    return make_config(algo, env="toy", out="unused", init="scratch", **kw)


def model_and_optimizer(lr=1e-3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def train_steps(model, opt, n, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(16, 4, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_controls_implement_the_protocol_and_report_settings():
    model, opt = model_and_optimizer(2e-4)
    c = TrainerControls(tiny(), model, opt)
    assert isinstance(c, Stabilizable)
    assert c.settings() == {"lr": 2e-4, "clip_low": 1.0, "clip_high": 0.2, "algo": "cispo", "seq_clip": False,
                            "nalis_mask": False, "nalis_delta": 0.223, "mask_truncated": False, "ent_coef": 0.0}


def test_rollback_restores_weights_and_optimizer_bit_for_bit_and_keeps_the_lr():
    model, opt = model_and_optimizer()
    train_steps(model, opt, 3, seed=1)  # Adam has state (exp_avg, exp_avg_sq, step) by now
    c = TrainerControls(tiny(), model, opt)
    c.checkpoint(7)
    want_w = {k: v.detach().clone() for k, v in model.state_dict().items()}
    want_s = {i: {k: v.clone() for k, v in st.items()} for i, st in enumerate(opt.state.values())}
    train_steps(model, opt, 4, seed=2)
    assert not all(torch.equal(want_w[k], v) for k, v in model.state_dict().items())
    c.set_lr(2.5e-4)
    assert c.rollback() == {"to_step": 7}
    for k, v in model.state_dict().items():
        assert torch.equal(v, want_w[k]), k
    for i, st in enumerate(opt.state.values()):
        for k, v in st.items():
            assert torch.equal(v, want_s[i][k]), (i, k)
    assert [g["lr"] for g in opt.param_groups] == [2.5e-4]
    # the restored copy is not aliased: training on after the rollback leaves nothing shared with the checkpoint
    with pytest.raises(RuntimeError, match="no checkpoint"):
        c.rollback()  # restored once: never reused


def test_set_lr_reaches_every_param_group_and_the_config():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW([{"params": [model.weight]}, {"params": [model.bias]}], lr=1e-4)
    cfg = tiny(lr=1e-4)
    c = TrainerControls(cfg, model, opt)
    out = c.set_lr(1e-4 * 0.5)
    assert [g["lr"] for g in opt.param_groups] == [5e-5, 5e-5] and cfg.lr == 5e-5
    assert out == {"before": {"lr": 1e-4}, "after": {"lr": 5e-5}}


def _batch():
    """Two samples, 3 tokens: sample 0 has A = -1 and drifted (mean logp_old - logp = 0.05), sample 1 A = +1."""
    logp_old = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    logp = (logp_old + torch.tensor([[-0.05, -0.05, -0.05], [0.01, 0.0, -0.01]])).requires_grad_(True)
    adv = torch.tensor([-1.0, 1.0])
    mask = torch.ones(2, 3)
    return logp, logp_old, adv, mask


def test_the_mask_switched_on_reaches_the_loss():
    cfg = tiny()
    c = TrainerControls(cfg, torch.nn.Linear(1, 1), torch.optim.AdamW(torch.nn.Linear(1, 1).parameters()))
    logp, logp_old, adv, mask = _batch()
    loss, stats = policy_loss(cfg, logp, logp_old, adv, mask)
    loss.backward()
    assert stats["nalis_masked_frac"] == 0.0 and logp.grad[0].abs().sum() > 0
    c.set_nalis_mask(0.01)  # sample 0: A < 0 and drift 0.05 > 0.01 -> masked; sample 1: A > 0 -> kept
    logp, logp_old, adv, mask = _batch()
    loss, stats = policy_loss(cfg, logp, logp_old, adv, mask)
    loss.backward()
    assert stats["nalis_masked_frac"] == 0.5
    assert torch.equal(logp.grad[0], torch.zeros(3)) and logp.grad[1].abs().sum() > 0
    # CISPO over the kept tokens only (token-mean over 3 tokens): -sg[clip(r)] * A * logp
    r = np.exp([0.01, 0.0, -0.01])
    want = float(np.mean(-np.clip(r, 0.0, 1.2) * 1.0 * np.array([-1.99, -2.0, -2.01])))
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)


def test_clip_and_sequence_clip_reach_the_loss():
    cfg = tiny("grpo", dual_clip_c=0.0)
    c = TrainerControls(cfg, torch.nn.Linear(1, 1), torch.optim.AdamW(torch.nn.Linear(1, 1).parameters()))
    c.set_clip(0.005, 0.005)
    logp, logp_old, adv, mask = _batch()
    _, stats = policy_loss(cfg, logp, logp_old, adv, mask)
    # token ratios of sample 1: exp(0.01) > 1.005 with A > 0 -> clipped high (1 of 6 tokens)
    assert stats["clipfrac_high"] == pytest.approx(1 / 6)
    c.use_sequence_clip(3e-3, 4e-3)
    assert cfg.algo == "gspo" and c.settings()["seq_clip"]
    logp, logp_old, adv, mask = _batch()
    loss, _ = policy_loss(cfg, logp, logp_old, adv, mask)
    # GSPO: s_i = exp(mean_t(logp - logp_old)); L = token-mean of max(-A s, -A clip(s, 1-3e-3, 1+4e-3))
    s = np.exp([-0.05, 0.0])
    a = np.array([-1.0, 1.0])
    per = np.maximum(-a * s, -a * np.clip(s, 1 - 3e-3, 1 + 4e-3))
    assert float(loss.detach()) == pytest.approx(float(np.mean(np.repeat(per, 3))), abs=1e-7)
    assert math.isclose(cfg.clip_low, 3e-3) and math.isclose(cfg.clip_high, 4e-3)
