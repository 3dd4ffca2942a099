"""verl's loss registry, measured against verl itself: the arldiag loss modes delegate to verl's losses (same loss
value) and the statistics arldiag records equal the metrics verl's loss returns on the same tensors."""
import numpy as np
import pytest

from integrations.need import need

need("verl")
torch = need("torch")

import arldiag  # noqa: E402
from arldiag.collectors import verl_loss  # noqa: E402

# modes whose pg_clipfrac / pg_clipfrac_lower are the token-level PPO definitions arldiag derives (verl's vanilla);
# the others define their own clip fraction (GSPO: sequence ratio; CISPO: cap; SAPO: none), ppo_kl is common.
SAME_ALL = ("vanilla", "bypass_mode")
SAME_KL = ("gspo", "cispo", "sapo", "clip_cov", "dppo_tv", "dppo_kl", "geo_mean")


@pytest.fixture(scope="module")
def verl():
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                          clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    return core_algos, cfg


def batch(g, B=16, T=12):
    old = -torch.rand(B, T, generator=g) * 3
    new = old + torch.randn(B, T, generator=g) * 0.6
    new[:2, :3] = old[:2, :3] + 1.5  # ratio e^1.5 > clip_ratio_c = 3: dual-clip tokens where A < 0
    adv = torch.randn(B, 1, generator=g).expand(B, T).contiguous()
    adv[:2] = -1.0
    mask = (torch.rand(B, T, generator=g) > 0.2).float()
    return old, new, adv, mask


def test_plugin_registers_every_mode(verl):
    core_algos, _ = verl
    base = [m for m in core_algos.POLICY_LOSS_REGISTRY if not m.startswith("arldiag")]
    assert "arldiag" in core_algos.POLICY_LOSS_REGISTRY  # by verl's plugin entry point, on `import verl`
    assert all(f"arldiag_{m}" in core_algos.POLICY_LOSS_REGISTRY for m in base)


@pytest.mark.parametrize("mode", SAME_ALL + SAME_KL)
def test_recorded_statistics_equal_verl_metrics(verl, mode, tmp_path):
    core_algos, cfg = verl
    g = torch.Generator().manual_seed(7)
    col = arldiag.Collector(tmp_path / mode, clip=verl_loss.band(cfg), dual_clip_c=3.0, strict=True)
    rec = verl_loss.RECORDER
    rec.__init__(collector=col)
    expected = []
    for step in (1, 2):
        rec.set_step(step)
        calls = []
        for _ in range(2):  # two micro-batches per step
            old, new, adv, mask = batch(g)
            torch.manual_seed(step)  # clip_cov / kl_cov pick tokens at random: same draw for both calls
            loss, m = core_algos.get_policy_loss_fn(f"arldiag_{mode}")(
                old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
            torch.manual_seed(step)
            ref_loss, ref_m = core_algos.get_policy_loss_fn(mode)(
                old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
            assert torch.equal(loss, ref_loss) and m == ref_m  # the delegate changes nothing
            calls.append((m, float(mask.sum())))
        expected.append(calls)
    rec.close()
    run = arldiag.open_run(tmp_path / mode)
    rows = run.sql('select step, ppo_kl, pg_clipfrac, pg_clipfrac_lower, "actor/ppo_kl", "actor/pg_clipfrac" '
                   "from steps order by step").fetchall()
    assert [r[0] for r in rows] == [1, 2]
    names = ["actor/ppo_kl"] + (["actor/pg_clipfrac", "actor/pg_clipfrac_lower"] if mode in SAME_ALL else [])
    for row, calls in zip(rows, expected):
        got = dict(zip(["actor/ppo_kl", "actor/pg_clipfrac", "actor/pg_clipfrac_lower"], row[1:4]))
        for name in names:
            # verl's metrics are micro-batch token means; over the step arldiag's are token means of all tokens,
            # i.e. the token-weighted mean of verl's values
            want = sum(m[name] * n for m, n in calls) / sum(n for _, n in calls)
            assert got[name] == pytest.approx(want, rel=1e-5, abs=1e-7), (mode, name)
        # verl's own values are recorded as step metrics too (verl's mean over micro-batches)
        assert row[4] == pytest.approx(np.mean([m["actor/ppo_kl"] for m, _ in calls]), rel=1e-6)
        if "actor/pg_clipfrac" in calls[0][0]:
            assert row[5] == pytest.approx(np.mean([m["actor/pg_clipfrac"] for m, _ in calls]), rel=1e-6)
    if mode == "vanilla":
        assert rows[0][3] > 0  # the dual-clip branch was exercised


def test_env_run_step_per_update_actor_and_caller_tensors(verl, tmp_path, monkeypatch):
    """No collector given: $ARLDIAG_RUN opens one; each update_actor call is a step (a loss call outside one, like
    verl's eval-mode loss, is not recorded); entropy and ref_log_prob come from the caller's locals (as in verl's
    ppo_loss)."""
    core_algos, cfg = verl
    monkeypatch.setenv(verl_loss.RUN_ENV, str(tmp_path / "env"))
    monkeypatch.setenv(verl_loss.INNER_ENV, "gspo")
    rec = verl_loss.RECORDER
    rec.__init__()
    g = torch.Generator().manual_seed(3)
    entropies = []

    def ppo_loss(data):  # the caller's local names, as in verl.workers.utils.losses.ppo_loss
        old, new, adv, mask = data["old_log_probs"], data["log_prob"], data["advantages"], data["response_mask"]
        entropy = torch.rand(mask.shape, generator=g) * 2
        entropies.append(float((entropy * mask).sum() / mask.sum()))
        return core_algos.get_policy_loss_fn("arldiag")(old_log_prob=old, log_prob=new, advantages=adv,
                                                        response_mask=mask, config=cfg)

    def update_actor(data):  # one call per training step in verl's worker
        return ppo_loss(data)

    old, new, adv, mask = batch(g)
    ppo_loss({"old_log_probs": old, "log_prob": new, "advantages": adv, "response_mask": mask})  # eval: no step
    entropies.clear()
    for _ in range(3):
        old, new, adv, mask = batch(g)
        update_actor({"old_log_probs": old, "log_prob": new, "advantages": adv, "response_mask": mask,
                      "ref_log_prob": old - 0.05})
    rec.close()
    run = arldiag.open_run(tmp_path / "env")
    rows = run.sql("select step, entropy, kl_ref_k1 from steps order by step").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [r[1] for r in rows] == pytest.approx(entropies, rel=1e-5)
    assert all(r[2] is not None for r in rows)
    assert run.manifest["algorithm"] == "gspo" and run.manifest["clip"] == [0.2, 0.28]


def test_without_run_dir_nothing_is_recorded(verl, monkeypatch):
    core_algos, cfg = verl
    monkeypatch.delenv(verl_loss.RUN_ENV, raising=False)
    verl_loss.RECORDER.__init__()
    old, new, adv, mask = batch(torch.Generator().manual_seed(1))
    with pytest.warns(RuntimeWarning, match="ARLDIAG_RUN"):
        loss, _ = core_algos.get_policy_loss_fn("arldiag_vanilla")(
            old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
    assert torch.isfinite(loss)
