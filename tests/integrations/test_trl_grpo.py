"""The TRL drop-in, measured against TRL itself: a tiny Qwen3 trained by TRL's GRPOTrainer on CPU; the per-step
aggregates arldiag derives from the per-token tensors equal what TRL logged for the same steps."""
import math

import numpy as np
import pytest

from integrations.need import need  # noqa: E402

need("trl")

import arldiag  # noqa: E402
from integrations.trl_setup import grpo_trainer  # noqa: E402

# arldiag steps column -> TRL logged name (same definitions; TRL's are token means over the loss mask)
SAME = {"clip_ratio_low_mean": "clip_ratio/low_mean", "clip_ratio_high_mean": "clip_ratio/high_mean",
        "clip_ratio_region_mean": "clip_ratio/region_mean", "kl_ref_k3": "kl", "entropy": "entropy"}
ROLLOUT = {"reward_mean": "reward", "zero_std_group_frac": "frac_reward_zero_std",
           "response_length_mean": "completions/mean_length"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer

    tmp = tmp_path_factory.mktemp("trl")
    # strict: a recording failure raises (by default the collector warns once and training goes on)
    kw = {"arldiag_run": str(tmp / "run"), "arldiag_kwargs": {"strict": True}}
    tr = grpo_trainer(str(tmp / "out"), cls=ArldiagGRPOTrainer, trainer_kwargs=kw, log_completions=True)
    tr.train()
    tr.state.save_to_json(str(tmp / "out" / "trainer_state.json"))
    return tr, arldiag.open_run(tmp / "run")


def test_step_aggregates_match_trl_logs(trained):
    tr, run = trained
    logged = {h["step"]: h for h in tr.state.log_history if "loss" in h}
    assert sorted(logged) == [1, 2, 3]
    cols = list(SAME) + list(ROLLOUT)
    rows = {r[0]: dict(zip(cols, r[1:])) for r in
            run.sql(f"select step, {', '.join(cols)} from steps order by step").fetchall()}
    assert sorted(rows) == [1, 2, 3]
    moved = 0
    for step, h in logged.items():
        for ours, theirs in SAME.items():
            assert rows[step][ours] == pytest.approx(h[theirs], rel=1e-4, abs=1e-6), (step, ours)
        moved += h["clip_ratio/region_mean"] > 0
        for ours, theirs in ROLLOUT.items():  # logged only at steps that generated (1 and 3; 2 reuses the batch)
            if theirs in h:
                assert rows[step][ours] == pytest.approx(h[theirs], rel=1e-5), (step, ours)
            else:
                assert rows[step][ours] is None or math.isnan(rows[step][ours])
    assert moved >= 1, "the test must exercise non-zero clip ratios"
    assert logged[2]["kl"] > 0


def test_sequences_link_to_groups_and_rewards(trained):
    tr, run = trained
    seq = run.sql("select step, group_id, reward, n_tokens from sequences order by step").df()
    assert len(seq) == 3 * 8  # 3 steps x per_device_train_batch_size completions
    gen = seq[seq.step != 2]  # steps that generated link every sample to its group and reward
    assert gen.group_id.notna().all() and gen.reward.notna().all()
    sizes = gen.groupby(["step", "group_id"]).size()
    assert (sizes == tr.num_generations).all()
    # TRL's scalar logs are recorded too (user metrics), e.g. the loss and grad norm
    loss = run.sql("select step, loss from steps order by step").fetchall()
    assert np.allclose([v for _, v in loss], [h["loss"] for h in tr.state.log_history if "loss" in h])
    assert run.manifest["algorithm"] == "dapo" and run.manifest["status"] == "finished"
    # token rows (sampled by a hash of the sample ids TRL hands as a tensor) for every update of every step
    tok = run.sql("select step, count(*) from tokens group by step order by step").fetchall()
    assert [s for s, n in tok if n > 0] == [1, 2, 3], tok


def test_import_trl_state_and_completions_written_by_trl(trained, tmp_path, capsys):
    """The importers on TRL's own files from the same training: trainer_state.json and completions/*.parquet."""
    from arldiag.cli import main as cli

    tr, run = trained
    out_dir = tr.args.output_dir
    assert cli(["import", "trl-state", f"{out_dir}/trainer_state.json", "--out", str(tmp_path / "state")]) == 0
    imp = arldiag.open_run(tmp_path / "state")
    for step, low, ent in imp.sql("select step, clip_ratio_low_mean, entropy from steps order by step").fetchall():
        h = next(h for h in tr.state.log_history if h.get("step") == step and "entropy" in h)
        assert low == pytest.approx(h["clip_ratio/low_mean"]) and ent == pytest.approx(h["entropy"])
    assert cli(["import", "trl-completions", f"{out_dir}/completions", "--out", str(tmp_path / "comp")]) == 0
    assert "reward = sum of reward_yes" in capsys.readouterr().err
    comp = arldiag.open_run(tmp_path / "comp")
    got = dict(comp.sql("select step, reward_mean from steps").fetchall())
    # the generation steps (1 and 3); step 2 reused step 1's batch and is not repeated
    assert sorted(got) == [1, 3]
    for step, mean in got.items():
        h = next(h for h in tr.state.log_history if h.get("step") == step and "reward" in h)
        assert mean == pytest.approx(h["reward"], rel=1e-5)
    # groups = distinct prompts of the step (the same prompt drawn twice in one batch is one group here)
    import pyarrow.parquet as pq

    prompts = {r["prompt"] for r in pq.read_table(f"{out_dir}/completions/completions_00001.parquet").to_pylist()}
    n_groups = comp.sql("select count(*) from groups where step = 1").fetchall()[0][0]
    assert n_groups == len(prompts)
