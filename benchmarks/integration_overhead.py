"""Overhead of the TRL and verl hooks, as ratios measured in one process.

TRL: the same tiny GRPO training (tests/integrations/trl_setup.py: a Qwen3 built from a config, 16 completions per
step, CPU) with TRL's GRPOTrainer and with arldiag's instrumented subclass, alternated, best of ``--repeat``;
reported as the ratio of the per-step times, and as the time spent inside the hooks (record_rollout /
record_update / record_step) over the instrumented run's step time.

verl: verl's vanilla policy loss vs ``arldiag_vanilla`` on one micro-batch (``--batch`` x ``--length`` tokens);
the loss function is a small part of a verl step (the forward and backward pass of the model dominate), so this
ratio is an upper bound on nothing but the loss call; the absolute cost per call in ms is the number to compare
with a real step.

    python benchmarks/integration_overhead.py [--steps 6] [--repeat 3]

Figures, not assertions: the machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def trl_run(instrumented: bool, steps: int, hook_time: list[float]) -> float:
    from integrations.trl_setup import grpo_trainer

    from arldiag.collectors.collector import Collector
    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        kw = {"arldiag_run": f"{tmp}/run"} if instrumented else None
        tr = grpo_trainer(f"{tmp}/out", cls=ArldiagGRPOTrainer if instrumented else None, max_steps=steps,
                          trainer_kwargs=kw, disable_tqdm=True)
        spent = [0.0]
        if instrumented:  # time inside the Collector calls the hooks make
            col = tr.arldiag_collector
            for name in ("record_rollout", "record_update", "record_step"):
                fn = getattr(col, name)

                def timed(*a, _fn=fn, **k):
                    t = time.perf_counter()
                    try:
                        return _fn(*a, **k)
                    finally:
                        spent[0] += time.perf_counter() - t
                setattr(col, name, timed)
        t0 = time.perf_counter()
        tr.train()
        wall = time.perf_counter() - t0
        hook_time.append(spent[0])
    return wall / steps


def verl_loss(batch: int, length: int, repeat: int) -> tuple[float, float]:
    import torch
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    import arldiag
    from arldiag.collectors import verl_loss as vl

    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(batch, length, generator=g) * 3
    new = old + torch.randn(batch, length, generator=g) * 0.1
    adv = torch.randn(batch, 1, generator=g).expand(batch, length).contiguous()
    mask = torch.ones(batch, length)
    kw = dict(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, config=cfg)
    with tempfile.TemporaryDirectory() as tmp:
        vl.RECORDER.__init__(collector=arldiag.Collector(f"{tmp}/v"))
        best = {}
        for name in ("vanilla", "arldiag_vanilla") * repeat:
            fn = core_algos.get_policy_loss_fn(name)
            t = time.perf_counter()
            for step in range(5):
                vl.RECORDER.set_step(step)
                fn(**kw)
            best[name] = min(best.get(name, 1e9), (time.perf_counter() - t) / 5)
        vl.RECORDER.close()
    return best["vanilla"], best["arldiag_vanilla"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=512)
    args = ap.parse_args()
    base, inst, hooks = [], [], []
    trl_run(False, 1, [])  # warm-up: imports, first-call costs
    for _ in range(args.repeat):
        base.append(trl_run(False, args.steps, []))
        h: list[float] = []
        inst.append(trl_run(True, args.steps, h))
        hooks.append(h[0] / args.steps)
    b, i = min(base), min(inst)
    share = min(hooks) / i
    print(f"TRL tiny GRPO, {args.steps} steps: {b * 1e3:.0f} ms/step without, {i * 1e3:.0f} ms/step with the hook: "
          f"ratio {i / b:.3f}; inside the hooks {min(hooks) * 1e3:.1f} ms/step = {100 * share:.2f} % of the step")
    try:
        v0, v1 = verl_loss(args.batch, args.length, args.repeat)
        print(f"verl vanilla loss, {args.batch}x{args.length} tokens: {v0 * 1e3:.2f} ms, arldiag_vanilla "
              f"{v1 * 1e3:.2f} ms per call (+{(v1 - v0) * 1e3:.2f} ms)")
    except ImportError as exc:
        print(f"verl not installed ({exc}); skipped")


if __name__ == "__main__":
    main()
