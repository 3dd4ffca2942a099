"""--auto-stabilize for TRL's GRPOTrainer: the actions TRL's own knobs allow, applied between optimizer steps.

    tr = ArldiagGRPOTrainer(..., arldiag_run="runs/x", arldiag_kwargs={"monitor": arldiag.Monitor()})
    attach_stabilizer(tr, "default")           # or a module:function / callable policy
    tr.train()

What TRL (>= 1.x) reads at every ``_compute_loss`` and so can be changed mid-run:
  nalis_mask  ``off_policy_mask_threshold`` = delta: TRL's off-policy sequence mask (DeepSeek-V3.2) drops a sample
              when A < 0 and mean_t(logp_sampling - logp) > delta: the neg-adv low-IS mask;
  truncation_mask  ``mask_truncated_completions`` (read when the next batch is generated);
  clip        ``epsilon_low`` / ``epsilon_high``;
  clip_high   ``epsilon_high`` alone;
  entropy_coef ``entropy_coef`` (TRL's entropy bonus; only when the run started with one, since TRL decides at
              start-up whether it computes the bonus at all; in adaptive mode TRL's own controller moves it again);
  seq_clip    ``importance_sampling_level = "sequence"`` (GSPO's sequence ratio) with the given band;
  lr_scale    every optimizer param group *and* the LR scheduler's base rates (HF schedulers recompute the rate
              from them at every step, so scaling only the param groups would be undone);
  stop        ``control.should_training_stop``.
Not supported: rollback (the weights and optimizer may be sharded by DeepSpeed/FSDP across processes; an
in-memory copy per process is not a checkpoint TRL can restore consistently).
"""
from __future__ import annotations

from typing import Any

from arldiag.stabilize import Stabilizer

SUPPORTED = frozenset({"nalis_mask", "truncation_mask", "clip", "clip_high", "entropy_coef", "seq_clip", "lr_scale",
                       "stop"})


class TRLControls:
    supports = SUPPORTED
    # how each action is carried out, or why not (docs/stabilize.md's table of trainers)
    notes = {"nalis_mask": "`off_policy_mask_threshold` (TRL's own off-policy sequence mask)",
             "truncation_mask": "`mask_truncated_completions`", "clip_high": "`epsilon_high`",
             "entropy_coef": "`entropy_coef` (a run started with a bonus)",
             "clip": "`epsilon_low` / `epsilon_high`", "seq_clip": "`importance_sampling_level = \"sequence\"`",
             "lr_scale": "param groups and the scheduler's base rates",
             "rollback": "weights/optimizer may be sharded across processes", "stop": "`control.should_training_stop`"}

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def _lr(self) -> float:
        opt = getattr(self.trainer, "optimizer", None)
        return float(opt.param_groups[0]["lr"]) if opt is not None else float(self.trainer.args.learning_rate)

    def settings(self) -> dict[str, Any]:
        t = self.trainer
        delta = getattr(t, "off_policy_mask_threshold", None)
        return {"lr": self._lr(), "clip_low": float(t.epsilon_low), "clip_high": float(t.epsilon_high),
                "algo": t.loss_type, "seq_clip": getattr(t, "importance_sampling_level", "token") == "sequence",
                "nalis_mask": delta is not None, "nalis_delta": float("inf") if delta is None else float(delta),
                "mask_truncated": bool(getattr(t, "mask_truncated_completions", False)),
                # no bonus unless TRL computes one: it decides that once, at start-up (_entropy_bonus_enabled)
                "ent_coef": float(getattr(t, "entropy_coef", 0.0) or 0.0)
                if getattr(t, "_entropy_bonus_enabled", False) else 0.0}

    def _change(self, **values: Any) -> dict:
        before = {k: getattr(self.trainer, k, None) for k in values}
        for k, v in values.items():
            setattr(self.trainer, k, v)
        return {"before": before, "after": dict(values)}

    def set_nalis_mask(self, delta: float) -> dict:
        return self._change(off_policy_mask_threshold=float(delta))

    def set_clip(self, clip_low: float, clip_high: float) -> dict:
        return self._change(epsilon_low=float(clip_low), epsilon_high=float(clip_high))

    def set_truncation_mask(self) -> dict:
        return self._change(mask_truncated_completions=True)

    def set_clip_high(self, clip_high: float) -> dict:
        return self._change(epsilon_high=float(clip_high))

    def set_entropy_coef(self, ent_coef: float) -> dict:
        return self._change(entropy_coef=float(ent_coef))

    def use_sequence_clip(self, clip_low: float, clip_high: float) -> dict:
        return self._change(importance_sampling_level="sequence", epsilon_low=float(clip_low),
                            epsilon_high=float(clip_high))

    def set_lr(self, lr: float) -> dict:
        before = self._lr()
        factor = float(lr) / before
        for g in self.trainer.optimizer.param_groups:
            g["lr"] *= factor
        sched = getattr(self.trainer, "lr_scheduler", None)
        sched = getattr(sched, "scheduler", sched)  # accelerate wraps the scheduler
        if sched is not None and hasattr(sched, "base_lrs"):
            sched.base_lrs = [b * factor for b in sched.base_lrs]
        return {"before": {"lr": before}, "after": {"lr": self._lr()}, "factor": factor}

    def checkpoint(self, step: int) -> None:  # pragma: no cover - rollback is not in SUPPORTED
        raise NotImplementedError("rollback is not supported with TRL")

    def rollback(self) -> dict:  # pragma: no cover
        raise NotImplementedError("rollback is not supported with TRL")

    def stop(self, reason: str) -> dict:
        self.trainer.control.should_training_stop = True
        return {"reason": reason}


def attach_stabilizer(trainer: Any, policy: Any = "default", limits: Any = None) -> Any:
    """Run ``policy`` after each logged step of an instrumented GRPOTrainer (its collector needs a Monitor)."""
    col = getattr(trainer, "arldiag_collector", None)
    if col is None or getattr(col, "monitor", None) is None:
        raise ValueError("attach_stabilizer: the trainer's arldiag collector needs a monitor "
                         "(arldiag_kwargs={'monitor': arldiag.Monitor()})")
    trainer.arldiag_stabilizer = Stabilizer(policy, TRLControls(trainer), record=col.record_action, limits=limits)
    return trainer.arldiag_stabilizer
