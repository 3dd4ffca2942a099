"""The reference trainer's side of --auto-stabilize: every action of arldiag.stabilize, applied to the live run.

``TrainerControls`` implements ``arldiag.stabilize.Stabilizable`` over the objects the loop owns: the per-run
copy of the TrainConfig (the loss reads algo / clip / nalis settings from it at every mini-batch, so a change
applies from the next update on), the AdamW optimizer (learning rate through its param groups), the policy and
the lagged sampler (a rollback clears the sampler's weight history so that it plays the restored weights).
"""
from __future__ import annotations

import copy
from typing import Any

from arldiag.stabilize import ACTION_KINDS
from arldiag.trainer.config import SEQUENCE_CLIP_ALGOS

SEQ_CLIP_ALGO = "gspo"  # the sequence-level clip the seq_clip action switches a token-clip loss to


class TrainerControls:
    supports = frozenset(ACTION_KINDS)
    # how each action is carried out here (docs/stabilize.md's table of trainers, arldiag.stabilize.actions_doc)
    notes = {"nalis_mask": "the loop's mask", "seq_clip": "switches the loss to GSPO", "lr_scale": "AdamW param groups",
             "rollback": "in-memory copy of policy + optimizer", "truncation_mask": "`mask_truncated`",
             "clip_high": "`clip_high`", "entropy_coef": "`ent_coef` (the loss's entropy bonus)"}

    def __init__(self, cfg: Any, model: Any, optimizer: Any, sampler: Any = None) -> None:
        self.cfg, self.model, self.optimizer, self.sampler = cfg, model, optimizer, sampler
        self.saved: dict | None = None
        self.stop_reason: str | None = None

    def settings(self) -> dict[str, Any]:
        c = self.cfg
        return {"lr": float(self.optimizer.param_groups[0]["lr"]), "clip_low": float(c.clip_low),
                "clip_high": float(c.clip_high), "algo": c.algo, "seq_clip": c.algo in SEQUENCE_CLIP_ALGOS,
                "nalis_mask": bool(c.resolved_nalis_mask()), "nalis_delta": float(c.nalis_delta),
                "mask_truncated": bool(c.mask_truncated), "ent_coef": float(c.ent_coef)}

    def _change(self, **values: Any) -> dict:
        before = {k: getattr(self.cfg, k) for k in values}
        for k, v in values.items():
            setattr(self.cfg, k, v)
        return {"before": before, "after": dict(values)}

    def set_nalis_mask(self, delta: float) -> dict:
        return self._change(nalis_mask=True, nalis_delta=float(delta))

    def set_clip(self, clip_low: float, clip_high: float) -> dict:
        return self._change(clip_low=float(clip_low), clip_high=float(clip_high))

    def set_truncation_mask(self) -> dict:
        return self._change(mask_truncated=True)

    def set_clip_high(self, clip_high: float) -> dict:
        return self._change(clip_high=float(clip_high))

    def set_entropy_coef(self, ent_coef: float) -> dict:
        # the loss reads cfg.ent_coef at every mini-batch; at 0 it also stops taking the entropy's gradient
        return self._change(ent_coef=float(ent_coef))

    def use_sequence_clip(self, clip_low: float, clip_high: float) -> dict:
        # GSPO's sequence ratio with its own (much narrower) band; the loss aggregation stays the run's
        return self._change(algo=SEQ_CLIP_ALGO, clip_low=float(clip_low), clip_high=float(clip_high))

    def set_lr(self, lr: float) -> dict:
        before = float(self.optimizer.param_groups[0]["lr"])
        for g in self.optimizer.param_groups:
            g["lr"] = float(lr)
        self.cfg.lr = float(lr)  # the step metric "lr" reports it
        return {"before": {"lr": before}, "after": {"lr": float(lr)}}

    def checkpoint(self, step: int) -> None:
        self.saved = {"step": int(step), "model": copy.deepcopy(self.model.state_dict()),
                      "optimizer": copy.deepcopy(self.optimizer.state_dict())}

    def rollback(self) -> dict:
        if self.saved is None:
            raise RuntimeError("no checkpoint to roll back to")
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.model.load_state_dict(self.saved["model"])
        self.optimizer.load_state_dict(copy.deepcopy(self.saved["optimizer"]))
        for g, lr in zip(self.optimizer.param_groups, lrs):  # the learning rate is a setting, not state: keep it
            g["lr"] = lr
        if self.sampler is not None and getattr(self.sampler, "snapshots", None) is not None:
            self.sampler.snapshots.clear()
        step, self.saved = self.saved["step"], None  # restored once: a checkpoint is never reused
        return {"to_step": step}

    def stop(self, reason: str) -> dict:
        self.stop_reason = reason
        return {"reason": reason}
