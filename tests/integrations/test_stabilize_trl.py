"""--auto-stabilize on TRL's GRPOTrainer (tiny real training on CPU): a policy forced to act after step 1 switches on
TRL's off-policy sequence mask, tightens the clip, halves the learning rate (optimizer and scheduler, so the
schedule keeps it) and stops the run after step 2; the actions are in the run store."""
import pytest

from integrations.need import need

need("trl")

import arldiag  # noqa: E402
from arldiag.stabilize import Action  # noqa: E402
from integrations.trl_setup import grpo_trainer  # noqa: E402


def forced(s):
    if s.step == 1:
        return [Action("nalis_mask", {"delta": 0.05}, "test", "forced"), Action("clip", {"factor": 0.5}),
                Action("lr_scale", {"factor": 0.5}), Action("rollback")]
    if s.step == 2:
        return [Action("stop", {}, "test", "forced")]
    return []


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer
    from arldiag.collectors.trl_stabilize import attach_stabilizer
    from arldiag.stabilize import Limits

    tmp = tmp_path_factory.mktemp("trl_stab")
    tr = grpo_trainer(str(tmp / "out"), cls=ArldiagGRPOTrainer, max_steps=4, trainer_kwargs={
        "arldiag_run": str(tmp / "run"), "arldiag_kwargs": {"monitor": arldiag.Monitor(sinks=())}})
    stab = attach_stabilizer(tr, forced, Limits(cooldown=0))
    tr.train()
    return tr, stab, tmp / "run"


def test_the_actions_reach_trl(trained):
    tr, stab, _ = trained
    assert [(t.step, t.action.kind) for t in stab.history] == [
        (1, "nalis_mask"), (1, "clip"), (1, "lr_scale"), (2, "stop")]  # rollback: not supported with TRL
    assert tr.off_policy_mask_threshold == 0.05
    assert (tr.epsilon_low, tr.epsilon_high) == pytest.approx((0.05, 0.05))  # epsilon 0.1, halved
    assert tr.state.global_step == 2  # max_steps 4: stopped after step 2
    sched = getattr(tr.lr_scheduler, "scheduler", tr.lr_scheduler)
    assert sched.base_lrs == pytest.approx([5e-2 * 0.5] * len(sched.base_lrs))
    # the schedule's own rate at its current step, from the halved base rate
    want = 5e-2 * 0.5 * sched.lr_lambdas[0](sched.last_epoch)
    assert tr.optimizer.param_groups[0]["lr"] == pytest.approx(want)


def test_the_actions_are_recorded(trained):
    _, _, run_dir = trained
    run = arldiag.open_run(run_dir)
    rows = run.df("select step, action, detector, policy from actions order by time").to_dict("records")
    assert [(r["step"], r["action"]) for r in rows] == [(1, "nalis_mask"), (1, "clip"), (1, "lr_scale"), (2, "stop")]
    assert rows[0]["detector"] == "test" and rows[0]["policy"] == "forced"


# ---- the levers for entropy and length (issue 29): TRL's own knobs, on a run started with an entropy bonus -------
def forced_levers(s):
    if s.step == 1:
        return [Action("truncation_mask", {}, "length_growth", "forced"),
                Action("clip_high", {"factor": 0.5}, "entropy_blowup", "forced"),
                Action("entropy_coef", {"factor": 0.0}, "entropy_blowup", "forced")]
    return []


@pytest.fixture(scope="module")
def levers(tmp_path_factory):
    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer
    from arldiag.collectors.trl_stabilize import TRLControls, attach_stabilizer
    from arldiag.stabilize import Limits

    tmp = tmp_path_factory.mktemp("trl_levers")
    tr = grpo_trainer(str(tmp / "out"), cls=ArldiagGRPOTrainer, max_steps=3, epsilon_high=0.28, entropy_coef=0.01,
                      trainer_kwargs={"arldiag_run": str(tmp / "run"),
                                      "arldiag_kwargs": {"monitor": arldiag.Monitor(sinks=())}})
    before = TRLControls(tr).settings()
    stab = attach_stabilizer(tr, forced_levers, Limits(cooldown=0))
    tr.train()
    return tr, stab, before, tmp / "run"


def test_the_entropy_and_length_levers_reach_trl(levers):
    tr, stab, before, _ = levers
    assert (before["mask_truncated"], before["clip_high"], before["ent_coef"]) == (False, 0.28, 0.01)
    assert [(t.step, t.action.kind) for t in stab.history] == [
        (1, "truncation_mask"), (1, "clip_high"), (1, "entropy_coef")]
    # TRL reads all three at its next generation / loss: mask_truncated_completions, epsilon_high, entropy_coef
    assert tr.mask_truncated_completions is True
    assert tr.epsilon_high == pytest.approx(0.14) and tr.epsilon_low == pytest.approx(0.1)  # eps_low untouched
    assert tr.entropy_coef == 0.0
    assert tr.state.global_step == 3  # training went on after the change


def test_the_entropy_and_length_levers_are_recorded(levers):
    *_, run_dir = levers
    run = arldiag.open_run(run_dir)
    try:
        rows = run.df("select step, action, detector from actions order by time").to_dict("records")
    finally:
        run.close()
    assert [(r["step"], r["action"], r["detector"]) for r in rows] == [
        (1, "truncation_mask", "length_growth"), (1, "clip_high", "entropy_blowup"),
        (1, "entropy_coef", "entropy_blowup")]


def test_without_a_bonus_at_start_trl_offers_no_entropy_lever(tmp_path):
    from arldiag.collectors.trl_stabilize import TRLControls

    tr = grpo_trainer(str(tmp_path / "out"), max_steps=1)
    assert TRLControls(tr).settings()["ent_coef"] == 0.0  # TRL decided at start-up not to compute a bonus
