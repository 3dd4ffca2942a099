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
