"""--auto-stabilize on verl: the neg-adv low-IS mask switched on inside the wrapped loss equals verl's own loss
over the tokens of the kept samples (mask computed here in numpy), and a policy's action reaches the loss."""
import numpy as np
import pytest

from integrations.need import need

need("verl")
torch = need("torch")

import arldiag  # noqa: E402
from arldiag.collectors import verl_loss  # noqa: E402
from arldiag.stabilize import Action  # noqa: E402


@pytest.fixture(scope="module")
def verl():
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                          clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    return core_algos, cfg


def batch(B=8, T=6):
    g = torch.Generator().manual_seed(5)
    old = -torch.rand(B, T, generator=g) * 3
    new = old + torch.randn(B, T, generator=g) * 0.05
    new[:3] -= 0.2  # drifted: logp_old - logp = 0.2 on average
    adv = torch.randn(B, 1, generator=g).expand(B, T).contiguous()
    adv[:2], adv[2] = -1.0, 1.0  # two drifted samples with A < 0 (masked), one with A > 0 (kept)
    mask = (torch.rand(B, T, generator=g) > 0.2).float()
    return old, new, adv, mask


def keep_numpy(old, new, adv, mask, delta):
    o, n, a, m = (x.numpy().astype(np.float64) for x in (old, new, adv, mask))
    cnt = np.maximum(m.sum(1), 1.0)
    mean_adv = (a * m).sum(1) / cnt
    drift = ((o - n) * m).sum(1) / cnt
    return ~((mean_adv < 0) & (drift > delta))


def test_mask_inside_the_wrapped_loss_equals_verl_on_the_kept_samples(verl, tmp_path):
    core_algos, cfg = verl
    rec = verl_loss.RECORDER
    rec.__init__(collector=arldiag.Collector(tmp_path / "r", strict=True))
    old, new, adv, mask = batch()
    keep = keep_numpy(old, new, adv, mask, 0.05)
    assert 0 < keep.sum() < len(keep)  # the batch has masked and kept samples
    rec.set_step(1)
    rec.nalis_delta = 0.05
    loss, _ = core_algos.get_policy_loss_fn("arldiag_vanilla")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
    ref, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask * torch.tensor(keep, dtype=torch.float32)[:, None],
        config=cfg)
    unmasked, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
    assert torch.allclose(loss, ref) and not torch.allclose(loss, unmasked)
    rec.close()


def test_a_policy_switches_the_mask_on_after_a_step(verl, tmp_path):
    core_algos, cfg = verl

    def forced(s):
        return [Action("nalis_mask", {"delta": 0.05}, "test", "forced"), Action("lr_scale", {"factor": 0.5})] \
            if s.step == 1 else []

    rec = verl_loss.RECORDER
    rec.__init__(collector=arldiag.Collector(tmp_path / "r", strict=True, monitor=arldiag.Monitor(sinks=())))
    stab = verl_loss.attach_stabilizer(rec, forced)
    old, new, adv, mask = batch()
    for step in (1, 2):
        rec.set_step(step)
        core_algos.get_policy_loss_fn("arldiag_vanilla")(
            old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
        if step == 1:
            assert rec.nalis_delta is None  # step 1 is finished only when step 2 begins
    assert rec.nalis_delta == 0.05
    assert [t.action.kind for t in stab.history] == ["nalis_mask"]  # lr_scale: not supported by verl
    rec.close()
    run = arldiag.open_run(tmp_path / "r")
    assert run.df("select step, action, detector from actions").to_dict("records") == [
        {"step": 1, "action": "nalis_mask", "detector": "test"}]
