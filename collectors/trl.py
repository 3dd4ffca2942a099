"""TRL adapter: a transformers ``TrainerCallback`` that forwards the step metrics TRL logs (GRPOTrainer's
``clip_ratio/*``, ``kl``, ``entropy``, ``reward``, ``frac_reward_zero_std``, ``grad_norm`` ...) to a Collector.

Token-level statistics need the tensors inside ``compute_loss``; call ``collector.record_update`` there (see the
README). Importing this module imports transformers; nothing else in arldiag does so on the trainer path.
"""
from __future__ import annotations

import math
from typing import Any

from transformers import TrainerCallback


class ArldiagCallback(TrainerCallback):
    """``trainer.add_callback(ArldiagCallback(collector))``: every ``on_log`` becomes ``record_step``.

    TRL metric names contain "/" (``clip_ratio/low_mean``); they are stored under the same names."""

    def __init__(self, collector: Any):
        self.collector = collector

    def on_log(self, args, state, control, logs=None, **kwargs):
        metrics = {k: float(v) for k, v in (logs or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}
        if metrics:
            self.collector.record_step(int(state.global_step), metrics)
        if self.collector.should_stop:
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.collector.close()
        return control
