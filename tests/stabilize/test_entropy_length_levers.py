"""The closed loop's levers for the failures the masks do not touch (issue 29): an entropy that runs away (the
entropy bonus off, or clip-high back to clip-low) and responses piling up at the length cap (truncated responses
masked out of the policy gradient). Each fires on its finding through the real detectors, Monitor, Stabilizer and
the reference trainer's controls, stays within its bounds and lands in the run store's actions table; the loss
reads the changed setting at the next mini-batch (values worked out by hand / numpy)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import arldiag
from arldiag.stabilize import Action, Firing, Limits, Situation, Stabilizer, Taken, admit
from arldiag.stabilize.policies import conservative_policy, default_policy
from arldiag.trainer.config import make_config
from arldiag.trainer.losses import policy_loss
from arldiag.trainer.stabilize import TrainerControls

BASE = dict(lr=1e-4, clip_low=0.2, clip_high=0.28, algo="dapo", seq_clip=False, nalis_mask=False, nalis_delta=0.223,
            mask_truncated=False, ent_coef=0.0)


def sit(findings, state="warning", supports=None, **settings):
    st = {**BASE, **settings}
    kw = {} if supports is None else {"supports": frozenset(supports)}
    return Situation(step=30, state=state, previous_state="watch", risk=0.6, findings=findings,
                     top=next(iter(findings), None), settings=st, initial=dict(BASE), history=(), **kw)


ENTROPY = {"entropy_blowup": Firing("warning", "entropy", 0.9)}
LENGTH = {"length_growth": Firing("warning", "truncated_frac", 0.48)}


def kinds(actions):
    return [a.kind for a in actions]


# ---- the policy: which lever for which finding ------------------------------------------------------------------
def test_an_entropy_finding_switches_the_bonus_off_when_the_run_has_one():
    acts = default_policy(sit(ENTROPY, ent_coef=0.01))
    # entropy_blowup is also an off-policy finding (the mask), and the bonus goes off
    assert kinds(acts) == ["nalis_mask", "entropy_coef"]
    assert acts[1].params == {"factor": 0.0} and acts[1].detector == "entropy_blowup"
    assert "entropy = 0.9" in acts[1].reason


def test_without_a_bonus_an_entropy_finding_undoes_clip_higher():
    acts = default_policy(sit(ENTROPY))
    assert kinds(acts) == ["nalis_mask", "clip_high"]
    params, why = admit(acts[1], sit(ENTROPY), Limits())
    assert why == "" and params == {"clip_high": pytest.approx(0.2)}  # 0.28 x 0.2 / 0.28: back to eps_low
    # a symmetric band (nothing to undo) or CISPO's (1.0, 0.2) band: only the mask
    assert kinds(default_policy(sit(ENTROPY, clip_high=0.2))) == ["nalis_mask"]
    assert kinds(default_policy(sit(ENTROPY, clip_low=1.0, clip_high=0.2))) == ["nalis_mask"]
    # a trainer without the lever (verl's loss) is not asked for it
    assert kinds(default_policy(sit(ENTROPY, supports={"nalis_mask"}))) == ["nalis_mask"]


def test_a_length_finding_masks_truncated_responses_once():
    acts = default_policy(sit(LENGTH))
    assert kinds(acts) == ["truncation_mask"] and acts[0].detector == "length_growth"
    assert default_policy(sit(LENGTH, mask_truncated=True)) == []
    assert default_policy(sit(LENGTH, state="watch")) == []  # below warning: nothing
    assert kinds(conservative_policy(sit(LENGTH))) == ["truncation_mask"]


def test_a_lever_needs_its_own_finding_at_warning_or_above():
    # the state is warning because of an off-policy finding; entropy and length only read watch: the mask alone
    f = {"neg_adv_low_is": Firing("warning", "neg_adv_low_is_frac", 0.2), "entropy_blowup": Firing("watch", "e", 0.5),
         "length_growth": Firing("watch", "truncated_frac", 0.1)}
    assert kinds(default_policy(sit(f, ent_coef=0.01))) == ["nalis_mask"]


def test_at_critical_with_the_mask_on_the_clip_tightening_is_not_doubled_by_clip_high():
    acts = default_policy(sit({"entropy_blowup": Firing("critical", "entropy", 1.5)}, state="critical",
                              nalis_mask=True))
    assert kinds(acts) == ["clip", "lr_scale"]  # clip halves eps_high already; no checkpoint: no rollback


# ---- bounds ---------------------------------------------------------------------------------------------------
def test_clip_high_is_bounded_by_count_and_min_clip():
    a = Action("clip_high", {"factor": 0.5})
    two = (Taken(1, a), Taken(8, a))
    s = sit({}, clip_high=0.28)
    assert admit(a, Situation(**{**s.__dict__, "history": two}), Limits())[1].startswith("clip-high already lowered 2")
    assert admit(a, s, Limits(max_clip_high_cuts=0))[0] is None
    # 0.03 x 0.5 = 0.015 < min_clip 0.02: floored at 0.02; already there: refused
    assert admit(a, sit({}, clip_high=0.03), Limits())[0] == {"clip_high": pytest.approx(0.02)}
    assert "already at min_clip" in admit(a, sit({}, clip_high=0.02), Limits())[1]
    with pytest.raises(ValueError, match="stabilize.max_clip_high_cuts must be >= 0"):
        Limits(max_clip_high_cuts=-1)


def test_entropy_coef_factor_must_lie_in_zero_one():
    for f in (1.0, -0.1, 2.0):
        params, why = admit(Action("entropy_coef", {"factor": f}), sit({}, ent_coef=0.01), Limits())
        assert params is None and "factor must be in [0, 1)" in why
    assert admit(Action("entropy_coef", {"factor": 0.5}), sit({}, ent_coef=0.01), Limits())[0] == {
        "factor": 0.5, "ent_coef": pytest.approx(0.005)}


# ---- end to end: the real detectors fire, the reference trainer's settings change, the actions are stored --------
def _drive(tmp_path, kind, cfg):
    """40 steps of step metrics into a Collector with a Monitor and the default policy on the reference trainer's
    controls: flat for 20 steps, then the entropy (x1.15 of its level per step) or the truncated share (+4 points
    per step, responses 2 tokens longer) rises while success drifts down."""
    mon = arldiag.Monitor(sinks=(), risk_model="rules")
    col = arldiag.Collector(tmp_path / "run", config={"algo": cfg.algo}, monitor=mon, strict=True)
    model = torch.nn.Linear(1, 1)
    stab = Stabilizer("default", TrainerControls(cfg, model, torch.optim.AdamW(model.parameters(), lr=1e-4)),
                      record=col.record_action)
    rng = np.random.default_rng(0)
    for step in range(40):
        m = {"success_rate": 0.5 + 0.02 * rng.standard_normal() - 0.01 * max(0, step - 20), "entropy": 0.3,
             "response_length_mean": 20.0, "truncated_frac": 0.0}
        if step >= 20 and kind == "entropy":
            m["entropy"] = 0.3 * (1 + 0.15 * (step - 19))
        if step >= 20 and kind == "length":
            m.update(truncated_frac=min(0.9, 0.04 * (step - 19)), response_length_mean=20.0 + 2 * (step - 19))
        col.record_step(step, m)
        stab.on_result(mon.last_result)
    col.close()
    run = arldiag.open_run(str(tmp_path / "run"))
    try:
        rows = run.df("select step, action, detector, state, outcome from actions order by step, time")
    finally:
        run.close()
    return stab, rows.to_dict("records")


def test_the_entropy_lever_fires_on_entropy_blowup_and_is_recorded(tmp_path):
    cfg = make_config("dapo", env="toy", out="unused", init="scratch", ent_coef=0.01)
    stab, rows = _drive(tmp_path, "entropy", cfg)
    first = [r for r in rows if r["action"] == "entropy_coef"]
    assert len(first) == 1 and first[0]["detector"] == "entropy_blowup" and first[0]["state"] == "warning"
    assert cfg.ent_coef == 0.0  # the bonus is off in the config the loss reads
    assert '"ent_coef": 0.01' in str(first[0]["outcome"]).replace("'", '"')  # before, in the outcome
    # once off, never asked again (nothing to lower): the table holds it once
    assert sum(t.action.kind == "entropy_coef" for t in stab.history) == 1


def test_without_a_bonus_the_entropy_finding_undoes_clip_higher_and_is_recorded(tmp_path):
    cfg = make_config("dapo", env="toy", out="unused", init="scratch")  # eps 0.2 / 0.28, no entropy bonus
    stab, rows = _drive(tmp_path, "entropy", cfg)
    got = [r for r in rows if r["action"] == "clip_high"]
    assert len(got) == 1 and got[0]["detector"] == "entropy_blowup" and got[0]["state"] == "warning"
    outcome = str(got[0]["outcome"]).replace("'", '"')
    assert '"before": {"clip_high": 0.28}' in outcome and '"after": {"clip_high": 0.2' in outcome
    assert not any(r["action"] == "entropy_coef" for r in rows)  # no bonus: nothing to switch off
    # bounded: eps_high never below min_clip, whatever the critical state's clip tightenings did afterwards
    assert cfg.clip_high >= Limits().min_clip and cfg.clip_high <= 0.2 + 1e-12


def test_the_length_lever_fires_on_length_growth_and_is_recorded(tmp_path):
    cfg = make_config("grpo", env="toy", out="unused", init="scratch")
    stab, rows = _drive(tmp_path, "length", cfg)
    got = [r for r in rows if r["action"] == "truncation_mask"]
    assert len(got) == 1 and got[0]["detector"] == "length_growth"
    assert cfg.mask_truncated is True
    # the first decision comes at warning, before the critical state (which rolls back and halves the rate)
    assert rows[0]["action"] == "truncation_mask" and rows[0]["state"] == "warning"


# ---- the reference trainer's loss reads the changed settings ---------------------------------------------------
def _batch():
    """Two samples, 3 tokens: sample 0 A = -1 (drifted by -0.05), sample 1 A = +1 (ratios e^{0.01}, 1, e^{-0.01})."""
    logp_old = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    logp = (logp_old + torch.tensor([[-0.05, -0.05, -0.05], [0.01, 0.0, -0.01]])).requires_grad_(True)
    return logp, logp_old, torch.tensor([-1.0, 1.0]), torch.ones(2, 3)


def _controls(cfg):
    m = torch.nn.Linear(1, 1)
    return TrainerControls(cfg, m, torch.optim.AdamW(m.parameters()))


def test_the_truncation_mask_reaches_the_loss():
    cfg = make_config("cispo", env="toy", out="unused", init="scratch")
    truncated = torch.tensor([False, True])
    logp, logp_old, adv, mask = _batch()
    _, stats = policy_loss(cfg, logp, logp_old, adv, mask, truncated=truncated)
    assert stats["truncated_masked_frac"] == 0.0
    assert _controls(cfg).set_truncation_mask() == {"before": {"mask_truncated": False},
                                                    "after": {"mask_truncated": True}}
    logp, logp_old, adv, mask = _batch()
    loss, stats = policy_loss(cfg, logp, logp_old, adv, mask, truncated=truncated)
    loss.backward()
    assert stats["truncated_masked_frac"] == 0.5
    assert torch.equal(logp.grad[1], torch.zeros(3)) and logp.grad[0].abs().sum() > 0
    # CISPO over sample 0's tokens only: -sg[clip(r, 0, 1 + 0.2)] * A * logp, r = e^{-0.05}
    want = float(np.mean(-np.clip(np.exp(-0.05), 0.0, 1.2) * -1.0 * np.full(3, -1.05)))
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)


def test_the_entropy_bonus_and_its_switch_off_reach_the_loss():
    cfg = make_config("grpo", env="toy", out="unused", init="scratch", ent_coef=0.05)
    ent = torch.tensor([[0.5, 0.7, 0.9], [1.0, 1.2, 1.4]], requires_grad=True)
    logp, logp_old, adv, mask = _batch()
    base, _ = policy_loss(make_config("grpo", env="toy", out="unused", init="scratch"), logp, logp_old, adv, mask)
    loss, stats = policy_loss(cfg, logp, logp_old, adv, mask, entropy=ent)
    loss.backward()
    mean_h = float(np.mean([0.5, 0.7, 0.9, 1.0, 1.2, 1.4]))  # token-mean over all 6 tokens
    assert stats["entropy_bonus"] == pytest.approx(mean_h)
    assert float(loss.detach()) == pytest.approx(float(base.detach()) - 0.05 * mean_h, rel=1e-6)
    assert torch.allclose(ent.grad, torch.full((2, 3), -0.05 / 6))  # d(-c * mean H)/dH
    _controls(cfg).set_entropy_coef(0.0)
    logp, logp_old, adv, mask = _batch()
    off, stats = policy_loss(cfg, logp, logp_old, adv, mask, entropy=ent)
    assert "entropy_bonus" not in stats and float(off.detach()) == pytest.approx(float(base.detach()))


def test_clip_high_reaches_the_loss():
    cfg = make_config("dapo", env="toy", out="unused", init="scratch", clip_low=0.005, clip_high=0.02,
                      dual_clip_c=0.0)
    logp, logp_old, adv, mask = _batch()
    _, stats = policy_loss(cfg, logp, logp_old, adv, mask)
    assert stats["clipfrac_high"] == 0.0  # e^{0.01} - 1 = 0.01005 < 0.02
    _controls(cfg).set_clip_high(0.005)
    assert (cfg.clip_low, cfg.clip_high) == (0.005, 0.005)
    logp, logp_old, adv, mask = _batch()
    _, stats = policy_loss(cfg, logp, logp_old, adv, mask)
    assert stats["clipfrac_high"] == pytest.approx(1 / 6)  # sample 1's first token, A > 0, above 1.005
