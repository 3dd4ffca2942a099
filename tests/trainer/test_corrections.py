"""The always-on off-policy corrections (losses.CORRECTIONS) against hand-worked and numpy computations."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arldiag.trainer.config import TrainConfig, make_config
from arldiag.trainer.losses import CORRECTIONS, opsm_sample_mask, policy_loss, tis_token_weight


def cfg(**kw):
    base = dict(algo="cispo", clip_low=1.0, clip_high=0.2, loss_agg="token-mean", kl_coef=0.0, nalis_mask=False,
                nalis_delta=0.223, opsm_delta=None, tis_cap=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_registry_names_its_config_fields():
    # masks first (on the uncorrected advantages), then weights
    assert list(CORRECTIONS) == ["nalis", "opsm", "overlong", "tis"]
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for name in ("nalis_mask", "nalis_delta", "opsm_delta", "mask_truncated", "tis_cap"):
        assert fields[name].metadata["help"], name
    off = make_config("cispo")
    assert not any(c.enabled(off) for name, c in CORRECTIONS.items() if name != "nalis")
    on = make_config("cispo", opsm_delta=0.03, tis_cap=2.0)
    assert CORRECTIONS["opsm"].enabled(on) and CORRECTIONS["tis"].enabled(on)
    with pytest.raises(ValueError, match="tis_cap"):
        make_config("cispo", tis_cap=0.0)
    with pytest.raises(ValueError, match="opsm_delta"):
        make_config("cispo", opsm_delta=-0.1)


def test_opsm_mask_hand_worked():
    # drift d_i = mean_t (lp_behaviour - lp) over the masked tokens; delta 0.03
    lp = torch.tensor([[-1.0, -2.0, -1.0], [-1.0, -1.0, 0.0], [-0.5, -0.5, -0.5], [-1.0, -1.0, -1.0]])
    behaviour = torch.tensor([[-0.9, -1.9, -1.0], [-1.02, -1.02, 5.0], [-0.4, -0.4, -0.4], [-1.1, -0.8, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([-1.0, -1.0, 0.5, -2.0])
    # sample 0: d = 0.2/3 = 0.0667 > 0.03 and A < 0 -> dropped
    # sample 1: the padded slot's 5.0 does not count: d = -0.02 -> kept
    # sample 2: d = 0.1 but A > 0 -> kept
    # sample 3: d = (-0.1 + 0.2 + 0) / 3 = 0.0333 > 0.03 and A < 0 -> dropped
    keep = opsm_sample_mask(lp, behaviour, adv, mask, 0.03)
    assert keep.tolist() == [0.0, 1.0, 1.0, 0.0]
    d = ((behaviour - lp) * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(d.numpy(), [0.2 / 3, -0.02, 0.1, 0.1 / 3], atol=1e-6)


def test_tis_weight_is_the_truncated_ratio():
    rng = np.random.default_rng(0)
    old, roll = rng.normal(-1.5, 0.5, (3, 5)), rng.normal(-1.5, 0.5, (3, 5))
    w = tis_token_weight(torch.tensor(old), torch.tensor(roll), 2.0).numpy()
    np.testing.assert_allclose(w, np.minimum(np.exp(old - roll), 2.0), rtol=1e-12)
    assert (w <= 2.0).all() and (w > 0).all()


def _cispo_numpy(lp, old, adv, mask, w=None):
    """CISPO token-mean loss -mean_t sg[clip(r, 0, 1.2)] * w_t * A * lp_t, and its gradient in lp."""
    r = np.clip(np.exp(lp - old), 0.0, 1.2)
    w = np.ones_like(lp) if w is None else w
    coef = -r * w * adv[:, None] * mask / mask.sum()
    return float((coef * lp).sum()), coef


def test_policy_loss_with_tis_matches_numpy():
    rng = np.random.default_rng(1)
    old = rng.normal(-1.2, 0.3, (4, 3))
    lp = old + rng.normal(0, 0.2, (4, 3))
    roll = old + rng.normal(0, 0.9, (4, 3))  # a stale sampler: some ratios pi_old/pi_sampler above the cap
    adv = np.array([1.0, -0.5, 2.0, -1.5])
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=float)
    t = torch.tensor(lp, requires_grad=True)
    loss, stats = policy_loss(cfg(tis_cap=2.0), t, torch.tensor(old), torch.tensor(adv), torch.tensor(mask),
                              logp_rollout=torch.tensor(roll))
    w = np.minimum(np.exp(old - roll), 2.0)
    expected, grad = _cispo_numpy(lp, old, adv, mask, w)
    assert float(loss) == pytest.approx(expected, rel=1e-10)
    loss.backward()
    np.testing.assert_allclose(t.grad.numpy(), grad, rtol=1e-10)
    assert stats["tis_weight_mean"] == pytest.approx((w * mask).sum() / mask.sum(), rel=1e-10)
    assert stats["tis_truncated_frac"] == pytest.approx(((np.exp(old - roll) > 2.0) * mask).sum() / mask.sum())
    assert 0 < stats["tis_truncated_frac"] < 1  # the example exercises the cap
    assert stats["opsm_masked_frac"] == 0.0 and stats["nalis_masked_frac"] == 0.0


def test_policy_loss_with_opsm_drops_stale_negative_samples():
    old = np.zeros((3, 2))
    lp = np.array([[-0.01, -0.01], [-0.01, -0.01], [0.0, 0.0]])
    # against the recompute (old) every drift is 0.01; against the sampler sample 0 drifted 0.2 and sample 2 0.3
    roll = np.array([[0.19, 0.19], [-0.01, -0.01], [0.3, 0.3]])
    adv = np.array([-1.0, -1.0, 1.0])
    mask = np.ones((3, 2))
    t = torch.tensor(lp, requires_grad=True)
    loss, stats = policy_loss(cfg(opsm_delta=0.03), t, torch.tensor(old), torch.tensor(adv), torch.tensor(mask),
                              logp_rollout=torch.tensor(roll))
    assert stats["opsm_masked_frac"] == pytest.approx(1 / 3)
    kept = mask * np.array([[0.0], [1.0], [1.0]])
    expected, grad = _cispo_numpy(lp, old, adv, kept)
    assert float(loss) == pytest.approx(expected, rel=1e-10)
    loss.backward()
    np.testing.assert_allclose(t.grad.numpy(), grad, rtol=1e-10)
    assert (t.grad[0] == 0).all()
    # the same batch under ARLArena's mask at the same delta: the recompute drift 0.01 drops nothing
    _, nalis = policy_loss(cfg(nalis_mask=True, nalis_delta=0.03), torch.tensor(lp), torch.tensor(old),
                           torch.tensor(adv), torch.tensor(mask), logp_rollout=torch.tensor(roll))
    assert nalis["nalis_masked_frac"] == 0.0


def test_plain_loss_is_unchanged_by_sampler_logps():
    rng = np.random.default_rng(2)
    old = rng.normal(-1, 0.3, (3, 4))
    lp, roll = old + rng.normal(0, 0.1, (3, 4)), old + rng.normal(0, 0.5, (3, 4))
    adv, mask = np.array([1.0, -1.0, 0.3]), np.ones((3, 4))
    a, stats = policy_loss(cfg(), torch.tensor(lp), torch.tensor(old), torch.tensor(adv), torch.tensor(mask),
                           logp_rollout=torch.tensor(roll))
    b, _ = policy_loss(cfg(), torch.tensor(lp), torch.tensor(old), torch.tensor(adv), torch.tensor(mask))
    assert float(a) == float(b) == pytest.approx(_cispo_numpy(lp, old, adv, mask)[0], rel=1e-12)
    assert stats["tis_weight_mean"] == 1.0 and stats["tis_truncated_frac"] == 0.0
