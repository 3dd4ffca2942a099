"""An action of the closed loop is one declaration (stabilize/kinds.py, an ActionSpec): this file fails when a part
of one is missing. Every action needs a hand-worked admit case below; every trainer's controls implement the method
of each action they support and report the settings its admit reads; apply calls that method and no other; the
Limits, arldiag.toml's [stabilize] keys and their comments come from the specs; and the Stabilizer is generic (a
made-up action runs through it without any change to the runner); docs/stabilize.md's actions table is rendered from
the specs."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from unittest import mock

import pytest

from arldiag.stabilize import ACTION_KINDS, ACTIONS, Action, Firing, Limits, Situation, Stabilizer, Taken, admit
from arldiag.stabilize.spec import ActionSpec, Limit, collect, make_limits

SETTINGS = dict(lr=1e-4, clip_low=0.2, clip_high=0.28, algo="grpo", seq_clip=False, nalis_mask=False,
                nalis_delta=0.223, mask_truncated=False, ent_coef=0.01)


def sit(settings=None, history=(), checkpoint_step=None):
    st = {**SETTINGS, **(settings or {})}
    return Situation(step=10, state="critical", previous_state="warning", risk=0.9, findings={}, top=None,
                     settings=st, initial=dict(SETTINGS), history=tuple(history), checkpoint_step=checkpoint_step)


# kind -> (an action, the situation it is admitted in, the parameters worked out by hand,
#          a situation it is refused in, words of the refusal)
CASES = {
    "rollback": (Action("rollback"), sit(checkpoint_step=5), {"to_step": 5},
                 sit(checkpoint_step=5, history=[Taken(3, Action("rollback"), {"to_step": 5})]),
                 "already rolled back to step 5"),
    "nalis_mask": (Action("nalis_mask", {"delta": 0.01}), sit(), {"delta": 0.01},
                   sit({"nalis_mask": True, "nalis_delta": 0.005}), "already on"),
    "seq_clip": (Action("seq_clip"), sit(), {"clip_low": 3e-3, "clip_high": 4e-3},
                 sit({"seq_clip": True}), "already on"),
    # 0.2 * 0.5 = 0.1, 0.28 * 0.5 = 0.14; refused after max_clip_tightenings (2) tightenings
    "clip": (Action("clip", {"factor": 0.5}), sit(), {"clip_low": 0.1, "clip_high": 0.14},
             sit(history=[Taken(1, Action("clip", {"factor": 0.5})), Taken(2, Action("clip", {"factor": 0.5}))]),
             "tightened 2 times"),
    "truncation_mask": (Action("truncation_mask"), sit(), {}, sit({"mask_truncated": True}), "already masked"),
    # 0.28 * 0.5 = 0.14, eps_low untouched; at min_clip (0.02) it is refused
    "clip_high": (Action("clip_high", {"factor": 0.5}), sit(), {"clip_high": 0.14},
                  sit({"clip_high": 0.02}), "already at min_clip"),
    # 0.01 * 0 = 0 (the bonus off); without a bonus there is nothing to lower
    "entropy_coef": (Action("entropy_coef", {"factor": 0.0}), sit(), {"factor": 0.0, "ent_coef": 0.0},
                     sit({"ent_coef": 0.0}), "no entropy bonus"),
    # 1e-4 * 0.5; at the floor (0.1 x the initial 1e-4) it is refused
    "lr_scale": (Action("lr_scale", {"factor": 0.5}), sit(), {"factor": 0.5, "lr": 5e-5},
                 sit({"lr": 1e-5}), "at its floor"),
    "stop": (Action("stop"), sit(), {}, sit(history=[Taken(9, Action("stop"))]), "already stopped"),
}


def test_every_action_has_a_hand_worked_case():
    assert set(CASES) == set(ACTIONS), "a new ActionSpec needs its admit case in CASES"
    assert ACTION_KINDS == tuple(sorted(ACTIONS, key=lambda k: ACTIONS[k].order))


@pytest.mark.parametrize("kind", list(ACTIONS))
def test_admit_case(kind):
    action, ok, want, refused, why = CASES[kind]
    params, reason = admit(action, ok, Limits())
    assert reason == "" and params == pytest.approx(want)
    params, reason = admit(action, refused, Limits())
    assert params is None and why in reason


@pytest.mark.parametrize("kind", list(ACTIONS))
def test_apply_calls_the_declared_method_only(kind):
    spec = ACTIONS[kind]
    controls = mock.Mock(spec=[spec.method])  # any other attribute raises AttributeError
    getattr(controls, spec.method).return_value = {"after": "x"}
    action, ok, _, _, _ = CASES[kind]
    params, _ = admit(action, ok, Limits())
    assert spec.apply(controls, params, "why") == {"after": "x"}
    getattr(controls, spec.method).assert_called_once()


def test_a_spec_documents_itself():
    for spec in ACTIONS.values():
        assert spec.summary and all(spec.params.values()) and all(lim.doc for lim in spec.limits), spec.kind
    with pytest.raises(ValueError, match=r"document parameter\(s\) \['x'\]"):
        ActionSpec(kind="toy", order=9, summary="s", admit=admit, apply=print, method="m", params={"x": ""})
    with pytest.raises(ValueError, match="admit and apply must be callable"):
        ActionSpec(kind="toy", order=9, summary="s", admit=None, apply=print, method="m")
    with pytest.raises(ValueError, match="distinct orders"):
        collect(ACTIONS["stop"], dataclasses.replace(ACTIONS["clip"], kind="toy", order=ACTIONS["stop"].order))


# ---- every trainer's controls against the specs ------------------------------------------------------------------
def reference_controls():
    torch = pytest.importorskip("torch")
    from arldiag.trainer.config import make_config
    from arldiag.trainer.stabilize import TrainerControls

    model = torch.nn.Linear(2, 2)
    return TrainerControls(make_config("cispo", env="toy", out="unused", init="scratch"), model,
                           torch.optim.AdamW(model.parameters(), lr=1e-4))


def trl_controls():
    from arldiag.collectors.trl_stabilize import TRLControls

    trainer = SimpleNamespace(epsilon_low=0.2, epsilon_high=0.28, loss_type="dapo", importance_sampling_level="token",
                              off_policy_mask_threshold=None, args=SimpleNamespace(learning_rate=1e-4),
                              optimizer=SimpleNamespace(param_groups=[{"lr": 1e-4}]), lr_scheduler=None,
                              control=SimpleNamespace(should_training_stop=False))
    return TRLControls(trainer)


def verl_controls():
    from arldiag.collectors.verl_loss import VerlControls, VerlLossRecorder

    return VerlControls(VerlLossRecorder())


@pytest.mark.parametrize("make", [reference_controls, trl_controls, verl_controls])
def test_each_trainer_implements_what_it_supports(make):
    controls = make()
    settings = controls.settings()
    assert controls.supports and set(controls.supports) <= set(ACTIONS)
    assert set(type(controls).notes) <= set(ACTIONS)  # docs/stabilize.md's table of trainers reads them
    for kind in controls.supports:
        spec = ACTIONS[kind]
        assert callable(getattr(controls, spec.method, None)), f"{type(controls).__name__} lacks {spec.method}"
        if spec.restores_checkpoint:
            assert callable(getattr(controls, "checkpoint", None)), f"{type(controls).__name__} lacks checkpoint"
        missing = [k for k in spec.settings if k not in settings]
        assert not missing, f"{type(controls).__name__}.settings() lacks {missing} ({kind} reads them)"


def test_trl_and_verl_controls_apply_what_they_support():
    """The specs' apply on the TRL and verl controls (without TRL or verl: the controls set plain attributes)."""
    trl = trl_controls()
    for kind, params in (("nalis_mask", {"delta": 0.05}), ("clip", {"clip_low": 0.1, "clip_high": 0.14}),
                         ("seq_clip", {"clip_low": 3e-3, "clip_high": 4e-3}), ("lr_scale", {"lr": 5e-5}),
                         ("stop", {})):
        ACTIONS[kind].apply(trl, params, "why")
    t = trl.trainer
    assert (t.off_policy_mask_threshold, t.importance_sampling_level) == (0.05, "sequence")
    assert (t.epsilon_low, t.epsilon_high) == (3e-3, 4e-3) and t.optimizer.param_groups[0]["lr"] == pytest.approx(5e-5)
    assert t.control.should_training_stop
    verl = verl_controls()
    ACTIONS["nalis_mask"].apply(verl, {"delta": 0.05}, "why")
    assert verl.recorder.nalis_delta == 0.05 and verl.settings() == {"nalis_mask": True, "nalis_delta": 0.05}


# ---- limits and arldiag.toml ---------------------------------------------------------------------------------------
def test_limits_and_the_stabilize_section_come_from_the_specs():
    from arldiag.config_defaults import render_default_file
    from arldiag.settings import defaults
    from arldiag.stabilize.runner import CHECKPOINT_LIMITS, RUNNER_LIMITS

    declared = [*RUNNER_LIMITS, *(lim for s in ACTIONS.values() for lim in s.limits), *CHECKPOINT_LIMITS]
    fields = dataclasses.fields(Limits)
    assert [f.name for f in fields] == [lim.name for lim in declared]
    assert [f.default for f in fields] == [lim.default for lim in declared]
    assert list(defaults()["stabilize"]) == ["policy", *(lim.name for lim in declared)]
    text = render_default_file()
    for lim in declared:
        assert f"{lim.name} = " in text and f"# {lim.doc}" in text, lim.name
    with pytest.raises(ValueError, match="stabilize.max_rollbacks must be >= 0, got -1"):
        Limits(max_rollbacks=-1)


def test_a_made_up_action_runs_through_the_generic_runner(monkeypatch):
    """A new kind is a spec and a controls method: the Stabilizer orders, admits, applies and records it, and its
    limit becomes a field of Limits, with no change to the runner."""
    import arldiag.stabilize.actions as actions_mod

    def admit_halve_batch(a, s, limits):
        return ({"batch": s.settings["batch"] // 2}, "") if s.settings["batch"] > limits.min_batch else \
            (None, "the batch is at min_batch")

    spec = ActionSpec(kind="halve_batch", order=55, summary="halve the rollout batch", method="set_batch",
                      limits=(Limit("min_batch", 8, "the batch never goes below this", ok=lambda v: v >= 1,
                                    must="be >= 1"),),
                      settings=("batch",), admit=admit_halve_batch, apply=lambda t, p, why: t.set_batch(p["batch"]))
    monkeypatch.setitem(ACTIONS, "halve_batch", spec)
    monkeypatch.setattr(actions_mod, "ACTION_KINDS", (*ACTION_KINDS, "halve_batch"))
    from arldiag.stabilize.runner import CHECKPOINT_LIMITS, RUNNER_LIMITS

    ToyLimits = make_limits(RUNNER_LIMITS, ACTIONS, CHECKPOINT_LIMITS)
    assert ToyLimits().min_batch == 8 and "min_batch" in [f.name for f in dataclasses.fields(ToyLimits)]

    class Toy:
        supports = frozenset({"halve_batch", "lr_scale", "stop"})

        def __init__(self):
            self.s, self.calls = {"batch": 32, "lr": 1e-4}, []

        def settings(self):
            return dict(self.s)

        def set_batch(self, batch):
            self.calls.append("batch")
            self.s["batch"] = batch
            return {"after": {"batch": batch}}

        def set_lr(self, lr):
            self.calls.append("lr")
            self.s["lr"] = lr
            return {}

        def stop(self, why):
            self.calls.append("stop")
            return {}

    def policy(s):
        return [Action("stop"), Action("halve_batch"), Action("lr_scale", {"factor": 0.5})]

    rows, t = [], Toy()
    logs = []
    stab = Stabilizer(policy, t, record=lambda **row: rows.append(row), limits=ToyLimits(cooldown=0),
                      log_fn=logs.append)
    stab.on_step(3, "critical", "ok", 0.9, {"x": Firing("critical", "m", 1.0)}, "x")
    assert t.calls == ["lr", "batch", "stop"], logs  # in the specs' order: halve_batch (55) after lr_scale (50)
    assert [r["action"] for r in rows] == ["lr_scale", "halve_batch", "stop"] and stab.stopped
    assert rows[1]["params"] == {"batch": 16}
    for step in (4, 5):
        stab.on_step(step, "critical", "ok", 0.9, {}, None)
    assert t.s["batch"] == 8 and ("halve_batch", "the batch is at min_batch") in stab.refused


def test_the_actions_table_is_rendered_from_the_specs():
    from arldiag.stabilize.actions_doc import DOC, render, rewrite

    text = DOC.read_text()
    assert text == rewrite(text), ("docs/stabilize.md's tables are stale: "
                                   "python -m arldiag.stabilize.actions_doc --write")
    for spec in ACTIONS.values():
        assert f"| `{spec.kind}` | {spec.summary} |" in render() and f"`{spec.method}`" in render()
