"""``arldiag.attach(trainer_or_config, "runs/NAME")``: wire arldiag into a TRL trainer or a verl config in one line.

What it recognises (by duck typing and module name, so neither framework is imported unless it is what was given):

- a TRL ``GRPOTrainer`` (or subclass): its class becomes the instrumented subclass (arldiag.collectors.trl_grpo):
  per-token update statistics, the rollout's groups and rewards, TRL's logged scalars;
- any other transformers ``Trainer``: TRL's/transformers' logged scalars only (``ArldiagCallback``);
- a verl config (an omegaconf ``DictConfig`` or a mapping with ``actor_rollout_ref``): sets
  ``actor_rollout_ref.actor.policy_loss.loss_mode`` to ``arldiag_<mode>`` and ``$ARLDIAG_RUN`` (inherited by the Ray
  workers started after this call), so the worker-side loss records per-token statistics.

Whatever it could not wire is returned in ``Attachment.missing`` and printed (never silently skipped).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from arldiag.collectors.collector import Collector


@dataclass
class Attachment:
    framework: str                 # "trl" | "transformers" | "verl"
    run_dir: str
    wired: list[str] = field(default_factory=list)     # what is recorded
    missing: list[str] = field(default_factory=list)   # what is not, and why
    collector: Any = None          # the Collector (TRL/transformers); verl opens one per worker process

    def __str__(self) -> str:
        lines = [f"arldiag.attach: {self.framework} -> {self.run_dir}"]
        lines += [f"  recorded: {w}" for w in self.wired]
        lines += [f"  NOT recorded: {m}" for m in self.missing]
        return "\n".join(lines)


def _is_trl_grpo(obj: Any) -> bool:
    return any(c.__name__ == "GRPOTrainer" and c.__module__.startswith("trl") for c in type(obj).__mro__)


def _is_hf_trainer(obj: Any) -> bool:
    return any(c.__name__ == "Trainer" and c.__module__.startswith("transformers") for c in type(obj).__mro__)


def _is_verl_config(obj: Any) -> bool:
    try:
        return "actor_rollout_ref" in obj
    except TypeError:
        return False


def attach(target: Any, run_dir: str | os.PathLike, quiet: bool = False, **collector_kwargs: Any) -> Attachment:
    """Wire arldiag into ``target`` (a TRL/transformers trainer or a verl config); returns what was and was not
    wired, and prints it unless ``quiet``."""
    run_dir = os.fspath(run_dir)
    if _is_trl_grpo(target):
        att = _attach_trl(target, run_dir, collector_kwargs)
    elif _is_hf_trainer(target):
        att = _attach_hf(target, run_dir, collector_kwargs)
    elif _is_verl_config(target):
        att = _attach_verl(target, run_dir, collector_kwargs)
    else:
        raise ValueError(f"trainer_or_config: expected a TRL/transformers Trainer or a verl config (with "
                         f"actor_rollout_ref), got {type(target).__module__}.{type(target).__name__}")
    if not quiet:
        print(att, file=sys.stderr)
    return att


def _attach_trl(trainer: Any, run_dir: str, kw: dict) -> Attachment:
    from arldiag.collectors.trl_grpo import collector_for, instrument

    col = collector_for(trainer, run_dir, **kw)
    instrument(trainer, col)
    att = Attachment("trl", run_dir, collector=col, wired=[
        "per-token log-probs, old log-probs, advantages, loss mask, entropy (GRPOTrainer._compute_loss)",
        "rollout: groups (num_generations per prompt), rewards, completion ids and lengths",
        "TRL's logged scalars (loss, grad_norm, clip_ratio/*, kl, entropy, reward, ...)"])
    if trainer.beta == 0.0:
        att.missing.append("KL to the reference: beta = 0, TRL computes no reference log-probs")
    else:
        att.wired.append("reference log-probs (beta > 0)")
    if not getattr(trainer, "use_vllm", False):
        att.missing.append("training-inference mismatch: generation by the trained model itself (no vLLM), so "
                           "there are no separate sampler log-probs")
    if trainer.num_iterations > 1 or trainer.args.steps_per_generation > trainer.args.gradient_accumulation_steps:
        att.missing.append("group/reward links of updates after the generation step (the batch is reused; the "
                           "rollout is recorded at the step that generated it)")
    att.missing.append("format validity, truncation and success flags (TRL has no such fields; log them from the "
                       "reward function with collector.record_step metrics)")
    return att


def _attach_hf(trainer: Any, run_dir: str, kw: dict) -> Attachment:
    from arldiag.collectors.trl import ArldiagCallback

    col = Collector(run_dir, config={"framework": "transformers", "trainer": type(trainer).__name__}, **kw)
    trainer.add_callback(ArldiagCallback(col))
    return Attachment("transformers", run_dir, collector=col, wired=["the trainer's logged scalars (on_log)"],
                      missing=[f"per-token statistics: {type(trainer).__name__} is not a TRL GRPOTrainer, its loss "
                               "tensors are not reachable"])


def _attach_verl(config: Any, run_dir: str, kw: dict) -> Attachment:
    from arldiag.collectors import verl_loss

    actor = config["actor_rollout_ref"]["actor"]
    pl = actor.get("policy_loss") if hasattr(actor, "get") else None
    mode = (pl.get("loss_mode") if pl is not None else None) or "vanilla"
    att = Attachment("verl", run_dir)
    if kw:
        att.missing.append(f"collector options {sorted(kw)}: the verl workers open their own collectors")
    if not mode.startswith(verl_loss.LOSS_MODE):
        mode = f"{verl_loss.LOSS_MODE}_{mode}"
    try:
        if pl is None:
            actor["policy_loss"] = {"loss_mode": mode}
        else:
            pl["loss_mode"] = mode
    except Exception as exc:  # noqa: BLE001 - a read-only (struct) config
        att.missing.append(f"could not set actor_rollout_ref.actor.policy_loss.loss_mode={mode} ({exc}); pass it "
                           "on the command line")
    os.environ[verl_loss.RUN_ENV] = os.path.abspath(run_dir)
    att.wired += [f"policy loss {mode!r}: verl's loss unchanged, per-token log-probs, old log-probs, advantages, "
                  "mask, entropy and reference log-probs when the actor computes them, and the loss's metrics",
                  f"${verl_loss.RUN_ENV}={os.environ[verl_loss.RUN_ENV]} (Ray workers started from now inherit it)"]
    # the driver's logged scalars (critic/score/mean, response_length/*, timing, validation) are recorded live by
    # the plugin's Tracking.log hook (collectors/verl_tracking.py) into the same run
    att.missing += ["rollout side (uid groups, per-sample rewards, rollout log-probs): verl's driver hands them to "
                    "no registry; call arldiag.collectors.verl.record_verl_rollout in a custom loop"]
    try:
        import verl  # noqa: F401 - loads the plugin, which registers the loss modes in this process
    except ImportError:
        att.missing.append("verl is not importable here: the loss modes register where verl runs (entry point)")
    return att
