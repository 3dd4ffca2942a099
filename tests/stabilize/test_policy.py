"""Policies and the Stabilizer's limits, on a fake trainer: the right action for the right finding, idempotent,
bounded (learning rate, clip), cooldown, a rollback that cannot loop, stop only when nothing is left."""
from __future__ import annotations

import pytest

from arldiag.stabilize import (Action, Firing, Limits, Situation, Stabilizable, Stabilizer, Taken, admit,
                               register_policy, resolve_policy)
from arldiag.stabilize.policies import NALIS_DELTA, STOP_AFTER, conservative_policy, default_policy


class FakeTrainer:
    """A Stabilizable over a dict: records every call so tests can count them."""
    supports = frozenset(("rollback", "nalis_mask", "seq_clip", "clip", "lr_scale", "stop"))

    def __init__(self, lr=1e-4, clip_low=1.0, clip_high=0.2, nalis_mask=False):
        self.s = dict(lr=lr, clip_low=clip_low, clip_high=clip_high, algo="cispo", seq_clip=False,
                      nalis_mask=nalis_mask, nalis_delta=0.223)
        self.calls: list[tuple] = []
        self.saved_at: int | None = None

    def settings(self):
        return dict(self.s)

    def set_nalis_mask(self, delta):
        self.calls.append(("nalis_mask", delta))
        self.s.update(nalis_mask=True, nalis_delta=delta)
        return {}

    def set_clip(self, lo, hi):
        self.calls.append(("clip", lo, hi))
        self.s.update(clip_low=lo, clip_high=hi)
        return {}

    def use_sequence_clip(self, lo, hi):
        self.calls.append(("seq_clip", lo, hi))
        self.s.update(algo="gspo", seq_clip=True, clip_low=lo, clip_high=hi)
        return {}

    def set_lr(self, lr):
        self.calls.append(("lr", lr))
        self.s["lr"] = lr
        return {}

    def checkpoint(self, step):
        self.calls.append(("checkpoint", step))
        self.saved_at = step

    def rollback(self):
        self.calls.append(("rollback", self.saved_at))
        step, self.saved_at = self.saved_at, None
        return {"to_step": step}

    def stop(self, reason):
        self.calls.append(("stop",))
        return {}


def sit(state="critical", findings=None, step=40, settings=None, checkpoint_step=None, history=(), since=None,
        top=None):
    findings = findings if findings is not None else {"ppo_kl_spike": Firing("critical", "ppo_kl_ratio", 12.0)}
    st = settings or FakeTrainer().settings()
    return Situation(step=step, state=state, previous_state="ok", risk=0.9, findings=findings,
                     top=top or next(iter(findings), None), settings=st, initial=st, history=tuple(history),
                     checkpoint_step=checkpoint_step, state_since=step if since is None else since)


def kinds(actions):
    return [a.kind for a in actions]


def test_fake_trainer_implements_the_protocol():
    assert isinstance(FakeTrainer(), Stabilizable)


# ---- the default policy ---------------------------------------------------------------------------------------
def test_default_is_quiet_below_warning_and_masks_at_warning_on_an_off_policy_finding():
    assert default_policy(sit("ok", {})) == []
    assert default_policy(sit("watch", {"neg_adv_low_is": Firing("watch", "f", 0.1)})) == []
    acts = default_policy(sit("warning", {"neg_adv_low_is": Firing("warning", "neg_adv_low_is_frac", 0.2)}))
    assert kinds(acts) == ["nalis_mask"] and acts[0].params == {"delta": NALIS_DELTA}
    assert acts[0].detector == "neg_adv_low_is" and "neg_adv_low_is_frac = 0.2" in acts[0].reason
    # a warning from a finding the mask does not answer (length growth) asks for its own lever, not the mask
    assert kinds(default_policy(sit("warning", {"length_growth": Firing("warning", "len", 2.0)}))) == [
        "truncation_mask"]


def test_default_at_critical_rolls_back_and_halves_lr_naming_the_broken_finding():
    f = {"ppo_kl_spike": Firing("critical", "ppo_kl", 9.0), "format_collapse": Firing("warning", "valid", 0.3)}
    acts = default_policy(sit("critical", f, checkpoint_step=35))
    assert kinds(acts) == ["nalis_mask", "rollback", "lr_scale"]
    assert acts[0].detector == "ppo_kl_spike"          # the mask answers the off-policy finding
    assert acts[1].detector == "format_collapse"       # the rollback answers the broken policy
    assert acts[2].params == {"factor": 0.5}
    # no checkpoint: no rollback proposed; the mask already on: tighten the clip instead
    st = dict(FakeTrainer(nalis_mask=True).settings())
    assert kinds(default_policy(sit("critical", f, settings=st))) == ["clip", "lr_scale"]


def test_default_stops_only_after_a_rollback_and_a_long_critical_state_without_checkpoint():
    rb = Taken(20, Action("rollback"), {"to_step": 15})
    s = sit(step=20 + STOP_AFTER, since=20, history=[rb])
    assert "stop" in kinds(default_policy(s))
    assert "stop" not in kinds(default_policy(sit(step=20 + STOP_AFTER - 1, since=20, history=[rb])))
    assert "stop" not in kinds(default_policy(sit(step=20 + STOP_AFTER, since=20)))  # never rolled back
    assert "stop" not in kinds(default_policy(sit(step=40, since=20, history=[rb], checkpoint_step=35)))


def test_conservative_never_rolls_back_or_stops():
    acts = conservative_policy(sit(checkpoint_step=35, step=100, since=0,
                                   history=[Taken(1, Action("rollback"), {"to_step": 0})]))
    assert kinds(acts) == ["nalis_mask", "lr_scale"]


# ---- admit: idempotence and bounds ----------------------------------------------------------------------------
def test_admit_is_idempotent():
    on = FakeTrainer(nalis_mask=True).settings() | {"nalis_delta": 3e-3}
    assert admit(Action("nalis_mask", {"delta": 3e-3}), sit(settings=on), Limits())[0] is None
    assert admit(Action("nalis_mask", {"delta": 0.1}), sit(settings=on), Limits())[0] is None
    assert admit(Action("nalis_mask", {"delta": 1e-3}), sit(settings=on), Limits())[0] == {"delta": 1e-3}
    seq = FakeTrainer().settings() | {"seq_clip": True}
    assert admit(Action("seq_clip"), sit(settings=seq), Limits())[0] is None


def test_admit_bounds_the_factors_and_the_clip_floor():
    for bad in (0.0, 1.0, 2.0, -0.5):
        params, why = admit(Action("lr_scale", {"factor": bad}), sit(), Limits())
        assert params is None and "factor" in why
    st = FakeTrainer(clip_low=0.03, clip_high=0.02).settings()
    params, _ = admit(Action("clip", {"factor": 0.5}), sit(settings=st), Limits(min_clip=0.02))
    assert params == {"clip_low": 0.02, "clip_high": 0.02}
    st2 = FakeTrainer(clip_low=0.02, clip_high=0.02).settings()
    assert admit(Action("clip", {"factor": 0.5}), sit(settings=st2), Limits(min_clip=0.02))[0] is None


def test_admit_refuses_a_second_rollback_to_the_same_checkpoint():
    rb = Taken(20, Action("rollback"), {"to_step": 15})
    assert admit(Action("rollback"), sit(checkpoint_step=15, history=[rb]), Limits())[0] is None
    assert admit(Action("rollback"), sit(checkpoint_step=25, history=[rb]), Limits())[0] == {"to_step": 25}
    assert admit(Action("rollback"), sit(checkpoint_step=None), Limits())[0] is None
    two = [rb, Taken(30, Action("rollback"), {"to_step": 25})]
    assert admit(Action("rollback"), sit(checkpoint_step=35, history=two), Limits(max_rollbacks=2))[0] is None


# ---- the Stabilizer over a fake trainer ---------------------------------------------------------------------------
def feed(stab, step, state, findings=None):
    findings = {} if findings is None and state == "ok" else (
        findings or {"ppo_kl_spike": Firing("critical", "ppo_kl", 9.0)})
    return stab.on_step(step, state, "ok", 0.9 if state != "ok" else 0.0, findings, next(iter(findings), None))


def lr_only(s):
    return [Action("lr_scale", {"factor": 0.5}, "ppo_kl_spike", "test")] if s.state == "critical" else []


def test_lr_is_scaled_at_most_k_times_and_never_below_the_floor():
    t = FakeTrainer(lr=1e-4)
    stab = Stabilizer(lr_only, t, limits=Limits(cooldown=0, max_lr_scalings=5, lr_floor=0.1))
    for step in range(20):
        feed(stab, step, "critical")
    # 1e-4 * 0.5^k: 5e-5, 2.5e-5, 1.25e-5, then the floor 1e-5; then nothing (already at the floor)
    assert [c[1] for c in t.calls if c[0] == "lr"] == pytest.approx([5e-5, 2.5e-5, 1.25e-5, 1e-5])
    t2 = FakeTrainer(lr=1e-4)
    stab2 = Stabilizer(lr_only, t2, limits=Limits(cooldown=0, max_lr_scalings=2))
    for step in range(20):
        feed(stab2, step, "critical")
    assert [c[1] for c in t2.calls if c[0] == "lr"] == pytest.approx([5e-5, 2.5e-5])


def test_cooldown_between_decisions():
    t = FakeTrainer()
    stab = Stabilizer(lr_only, t, limits=Limits(cooldown=5, max_lr_scalings=10))
    applied = [step for step in range(0, 16) if feed(stab, step, "critical")]
    assert applied == [0, 5, 10, 15]
    assert stab.summary() == ("auto-stabilize (lr_only): applied lr_scale@0, lr_scale@5, lr_scale@10, lr_scale@15; "
                              "refused lr_scale x4 (cooldown (5 steps after step 0)); "
                              "lr_scale x4 (cooldown (5 steps after step 10)); lr_scale x4 (cooldown (5 steps after step 5))")


def test_rollback_cannot_loop_and_needs_an_ok_checkpoint_after_progress():
    t = FakeTrainer()
    record = []
    stab = Stabilizer("default", t, record=lambda **row: record.append(row),
                      limits=Limits(cooldown=0, checkpoint_every=5, max_rollbacks=2))
    for step in range(12):  # ok: checkpoints at 0, 5, 10
        feed(stab, step, "ok")
    assert [c[1] for c in t.calls if c[0] == "checkpoint"] == [0, 5, 10]
    for step in range(12, 40):  # critical for a long time: one rollback, to step 10, never again
        feed(stab, step, "critical")
    assert [c for c in t.calls if c[0] == "rollback"] == [("rollback", 10)]
    assert not any(c[0] == "checkpoint" and c[1] >= 12 for c in t.calls)  # none taken while not ok
    # ok again (progress): new checkpoints (40, 45), and a second rollback to the latest
    for step in range(40, 46):
        feed(stab, step, "ok")
    for step in range(46, 50):
        feed(stab, step, "critical")
    assert [c for c in t.calls if c[0] == "rollback"] == [("rollback", 10), ("rollback", 45)]
    # max_rollbacks = 2: a third is refused although a new ok checkpoint exists
    for step in range(50, 56):
        feed(stab, step, "ok")
    for step in range(56, 60):
        feed(stab, step, "critical")
    assert len([c for c in t.calls if c[0] == "rollback"]) == 2
    rows = [r for r in record if r["action"] == "rollback"]
    assert [r["outcome"]["to_step"] for r in rows] == [10, 45] and rows[0]["detector"] == "ppo_kl_spike"
    assert rows[0]["state"] == "critical" and rows[0]["evidence"]["finding"]["metric"] == "ppo_kl"
    # the default policy stopped the run once it was critical with nothing left (first rollback at 12)
    assert [c for c in t.calls if c[0] == "stop"] and stab.stopped


def test_actions_of_one_decision_apply_in_order_and_record_their_trigger():
    t = FakeTrainer()
    record = []
    stab = Stabilizer("default", t, record=lambda **row: record.append(row), limits=Limits(cooldown=3))
    feed(stab, 0, "ok")
    feed(stab, 7, "critical")
    assert [c[0] for c in t.calls] == ["checkpoint", "rollback", "nalis_mask", "lr"]
    assert [r["action"] for r in record] == ["rollback", "nalis_mask", "lr_scale"]
    assert record[2]["params"] == {"factor": 0.5, "lr": pytest.approx(5e-5)}
    assert all(r["policy"] == "default" and r["step"] == 7 for r in record)
    assert record[0]["evidence"]["alert"] == "alert state ok -> critical"


def test_a_failing_policy_or_trainer_never_raises():
    def broken(s):
        raise RuntimeError("boom")

    logs = []
    stab = Stabilizer(broken, FakeTrainer(), log_fn=logs.append)
    assert feed(stab, 0, "critical") == [] and "boom" in logs[0]

    class Failing(FakeTrainer):
        def set_lr(self, lr):
            raise RuntimeError("optimizer gone")

    stab = Stabilizer(lr_only, Failing(), log_fn=logs.append)
    assert feed(stab, 0, "critical") == [] and "optimizer gone" in logs[-1]


def test_unsupported_actions_are_refused():
    t = FakeTrainer()
    t.supports = frozenset({"lr_scale"})
    stab = Stabilizer("default", t, limits=Limits(cooldown=0))
    feed(stab, 0, "ok")
    feed(stab, 1, "critical")
    assert [c[0] for c in t.calls] == ["lr"]  # no checkpoint (no rollback support), no mask


def test_resolve_policy_names_module_function_and_errors(tmp_path, monkeypatch):
    assert resolve_policy("default") is default_policy
    (tmp_path / "my_policies.py").write_text("def halve(s):\n    return []\nNOT_CALLABLE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_policy("my_policies:halve").__name__ == "halve"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        resolve_policy("nope")
    with pytest.raises(ValueError, match="cannot load 'my_policies:missing'"):
        resolve_policy("my_policies:missing")
    with pytest.raises(ValueError, match="not callable"):
        resolve_policy("my_policies:NOT_CALLABLE")
    with pytest.raises(ValueError, match="action kind"):
        Action("halve_everything")

    @register_policy("test-registered")
    def mine(s):
        return []
    assert resolve_policy("test-registered") is mine


def test_checkpoints_are_taken_in_calm_states_only():
    """checkpoint_on="watch" (the default): checkpoints while ok or watch, none in warning or critical; with "ok",
    none while watch."""
    for on, want in (("watch", [0, 5, 10]), ("ok", [0])):
        t = FakeTrainer()
        stab = Stabilizer("default", t, limits=Limits(cooldown=0, checkpoint_every=5, checkpoint_on=on))
        for step, state in enumerate(["ok"] * 2 + ["watch"] * 10 + ["warning"] * 6 + ["watch"] * 3):
            feed(stab, step, state)
        # watch: 0, 5, 10 (every 5 steps), none in warning (12-17, where 15 was due), then 18 (watch, >= 5 after 10)
        got = [c[1] for c in t.calls if c[0] == "checkpoint"]
        assert got == (want + [18] if on == "watch" else want)
    with pytest.raises(ValueError, match="checkpoint_on"):
        Limits(checkpoint_on="warning")


def test_a_critical_reading_acts_while_the_alert_state_waits():
    """RiskConfig.critical_steps may keep the alert state below critical on a one-step spike; the built-in policies
    act on the critical reading (Situation.acting_state) but never stop on it (stop needs the critical state)."""
    import dataclasses

    off_policy = {"neg_adv_low_is": Firing("warning", "neg_adv_low_is_frac", 0.05),
                  "ppo_kl_spike": Firing("critical", "ppo_kl", 12.0)}
    quiet = sit(state="watch", findings=off_policy, checkpoint_step=30)
    assert quiet.acting_state == "watch" and default_policy(quiet) == []
    spike = dataclasses.replace(quiet, reading="critical")
    assert spike.acting_state == "critical"
    assert kinds(default_policy(spike)) == ["nalis_mask", "rollback", "lr_scale"]
    assert "state watch (critical reading)" in default_policy(spike)[0].reason
    assert kinds(conservative_policy(spike)) == ["nalis_mask", "lr_scale"]
    # long after a rollback, no checkpoint left, in watch since long ago: a critical reading is no reason to stop
    done = Taken(10, Action("rollback", {}, "ppo_kl_spike", "r"), {"to_step": 5})
    late = dataclasses.replace(spike, checkpoint_step=None, history=(done,), state_since=0, step=60)
    assert "stop" not in kinds(default_policy(late))
    assert "stop" in kinds(default_policy(dataclasses.replace(late, state="critical")))


def test_the_evaluator_reports_the_reading_of_each_step():
    """StepResult.reading is the level the step's risk reaches alone (risk.level_of over the enter thresholds)."""
    from arldiag.detectors.base import LEVELS
    from arldiag.detectors.engine import Evaluator
    from arldiag.detectors.risk import RiskConfig, level_of

    cfg = RiskConfig(critical_steps=2)
    ev = Evaluator(risk=cfg, risk_model="rules")
    seen = {}
    for step in range(30):
        kl = 0.5 if step == 25 else 1e-3 * (1 + step % 3)  # one 250-fold KL spike at step 25
        r = ev.update(step, {"ppo_kl": kl, "success_rate": 0.5})
        assert r.reading == LEVELS[level_of(r.risk, cfg.enter)]
        seen[step] = (r.reading, r.state)
    assert seen[25] == ("critical", "ok") and seen[24][0] == "ok"  # read critical, the state waits a second step
