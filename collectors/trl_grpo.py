"""TRL ``GRPOTrainer`` without a fork: a mixin that records the per-token tensors of its loss and the rollout side.

TRL computes everything arldiag needs inside two methods of ``GRPOTrainer``:

- ``_generate_and_score_completions`` (rollout): rewards per reward function (``_calculate_rewards``, gathered over
  processes), groups (the ``num_generations`` completions of a prompt are consecutive in the global batch),
  completion ids and mask, and the sampler's log-probs (``sampling_per_token_logps``, vLLM only);
- ``_compute_loss`` (update): per-token log-probs and entropies (``_get_per_token_logps_and_entropies``), the old
  log-probs (``old_per_token_logps``; absent when the update is on-policy, then TRL uses ``logps.detach()``), the
  advantages, the reference log-probs (``ref_per_token_logps`` when ``beta > 0``) and the loss mask
  (``completion_mask * tool_mask``).

The mixin overrides those methods, calls TRL's own implementation and hands copies of the tensors to a
``Collector`` (``record_rollout`` / ``record_update``); ``on_log`` records TRL's logged scalars with
``record_step``. TRL's behaviour is unchanged: the loss is TRL's, and every recording goes through
the collector's ``Guard`` (``collector.guard``: a failure warns once, training continues).

Step numbers are TRL's ``global_step`` as it logs them: work done while ``state.global_step == s`` belongs to step
``s + 1``, the step whose metrics TRL logs after that optimizer step. Each sample gets an id that travels with the
generation batch (an extra int64 column ``arldiag_sample_id``; TRL shuffles and splits every column in unison), so
the update rows link to the rollout's group and reward.
"""
from __future__ import annotations

import math
from typing import Any

from arldiag.collectors.collector import Collector

SAMPLE_ID_KEY = "arldiag_sample_id"
_TOLERANT_LOSSES = ("cispo", "sapo", "vespo")  # no (1 - eps_low, 1 + eps_high) band: record against GRPO's


def trl_clip(trainer: Any) -> tuple[float, float]:
    """The token band of the trainer's loss: (epsilon_low, epsilon_high) for the clipped losses; for CISPO/SAPO/
    VESPO, whose epsilon_high is a cap (CISPO: 5.0) or unused, the GRPO band (0.2, 0.28) as the reference trainer
    does."""
    if getattr(trainer, "loss_type", "grpo") in _TOLERANT_LOSSES:
        return 0.2, 0.28
    return float(trainer.epsilon_low), float(trainer.epsilon_high)


class ArldiagGRPOMixin:
    """Put before ``GRPOTrainer`` in the bases; set ``arldiag_collector`` (or use ``instrument``/``attach``)."""

    arldiag_collector: Any = None
    arldiag_stabilizer: Any = None  # trl_stabilize.attach_stabilizer
    _arldiag_capture: list | None = None
    _arldiag_rewards: Any = None
    _arldiag_gen_calls: int = 0
    _arldiag_updates: int = 0
    _arldiag_update_step: int | None = None

    def __init__(self, *args: Any, arldiag_run: str | None = None, arldiag_collector: Any = None,
                 arldiag_kwargs: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if arldiag_collector is None and arldiag_run is not None:
            arldiag_collector = collector_for(self, arldiag_run, **(arldiag_kwargs or {}))
        self.arldiag_collector = arldiag_collector

    # ------------------------------------------------------------------ rollout
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._arldiag_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._arldiag_rewards = None
        out = super()._generate_and_score_completions(inputs)
        col = self.arldiag_collector
        if col is None or not self.model.training:  # eval batches are not training steps
            return out
        import torch

        n = int(out["completion_ids"].shape[0])
        call = self._arldiag_gen_calls
        self._arldiag_gen_calls += 1
        first = self.accelerator.process_index * n          # this process's slice of the global batch
        glob = torch.arange(first, first + n, dtype=torch.int64)
        # ids unique over the run: generation call in the high 32 bits, index in the global batch below
        sid = (call << 32) + glob
        out[SAMPLE_ID_KEY] = sid.to(out["completion_ids"].device, non_blocking=True)  # queued: no host wait
        col.guard.run("trl rollout", self._arldiag_record_rollout, out, sid, glob, call)
        return out

    def _arldiag_record_rollout(self, out, sid, glob, call) -> None:
        import torch

        rewards = None
        rpf = self._arldiag_rewards
        if rpf is not None:
            w = self.reward_weights.to(rpf.device, non_blocking=True)
            r = (rpf * w.unsqueeze(0)).nansum(dim=1)
            # TRL's "unscorable" rows; torch.where, not a boolean index (a host wait on a GPU)
            r = torch.where(rpf.isnan().all(dim=1), float("nan"), r)
            rewards = r[glob.to(r.device, non_blocking=True)] if r.shape[0] > glob.max() else None
        mask = out["completion_mask"]
        if "tool_mask" in out:
            mask = mask * out["tool_mask"]
        self.arldiag_collector.record_rollout(
            self._arldiag_step(), sample_ids=sid, group_ids=(call << 32) + glob // self.num_generations,
            token_ids=out["completion_ids"], response_mask=mask,
            logp_rollout=out.get("sampling_per_token_logps"), rewards=rewards)

    # ------------------------------------------------------------------ update
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        res = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._arldiag_capture is not None:  # only the call made by _compute_loss
            self._arldiag_capture.append(res)
        return res

    def _compute_loss(self, model, inputs):
        col = self.arldiag_collector
        if col is None or not self.model.training:
            return super()._compute_loss(model, inputs)
        self._arldiag_capture = []
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            captured, self._arldiag_capture = self._arldiag_capture, None
        if captured:
            col.guard.run("trl update", self._arldiag_record_update, inputs, captured[0])
        return loss

    def _arldiag_record_update(self, inputs, captured) -> None:
        logps, entropies = captured[0].detach(), captured[1]
        step = self._arldiag_step()
        if step != self._arldiag_update_step:
            self._arldiag_update_step, self._arldiag_updates = step, 0
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        self.arldiag_collector.record_update(
            step, self._arldiag_updates, logp=logps, logp_old=logps if old is None else old,
            advantages=inputs["advantages"], response_mask=mask, logp_ref=inputs.get("ref_per_token_logps"),
            entropy=None if entropies is None else entropies.detach(), sample_ids=inputs.get(SAMPLE_ID_KEY),
            token_ids=inputs["completion_ids"], defer=True)
        self._arldiag_updates += 1

    def _arldiag_step(self) -> int:
        return int(self.state.global_step) + 1

    # ------------------------------------------------------------------ scalars and the end of training
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)  # TRL adds its averaged metrics to ``logs`` in place
        col = self.arldiag_collector
        if col is None or not self.model.training or "train_runtime" in logs \
                or any(k.startswith("eval_") for k in logs):  # eval logs and the end-of-training summary
            return
        metrics = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(float(v))}
        col.record_step(int(self.state.global_step), metrics)
        stab = self.arldiag_stabilizer  # collectors/trl_stabilize.py: act before the next optimizer step
        if stab is not None:
            col.settle()  # this step's result now, not after a batch (Collector batch_s)
        res = getattr(col.monitor, "last_result", None) if stab is not None else None
        if res is not None and res.step == int(self.state.global_step):
            col.guard.run("auto-stabilize", stab.on_result, res)
        if col.should_stop:
            self.control.should_training_stop = True

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.arldiag_collector is not None:
                self.arldiag_collector.close()  # finalises the last step, marks the run finished


_CLASSES: dict[type, type] = {}


def instrumented_class(base: type) -> type:
    """``base`` (GRPOTrainer or a subclass of it) with the mixin in front; one class per base."""
    if issubclass(base, ArldiagGRPOMixin):
        return base
    if base not in _CLASSES:
        _CLASSES[base] = type(f"Arldiag{base.__name__}", (ArldiagGRPOMixin, base), {"__module__": __name__})
    return _CLASSES[base]


def instrument(trainer: Any, collector: Any) -> Any:
    """Instrument an already built ``GRPOTrainer`` in place (its class becomes the instrumented subclass)."""
    trainer.__class__ = instrumented_class(type(trainer))
    trainer.arldiag_collector = collector
    return trainer


def collector_for(trainer: Any, run_dir: str, **kwargs: Any) -> Any:
    """A Collector whose manifest carries the trainer's loss, band and GRPO settings."""
    args = trainer.args
    config = {"framework": "trl", "loss_type": trainer.loss_type, "beta": trainer.beta,
              "epsilon_low": trainer.epsilon_low, "epsilon_high": trainer.epsilon_high,
              "num_generations": trainer.num_generations, "num_iterations": trainer.num_iterations,
              "importance_sampling_level": trainer.importance_sampling_level,
              "learning_rate": args.learning_rate, "per_device_train_batch_size": args.per_device_train_batch_size,
              "gradient_accumulation_steps": args.gradient_accumulation_steps}
    kwargs.setdefault("clip", trl_clip(trainer))
    # a tiny TRL step takes tens of ms: steps within 0.5 s share one statistics pass (Collector batch_s)
    kwargs.setdefault("batch_s", 0.5)
    kwargs.setdefault("algorithm", trainer.loss_type)
    kwargs.setdefault("rank", trainer.accelerator.process_index)
    kwargs.setdefault("world_size", trainer.accelerator.num_processes)
    return Collector(run_dir, config=config, **kwargs)


def __getattr__(name: str):  # ArldiagGRPOTrainer imports trl on first use only
    if name == "ArldiagGRPOTrainer":
        from trl import GRPOTrainer

        return instrumented_class(GRPOTrainer)
    raise AttributeError(name)
