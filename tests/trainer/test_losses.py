"""Each loss's value and gradient against its formula (ALGORITHMS.md), computed independently in numpy."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arldiag.trainer.losses import (LOSSES, aggregate, k3_kl, nalis_sample_mask, policy_loss, seq_log_ratio,
                                    turn_log_ratio)

# two samples, four token slots; sample 1 has a padded last slot
LOGP_OLD = np.array([[-1.0, -2.0, -0.5, -1.5], [-0.7, -1.2, -2.0, 0.0]])
DELTA = np.array([[0.5, -0.4, 0.05, 1.2], [-0.6, 0.1, -0.05, 0.0]])  # logp - logp_old
MASK = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
ADV = np.array([1.5, -2.0])


def cfg(**kw):
    base = dict(algo="grpo", clip_low=0.2, clip_high=0.28, dual_clip_c=0.0, tau_pos=1.0, tau_neg=1.05,
                loss_agg="token-mean", kl_coef=0.0, nalis_mask=False, nalis_delta=0.223)
    base.update(kw)
    return SimpleNamespace(**base)


def run(name, c, adv=ADV, delta=DELTA, mask=MASK, turn_ids=None):
    logp = torch.tensor(LOGP_OLD + delta, dtype=torch.float64, requires_grad=True)
    loss, stats = LOSSES[name](logp, torch.tensor(LOGP_OLD), torch.tensor(adv), torch.tensor(mask), c,
                               turn_ids=turn_ids)
    loss.backward()
    return float(loss.detach()), logp.grad.numpy(), stats


def token_mean_weights(mask):
    return mask / mask.sum()


def test_grpo_token_clip_value_and_gradient():
    c = cfg()
    r = np.exp(DELTA)
    A = ADV[:, None] * np.ones_like(r)
    unclipped, clipped = -A * r, -A * np.clip(r, 0.8, 1.28)
    L = np.maximum(unclipped, clipped)
    w = token_mean_weights(MASK)
    expected = (L * w).sum()
    # d/dlp of -A r is -A r; the clipped branch has zero gradient where r is outside the range
    active_unclipped = unclipped >= clipped
    expected_grad = np.where(active_unclipped, -A * r, 0.0) * w
    loss, grad, stats = run("grpo", c)
    assert loss == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)
    # r = e^0.5 and e^1.2 exceed 1.28 with A > 0: two clip-high tokens out of 7
    assert stats["clipfrac_high"] == pytest.approx(2 / 7)
    assert stats["clipfrac_low"] == pytest.approx(1 / 7)  # r = e^-0.6 < 0.8 with A < 0


def test_grpo_dual_clip_caps_negative_advantage_loss():
    c = cfg(dual_clip_c=3.0, clip_high=0.2)
    delta = np.array([[np.log(5.0), 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = np.array([-1.0, 1.0])
    mask = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    loss, grad, _ = run("grpo", c, adv=adv, delta=delta, mask=mask)
    # max(-A*5, -A*1.2) = 5 > -A*c = 3, so the dual clip gives 3 and no gradient
    assert loss == pytest.approx(3.0)
    assert grad[0, 0] == pytest.approx(0.0)
    loss_nodual, grad_nodual, _ = run("grpo", cfg(clip_high=0.2), adv=adv, delta=delta, mask=mask)
    assert loss_nodual == pytest.approx(5.0)
    assert grad_nodual[0, 0] == pytest.approx(5.0)  # d(-A r)/dlp = -A r = 5


def test_gspo_sequence_clip_value_and_gradient():
    c = cfg(algo="gspo", clip_low=0.1, clip_high=0.1, loss_agg="seq-mean-token-mean")
    n = MASK.sum(1)
    s = np.exp((DELTA * MASK).sum(1) / n)  # geometric-mean sequence ratio
    L = np.maximum(-ADV * s, -ADV * np.clip(s, 0.9, 1.1))
    expected = L.mean()
    active = (-ADV * s) >= (-ADV * np.clip(s, 0.9, 1.1))
    expected_grad = (np.where(active, -ADV * s, 0.0) / n / 2)[:, None] * MASK
    loss, grad, _ = run("gspo", c)
    assert loss == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)
    assert s[0] > 1.1 and active[0] == False  # noqa: E712  sample 0 is clipped: it contributes no gradient
    assert np.all(grad[0] == 0)


def test_sampo_loss_term_is_gspo():
    c = cfg(algo="sampo", clip_low=0.1, clip_high=0.1, loss_agg="seq-mean-token-mean")
    assert run("sampo", c)[0] == pytest.approx(run("gspo", c)[0])


def test_cispo_value_and_gradient():
    c = cfg(algo="cispo", clip_low=1.0, clip_high=0.2)
    r = np.exp(DELTA)
    weight = np.clip(r, 0.0, 1.2)  # stop-gradient weight
    logp = LOGP_OLD + DELTA
    A = ADV[:, None] * np.ones_like(r)
    w = token_mean_weights(MASK)
    expected = (-weight * A * logp * w).sum()
    expected_grad = -weight * A * w  # gradient flows through lp only, for every token (tolerant)
    loss, grad, _ = run("cispo", c)
    assert loss == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)
    assert np.all(grad[MASK > 0] != 0)


def test_sapo_value_and_gradient():
    c = cfg(algo="sapo", tau_pos=1.0, tau_neg=1.05)
    r = np.exp(DELTA)
    A = ADV[:, None] * np.ones_like(r)
    tau = np.where(A > 0, 1.0, 1.05)
    p = 1 / (1 + np.exp(-tau * (r - 1)))
    w = token_mean_weights(MASK)
    expected = (-(4 / tau) * p * A * w).sum()
    expected_grad = -4 * p * (1 - p) * r * A * w  # d/dlp: weight 4p(1-p) times dr/dlp = r
    loss, grad, _ = run("sapo", c)
    assert loss == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_atpo_turn_ratio_value_and_gradient():
    c = cfg(algo="atpo", clip_low=0.1, clip_high=0.1, loss_agg="seq-mean-token-mean")
    turn_ids = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    L = np.zeros_like(DELTA)
    G = np.zeros_like(DELTA)
    for b in range(2):
        for k in (0, 1):
            sel = (turn_ids[b] == k) & (MASK[b] > 0)
            s = np.exp(DELTA[b][sel].mean())  # turn ratio
            unc, clp = -ADV[b] * s, -ADV[b] * np.clip(s, 0.9, 1.1)
            L[b][sel] = max(unc, clp)
            G[b][sel] = (-ADV[b] * s) if unc >= clp else 0.0  # GSPO-token form: d/dlp_t = -A s (per token)
    n = MASK.sum(1)
    expected = ((L * MASK).sum(1) / n).mean()
    expected_grad = G * MASK / n[:, None] / 2
    loss, grad, _ = run("atpo", c, turn_ids=torch.tensor(turn_ids))
    assert loss == pytest.approx(expected, rel=1e-9)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_atpo_without_turns_equals_gspo():
    c = cfg(algo="atpo", clip_low=0.1, clip_high=0.1, loss_agg="seq-mean-token-mean")
    assert run("atpo", c)[0] == pytest.approx(run("gspo", c)[0])


def test_dapo_is_grpo_clip():
    assert run("dapo", cfg())[0] == pytest.approx(run("grpo", cfg())[0])


def test_aggregations():
    L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(L, m, "token-mean")) == pytest.approx(10 / 4)
    assert float(aggregate(L, m, "seq-mean-token-mean")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(aggregate(L, m, "seq-mean-token-sum")) == pytest.approx((6.0 + 4.0) / 2)
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(L, m, "sum")


def test_seq_and_turn_log_ratio():
    lp, old = torch.tensor(LOGP_OLD + DELTA), torch.tensor(LOGP_OLD)
    np.testing.assert_allclose(seq_log_ratio(lp, old, torch.tensor(MASK)).numpy(),
                               (DELTA * MASK).sum(1) / MASK.sum(1))
    t = turn_log_ratio(lp, old, torch.tensor(MASK), torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]]))
    np.testing.assert_allclose(t.numpy()[0], [0.05, 0.05, 0.625, 0.625])


def test_nalis_mask_drops_negative_low_is_samples():
    # sample 0: A<0, mean(lp_old - lp) = 0.3 > 0.223 -> dropped; sample 1: A<0 but drift 0.1 -> kept;
    # sample 2: drift 0.3 but A>0 -> kept
    old = torch.zeros(3, 2)
    lp = torch.tensor([[-0.3, -0.3], [-0.1, -0.1], [-0.3, -0.3]])
    keep = nalis_sample_mask(lp, old, torch.tensor([-1.0, -1.0, 1.0]), torch.ones(3, 2), 0.223)
    assert keep.tolist() == [0.0, 1.0, 1.0]


def test_policy_loss_applies_nalis_mask_and_k3_kl():
    c = cfg(algo="cispo", clip_low=1.0, clip_high=0.2, nalis_mask=True, kl_coef=0.5)
    old = torch.zeros(2, 2, dtype=torch.float64)
    lp = torch.tensor([[-0.5, -0.5], [0.1, 0.1]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[0.0, 0.0], [0.3, -0.2]], dtype=torch.float64)
    adv = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    loss, stats = policy_loss(c, lp, old, adv, torch.ones(2, 2), logp_ref=ref)
    assert stats["nalis_masked_frac"] == pytest.approx(0.5)
    # only sample 1 remains in the policy term: cispo -clip(e^0.1, 0, 1.2) * 1 * 0.1 per token; the k3 KL anchor
    # still covers every token of both samples: 0.5 * mean k3 over 4 tokens
    x = np.array([0.5, 0.5, 0.2, -0.3])
    k3 = np.exp(x) - x - 1
    expected = -np.exp(0.1) * 0.1 + 0.5 * k3.mean()
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-9)
    loss.backward()
    # the masked sample's gradient is the KL term's alone: d/dlp 0.5/4 * (e^x - x - 1), x = ref - lp
    np.testing.assert_allclose(lp.grad[0].numpy(), [0.5 / 4 * (1 - np.exp(0.5))] * 2, rtol=1e-9)


def test_k3_is_nonnegative_and_matches_formula():
    lp = torch.tensor([-1.0, -2.0, -0.1])
    ref = torch.tensor([-1.5, -1.0, -0.1])
    x = (ref - lp).numpy()
    np.testing.assert_allclose(k3_kl(lp, ref).numpy(), np.exp(x) - x - 1, rtol=1e-6)
    assert (k3_kl(lp, ref) >= 0).all()


def test_unknown_loss_and_bad_advantage_shape():
    from arldiag.trainer.losses import get_loss

    with pytest.raises(ValueError, match="loss"):
        get_loss("ppo2")
    with pytest.raises(ValueError, match="advantages"):
        run("grpo", cfg(), adv=np.ones((2, 3)))
