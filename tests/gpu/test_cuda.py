"""The statistics and the hooks on CUDA tensors (marker ``cuda``; see conftest.py for the device): the torch
evaluator on the device equals the numpy evaluator (fp32 and bf16 inputs), a Collector fed device tensors with
deferred updates stores the rows a numpy-fed one stores, at most one host wait per step, and the TRL drop-in and
the verl loss mode run on the device."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import arldiag
from arldiag import backends
from arldiag.collectors.convert import as_device_array
from arldiag.stats import Bands, UpdateInputs, compute_update
from gpu.device_inputs import close, feed, inputs, same_tables

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.cuda
BANDS = Bands(0.2, 0.28, 0.05, 0.06, 3.0, 0.1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_statistics_on_the_device_equal_the_numpy_path(device, dtype):
    rng = np.random.default_rng(11)
    d = inputs(rng)
    dt = getattr(torch, dtype)
    dev = {k: torch.from_numpy(v).to(device) for k, v in d.items()}
    for k in ("logp", "logp_old", "logp_ref", "entropy", "logp_rollout"):   # as a bf16 trainer hands them
        dev[k] = as_device_array(dev[k].to(dt), k, np.float32)
        d[k] = dev[k].float().cpu().numpy()                                  # the numpy path sees the same values
    ext = dict(rollout_flat_token_ids=np.where(rng.random(int(d["mask"].sum())) < 0.1, -1,
                                               d["token_ids"][d["mask"]]),
               retok_extra=np.where(rng.random(24) < 0.3, 2, -1))
    a = compute_update(UpdateInputs(**d, **ext), BANDS)
    b = compute_update(UpdateInputs(**dev, **ext), BANDS)
    assert b.masked is not None  # the device path: nothing compacted on the device
    assert set(a.aggs) == set(b.aggs)
    for k in a.aggs:
        close(a.aggs[k], b.aggs[k], k)
        assert type(a.aggs[k]) is type(b.aggs[k]), k
    assert set(a.seq) == set(b.seq)
    for k in a.seq:
        close(a.seq[k], b.seq[k], f"seq.{k}")
        assert a.seq[k].dtype == b.seq[k].dtype, k
    for k in a.turn:
        close(a.turn[k], b.turn[k], f"turn.{k}")
    assert (a.anomalous == b.anomalous).all() and (a.nonempty == b.nonempty).all()
    keep = rng.random(24) < 0.5
    ta, tb = a.token_rows(keep), b.token_rows(keep)
    for k in ta:
        assert (ta[k] is None) == (tb[k] is None), k
        if ta[k] is not None:
            close(ta[k], tb[k], f"tok.{k}")


@pytest.mark.parametrize("rate", [1.0, 0.3])
def test_collector_on_device_tensors_stores_the_numpy_rows(device, tmp_path, rate):
    kw = dict(clip=(0.2, 0.28), seq_clip=(0.05, 0.06), token_sample_rate=rate, strict=True)
    for name, conv in (("np", lambda x: x), ("dev", lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device))):
        with arldiag.Collector(tmp_path / name, **kw) as col:
            feed(col, conv, 5)
    same_tables(tmp_path / "np", tmp_path / "dev")


def test_at_most_one_host_wait_per_step(device, tmp_path):
    """No host read while a step is recorded (rollout, deferred updates); its end waits at most once."""
    if device != "cuda":
        pytest.skip("counts CUDA synchronisations (tests/core/test_host_reads.py checks the CPU side)")
    conv = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device)  # noqa: E731
    with arldiag.Collector(tmp_path / "r", token_sample_rate=1.0, strict=True) as col:
        feed(col, conv, 3, steps=1)   # warm-up: imports, caches
        rng = np.random.default_rng(4)
        d = inputs(rng, 16, 32)
        dd = {k: conv(v) for k, v in d.items()}
        sid = conv(np.arange(16) + 10_000)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                col.record_rollout(5, sample_ids=sid, token_ids=dd["token_ids"], response_mask=dd["mask"],
                                   logp_rollout=dd["logp_rollout"])
                for u in range(2):
                    r = slice(8 * u, 8 * u + 8)
                    col.record_update(5, u, logp=dd["logp"][r], logp_old=dd["logp_old"][r],
                                      advantages=dd["advantages"][r], response_mask=dd["mask"][r],
                                      entropy=dd["entropy"][r], token_ids=dd["token_ids"][r], sample_ids=sid[r],
                                      defer=True)
                during = [str(x.message) for x in w if "synchroniz" in str(x.message)]
                waits = backends.HOST_WAITS[0]
                col.record_step(5, {"loss": dd["logp"][0, 0]})
                at_end = [str(x.message) for x in w if "synchroniz" in str(x.message)][len(during):]
                waits = backends.HOST_WAITS[0] - waits
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert during == []
    assert len(at_end) + waits <= 1, (at_end, waits)
    run = arldiag.open_run(tmp_path / "r")
    assert run.sql("select count(*) from tokens where step = 5").fetchall()[0][0] == int(d["mask"].sum())


def test_trl_drop_in_step_on_the_device(device, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from integrations.trl_setup import reward_yes, tiny_model_and_tokenizer  # noqa: F401 - sets HF offline
    from datasets import Dataset
    from trl import GRPOConfig

    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer, collector_for

    model, tok = tiny_model_and_tokenizer()
    model_dir = str(tmp_path / "tiny-qwen3")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    ds = Dataset.from_dict({"prompt": ["say yes", "say no", "say yes please", "say no now"] * 4})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                      num_iterations=2, max_completion_length=6, max_steps=3, learning_rate=5e-2, beta=0.04,
                      epsilon=0.1, logging_steps=1, report_to=[], save_strategy="no", use_cpu=device == "cpu",
                      seed=0, bf16=False, use_bias_correction_kl=False, dataloader_num_workers=0)
    trainer = ArldiagGRPOTrainer(model=model_dir, reward_funcs=reward_yes, args=args, train_dataset=ds,
                                 processing_class=tok)
    trainer.arldiag_collector = collector_for(trainer, str(tmp_path / "run"), strict=True, token_sample_rate=1.0)
    assert trainer.model.device.type == device
    trainer.train()
    run = arldiag.open_run(tmp_path / "run")
    steps = run.sql("select step, ppo_kl from steps order by step").fetchall()
    assert [s[0] for s in steps] == [1, 2, 3] and all(math.isfinite(s[1]) for s in steps)
    seqs = run.sql("select step, count(*), sum(n_tokens) from sequences group by step order by step").fetchall()
    assert [s[1] for s in seqs] == [8, 8, 8]   # one update of 8 rows a step (rows without tokens: none)
    n_tok = run.sql("select count(*) from tokens").fetchall()[0][0]
    assert n_tok == sum(s[2] for s in seqs) > 0
    # the rollout's token ids reached the updates on the device: the ids match wherever both are known
    assert run.sql("select count(*) from tokens where token_id_rollout >= 0 and token_id_rollout <> token_id"
                   ).fetchall()[0][0] == 0
    assert run.sql("select count(*) from tokens where token_id_rollout >= 0").fetchall()[0][0] > 0


def test_verl_loss_mode_on_the_device(device, tmp_path):
    pytest.importorskip("verl")
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    from arldiag.collectors import verl_loss

    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                          clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    g = torch.Generator().manual_seed(7)
    col = arldiag.Collector(tmp_path / "v", clip=verl_loss.band(cfg), dual_clip_c=3.0, strict=True)
    rec = verl_loss.RECORDER
    rec.__init__(collector=col)
    expected = []
    for step in (1, 2):
        rec.set_step(step)
        calls = []
        for _ in range(2):
            old = -torch.rand(16, 12, generator=g) * 3
            new = old + torch.randn(16, 12, generator=g) * 0.6
            new[:2, :3] = old[:2, :3] + 1.5
            adv = torch.randn(16, 1, generator=g).expand(16, 12).contiguous()
            adv[:2] = -1.0
            mask = (torch.rand(16, 12, generator=g) > 0.2).float()
            old, new, adv, mask = (x.to(device) for x in (old, new, adv, mask))
            loss, m = core_algos.get_policy_loss_fn("arldiag_vanilla")(
                old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
            ref_loss, ref_m = core_algos.get_policy_loss_fn("vanilla")(
                old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
            assert torch.equal(loss, ref_loss)
            calls.append(({k: float(getattr(v, "value", v)) for k, v in ref_m.items()}, float(mask.sum())))
        expected.append(calls)
    rec.close()
    run = arldiag.open_run(tmp_path / "v")
    rows = run.sql('select step, ppo_kl, pg_clipfrac, pg_clipfrac_lower, "actor/ppo_kl" from steps order by step'
                   ).fetchall()
    assert [r[0] for r in rows] == [1, 2]
    for row, calls in zip(rows, expected):
        for i, name in enumerate(["actor/ppo_kl", "actor/pg_clipfrac", "actor/pg_clipfrac_lower"]):
            want = sum(m[name] * n for m, n in calls) / sum(n for _, n in calls)
            assert row[1 + i] == pytest.approx(want, rel=1e-5, abs=1e-6), name
        # verl's own metric, read from the device with the step's statistics
        assert row[4] == pytest.approx(np.mean([m["actor/ppo_kl"] for m, _ in calls]), rel=1e-5)
