"""verl without a fork: a policy-loss mode that delegates to verl's own loss and records the tensors it sees.

verl picks the actor's policy loss by name from a registry (``verl.trainer.ppo.core_algos.register_policy_loss`` /
``get_policy_loss_fn``, config key ``actor_rollout_ref.actor.policy_loss.loss_mode``). ``register()`` adds

- ``arldiag``: delegates to the loss named by ``$ARLDIAG_VERL_INNER_LOSS`` (default ``vanilla``);
- ``arldiag_<mode>`` for every mode registered at that time (``arldiag_gspo``, ``arldiag_cispo``, ...),

each computing verl's loss unchanged and recording, per call (one verl micro-batch), ``log_prob``, ``old_log_prob``,
``advantages`` and ``response_mask`` through ``Collector.record_update(..., defer=True)`` (a copy is kept; the
statistics of the step's micro-batches are computed in one pass when the step ends), plus the actor's ``entropy`` and
``ref_log_prob`` when the caller (verl's ``ppo_loss``) has them: verl hands the policy loss only the four tensors, so
the other two are read from the calling frame's locals (checked by name and shape, skipped otherwise). The metrics
the inner loss returns (``actor/pg_clipfrac``, ``actor/ppo_kl``, ...) are averaged over the step's calls, as verl
averages them, and recorded as step metrics.

arldiag's package declares a ``verl.plugins`` entry point (``arldiag.collectors.verl_plugin``), which verl imports
in every process when ``verl`` is imported (verl >= 0.7, ``VERL_USE_EXTERNAL_PLUGINS=auto`` by default), including
its Ray workers, so the loss modes exist wherever verl looks them up.

Where: ``$ARLDIAG_RUN`` (the run folder; each rank writes its own parts). Without it nothing is recorded (a warning
says so once) and the loss is verl's, unchanged. Steps: verl does not pass the trainer's step to the loss, so a step
is one call of the worker's ``update_actor`` (found on the call stack; counted from 1 like verl's ``global_steps``),
or what ``set_step(n)`` said last (custom loops, tests). Loss calls outside both (verl's eval-mode loss) are not
recorded.

Auto-stabilize: ``$ARLDIAG_AUTO_STABILIZE`` (a policy name or module:function) attaches a Monitor and a
Stabilizer whose only lever is the neg-adv low-IS mask applied inside this loss (``VerlControls``).
"""
from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from typing import Any

from arldiag.collectors.collector import Collector
from arldiag.monitor import Monitor
from arldiag.stabilize import Stabilizer

LOSS_MODE = "arldiag"
INNER_ENV = "ARLDIAG_VERL_INNER_LOSS"
RUN_ENV = "ARLDIAG_RUN"
STABILIZE_ENV = "ARLDIAG_AUTO_STABILIZE"  # a policy name or module:function: VerlControls acts on the loss
_CALLER_TENSORS = ("entropy", "ref_log_prob")


def _rank() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class VerlLossRecorder:
    """One per process. ``collector`` may be given (tests, custom loops); otherwise one is opened at ``$ARLDIAG_RUN``
    on the first call, with the band of the actor config (clip_ratio_low/high, clip_ratio_c)."""

    def __init__(self, collector: Any = None, run_dir: str | None = None):
        self.collector = collector
        self.run_dir = run_dir
        self.step: int | None = None
        self._explicit_step: int | None = None
        self._update_ref: Any = None
        self._updates = 0
        self._metrics: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._warned = False
        self.nalis_delta: float | None = None   # set by --auto-stabilize (VerlControls): mask inside this loss
        self.stabilizer: Any = None             # attach_stabilizer(): runs after each finished step

    # ------------------------------------------------------------------ step bookkeeping
    def set_step(self, step: int) -> None:
        """Record the following calls under ``step`` (overrides the update_actor count)."""
        self._explicit_step = int(step)

    def _current_step(self) -> int | None:
        """The step of this call, or None when it is not a training update: no ``set_step`` and no ``update_actor``
        on the stack (verl also evaluates the loss in eval mode, e.g. for SFT metrics)."""
        if self._explicit_step is not None:
            return self._explicit_step
        data = _update_actor_data()
        if data is None:
            return None
        if self._update_ref is None or self._update_ref() is not data:  # a new update_actor call: a new step
            try:
                self._update_ref = weakref.ref(data)
            except TypeError:  # not weak-referenceable: hold it until the next update_actor call
                self._update_ref = (lambda d=data: d)
            return (self.step or 0) + 1
        return self.step

    def _open(self, config: Any, inner: str) -> Any:
        if self.collector is not None:
            return self.collector
        run_dir = self.run_dir or os.environ.get(RUN_ENV)
        if not run_dir:
            if not self._warned:
                self._warned = True
                warnings.warn(f"arldiag: loss mode {LOSS_MODE!r} is active but ${RUN_ENV} is not set; nothing is "
                              f"recorded (verl's {inner!r} loss runs unchanged)", RuntimeWarning, stacklevel=3)
            return None

        low, high = band(config)
        rank, world = _rank()
        policy = os.environ.get(STABILIZE_ENV)
        monitor = None
        if policy:  # --auto-stabilize for verl: the Monitor's state drives the policy (VerlControls)

            monitor = Monitor(sinks=("console", "store"))
        self.collector = Collector(run_dir, config={"framework": "verl", "loss_mode": inner,
                                                    "auto_stabilize": policy or None}, clip=(low, high),
                                   algorithm=inner, rank=rank, world_size=world,
                                   dual_clip_c=float(_get(config, "clip_ratio_c", 3.0)), monitor=monitor)
        if policy:
            attach_stabilizer(self, policy)
        # Ray may end a worker without running exit handlers: a finished step is published when 5 s passed since the
        # last publish (the Collector's flush_every_s), i.e. as it finishes when steps take longer than that, as
        # verl's do, and with at most 10 steps' delay when they are shorter (each publish writes one Parquet part
        # per table, ~8 ms of writer CPU for a ~100-column steps row: per step, that was 20 % of a tiny step,
        # docs/integrations/overhead.md); the last step is finalised by close(), at exit when the process exits
        # normally
        import atexit

        atexit.register(self.close)
        return self.collector

    # ------------------------------------------------------------------ the loss
    def loss(self, inner: str, old_log_prob, log_prob, advantages, response_mask, **kwargs):
        """verl's ``inner`` loss on the same arguments (keyword arguments passed through as given, so each loss keeps
        its own defaults, e.g. GSPO's seq-mean-token-mean), then the recording."""
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        loss_mask = response_mask
        if self.nalis_delta is not None:  # the neg-adv low-IS mask (ARLArena), switched on by a stabilizing policy
            from arldiag.trainer.losses import nalis_sample_mask

            keep = nalis_sample_mask(log_prob, old_log_prob, advantages, response_mask, self.nalis_delta)
            loss_mask = response_mask * keep[:, None].to(response_mask.dtype)
        pg_loss, pg_metrics = get_policy_loss_fn(inner)(
            old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=loss_mask,
            **kwargs)
        extra = _caller_tensors(response_mask.shape)
        col = self._open(kwargs.get("config"), inner)
        if col is not None:
            col.guard.run("verl loss", self._record, col, old_log_prob, log_prob, advantages, response_mask,
                       pg_metrics, extra)
        return pg_loss, pg_metrics

    def _record(self, col, old_log_prob, log_prob, advantages, response_mask, pg_metrics, extra) -> None:
        with self._lock:
            step = self._current_step()
            if step is None:
                return
            if step != self.step:
                self._finish_step()
                self.step, self._updates = step, 0
            col.record_update(step, self._updates, logp=log_prob.detach(), logp_old=old_log_prob,
                              advantages=advantages, response_mask=response_mask,
                              entropy=extra.get("entropy"), logp_ref=extra.get("ref_log_prob"), defer=True)
            self._updates += 1
            for k, v in pg_metrics.items():
                v = getattr(v, "value", v)  # verl may wrap values in a Metric
                if hasattr(v, "detach"):  # kept on its device: read once per step, not one host sync per call
                    self._metrics.setdefault(k, []).append(v.detach())
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._metrics.setdefault(k, []).append(float(v))

    def _finish_step(self) -> None:
        if self.step is None or self.collector is None:
            return
        metrics = {k: _mean(v) for k, v in self._metrics.items() if v}
        self._metrics = {}
        self.collector.record_step(self.step, {k: v for k, v in metrics.items() if v is not None})
        if self.stabilizer is not None:  # this step's result now (a step of GPU tensors lands during the next one)
            self.collector.settle()
        res = getattr(getattr(self.collector, "monitor", None), "last_result", None)
        if self.stabilizer is not None and res is not None and res.step == self.step:
            self.collector.guard.run("auto-stabilize", self.stabilizer.on_result, res)

    def close(self) -> None:
        with self._lock:
            self._finish_step()
            self.step = None
            if self.collector is not None:
                self.collector.close()


def _mean(values: list) -> Any:
    """Mean of a step's values (floats or one-element tensors, as verl's losses return them): a float, or a 0-d
    tensor on the values' device, which ``Collector.record_step`` reads with its other device values in one copy
    (no host wait per metric)."""
    if all(isinstance(v, float) for v in values):
        return sum(values) / len(values)
    import torch

    dev = next(v.device for v in values if not isinstance(v, float))
    try:
        mean = torch.stack([torch.as_tensor(v, device=dev).reshape(()).to(torch.float64) for v in values]).mean()
    except (RuntimeError, TypeError, ValueError):  # not scalars: not a metric arldiag can average
        return None
    return mean if dev.type != "cpu" else float(mean)


class VerlControls:
    """--auto-stabilize for verl: only what the policy loss can change on its own. verl hands the loss function the
    four tensors and the actor config; the optimizer and the scheduler live in the FSDP/Megatron worker, out of the
    loss's reach, so the learning rate, a rollback and a stop are not supported. Each rank decides on the metrics of
    its own micro-batches (its own collector and monitor)."""

    supports = frozenset({"nalis_mask"})
    # how each action is carried out, or why not (docs/stabilize.md's table of trainers)
    notes = {"nalis_mask": "inside the wrapped `arldiag_<mode>` loss",
             "lr_scale": "the optimizer lives in the worker, out of the loss's reach",
             "entropy_coef": "verl adds `entropy_coeff`'s bonus outside the policy loss",
             "truncation_mask": "the loss is not told which responses hit the length cap"}

    def __init__(self, recorder: "VerlLossRecorder") -> None:
        self.recorder = recorder

    def settings(self) -> dict[str, Any]:
        d = self.recorder.nalis_delta
        return {"nalis_mask": d is not None, "nalis_delta": float("inf") if d is None else float(d)}

    def set_nalis_mask(self, delta: float) -> dict:
        before = self.recorder.nalis_delta
        self.recorder.nalis_delta = float(delta)
        return {"before": {"nalis_delta": before}, "after": {"nalis_delta": float(delta)}}


def attach_stabilizer(recorder: "VerlLossRecorder", policy: Any = "default", limits: Any = None) -> Any:
    """Run ``policy`` after each step the recorder finishes (its collector needs a Monitor)."""
    col = recorder.collector
    if col is None or getattr(col, "monitor", None) is None:
        raise ValueError("attach_stabilizer: the recorder needs a collector with a monitor")
    recorder.stabilizer = Stabilizer(policy, VerlControls(recorder), record=col.record_action, limits=limits)
    return recorder.stabilizer


def _get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    v = getter(key, default) if getter is not None else getattr(config, key, default)
    return default if v is None else v


def band(config: Any) -> tuple[float, float]:
    """verl's token band: clip_ratio_low/high, each defaulting to clip_ratio (0.2)."""
    base = float(_get(config, "clip_ratio", 0.2))
    return float(_get(config, "clip_ratio_low", base)), float(_get(config, "clip_ratio_high", base))


def _update_actor_data() -> Any:
    """The ``data`` argument of the nearest ``update_actor`` frame on the stack (one per training step), or None."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "update_actor" and "data" in f.f_locals:
            return f.f_locals["data"]
        f = f.f_back
    return None


def _caller_tensors(shape) -> dict[str, Any]:
    """``entropy`` and ``ref_log_prob`` from verl's ``ppo_loss`` frame (the policy loss's caller), when present and
    shaped like the response mask. verl's loss interface does not pass them (see the module docstring)."""
    f = sys._getframe(3)  # _caller_tensors <- loss <- registered fn <- ppo_loss
    out: dict[str, Any] = {}
    for _ in range(3):
        if f is None:
            break
        loc = f.f_locals
        ent = loc.get("entropy")
        if ent is not None and getattr(ent, "shape", None) == shape:
            out["entropy"] = ent.detach()
        data = loc.get("data")
        if data is not None and hasattr(data, "get"):
            try:
                ref = data.get("ref_log_prob", None)
            except Exception:  # noqa: BLE001 - not a mapping of tensors
                ref = None
            if ref is not None and getattr(ref, "shape", None) == shape:
                out["ref_log_prob"] = ref
        if out:
            break
        f = f.f_back
    return out


RECORDER = VerlLossRecorder()


def _mode_fn(inner: str | None):
    def fn(old_log_prob, log_prob, advantages, response_mask, **kwargs):
        name = inner or os.environ.get(INNER_ENV, "vanilla")
        return RECORDER.loss(name, old_log_prob, log_prob, advantages, response_mask, **kwargs)

    fn.__name__ = f"arldiag_{inner or 'env'}_policy_loss"
    fn.__doc__ = f"verl's {inner or '$' + INNER_ENV} policy loss, recorded by arldiag."
    return fn


def register() -> list[str]:
    """Register ``arldiag`` and ``arldiag_<mode>`` for every policy loss verl has now; returns the new names."""
    from verl.trainer.ppo import core_algos

    names = []
    for mode in [None] + sorted(core_algos.POLICY_LOSS_REGISTRY):
        if mode is not None and mode.startswith(LOSS_MODE):
            continue
        name = LOSS_MODE if mode is None else f"{LOSS_MODE}_{mode}"
        if name not in core_algos.POLICY_LOSS_REGISTRY:
            core_algos.register_policy_loss(name)(_mode_fn(mode))
            names.append(name)
    return names
