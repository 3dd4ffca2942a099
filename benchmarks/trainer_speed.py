"""Reference-trainer speed: s/step, episodes/s, achieved GFLOP/s against a matmul measured in the same process, the
share of each phase, and the Collector's share of step time.

The same run (same seed, so the same rollouts and updates) is trained twice in one process: once with the real
arldiag.Collector and once with a no-op object with the same methods (loop.NullCollector); a third, untimed pass
counts its FLOPs with torch's FlopCounterMode. The Collector's share is reported two ways: (a) the time spent inside
its hooks, measured by a timing proxy around the real Collector (robust on a shared machine), and (b) the difference
of the two runs' step times (noisy when other jobs share the CPU). Defaults: the sample-run suite's setting
(sample_runs/suite.py SETTING) on one thread. Target: a step of 128 episodes in <= 3.5 s on one core.

    python benchmarks/trainer_speed.py [--steps 3] [--algo grpo] [--hidden-size 128] [--threads 1]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from arldiag.trainer.config import make_config
from arldiag.trainer.loop import NullCollector, open_collector, train


class TimedCollector:
    """Forwards every hook to ``inner`` and adds up the seconds spent inside the hooks."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        t = time.perf_counter()
        self.inner.__exit__(*exc)
        self.seconds += time.perf_counter() - t

    @property
    def should_stop(self):
        return self.inner.should_stop

    def _timed(self, name, *a, **kw):
        t = time.perf_counter()
        try:
            return getattr(self.inner, name)(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t

    def record_rollout(self, *a, **kw):
        return self._timed("record_rollout", *a, **kw)

    def record_update(self, *a, **kw):
        return self._timed("record_update", *a, **kw)

    def record_step(self, *a, **kw):
        return self._timed("record_step", *a, **kw)


def matmul_gflops(hidden: int, rows: int = 8192, repeats: int = 20) -> float:
    """GFLOP/s of a [rows, hidden] x [hidden, 2 hidden] float32 matmul (the MLP's shape) on this process's threads."""
    import torch

    a, b = torch.randn(rows, hidden), torch.randn(hidden, 2 * hidden)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * rows * hidden * 2 * hidden * repeats / (time.perf_counter() - t) / 1e9


def count_flops(cfg, steps: int) -> float:
    """FLOPs of ``steps`` steps of the same seeded run, counted by torch's FlopCounterMode (matmuls and attention:
    the compute floor; the counting run itself is not timed)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        train(dataclasses.replace(cfg, steps=steps), collector=NullCollector(), log=lambda s: None)
    return float(counter.get_total_flops())


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_runs"))
    from suite import SETTING  # the sample-run suite's shared setting is the default here

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="grpo")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the target is for one core)")
    for key in ("env", "obs_layout", "max_turns", "max_moves", "n_tasks", "group_size", "hidden_size",
                "n_minibatches", "ppo_epochs", "max_new_tokens", "eval_every"):
        default = SETTING.get(key)
        p.add_argument("--" + key.replace("_", "-"), type=type(default) if default is not None else int, default=default)
    p.add_argument("--init", default="bc")
    p.add_argument("--token-sample-rate", type=float, default=0.01)
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="arldiag-speed-")
    knobs = {k: v for k, v in vars(a).items() if k not in ("algo", "steps") and v is not None}
    cfg = make_config(a.algo, steps=a.steps, out=out, **knobs)
    quiet = lambda s: None  # noqa: E731
    t = time.perf_counter()
    train(dataclasses.replace(cfg, steps=1, out=out + "-warm"), collector=NullCollector(), log=quiet)  # BC, imports
    warm_s = time.perf_counter() - t
    timed = TimedCollector(open_collector(cfg))
    with_col = train(cfg, collector=timed, log=quiet)
    without = train(cfg, collector=NullCollector(), log=quiet)
    flops = count_flops(cfg, a.steps)
    peak = matmul_gflops(a.hidden_size)

    def total(res, key):
        return sum(x[key] for x in res["history"])

    n = len(without["history"])
    s_with, s_without = total(with_col, "step_s"), total(without, "step_s")
    episodes = n * a.n_tasks * a.group_size
    print(f"config: algo={a.algo} env={a.env} obs_layout={a.obs_layout} hidden={a.hidden_size} "
          f"tasks x group={a.n_tasks}x{a.group_size} minibatches={a.n_minibatches} epochs={a.ppo_epochs} "
          f"threads={a.threads} steps={n} layout={with_col['layout']} logp_old={without['logp_old_source']}")
    print(f"first run's warm-up (BC or its cache, imports): {warm_s:.1f} s")
    print(f"s/step (no collector):         {s_without / n:.2f}   (target <= 3.5 s for 128 episodes on one core)")
    print(f"s/step (with collector):       {s_with / n:.2f}")
    print(f"episodes/s:                    {episodes / s_without:.1f}")
    print(f"samples per step:              {total(without, 'n_samples') / n:.0f}")
    print(f"achieved GFLOP/s:              {flops / s_without / 1e9:.1f}  vs matmul {peak:.1f} GFLOP/s in this process "
          f"({100 * flops / s_without / 1e9 / peak:.0f} % of it)")
    for phase in ("eval_s", "rollout_s", "update_s"):
        print(f"  share {phase[:-2]:<8}             {100 * total(without, phase) / s_without:.0f} %")
    rest = s_without - sum(total(without, k) for k in ("eval_s", "rollout_s", "update_s"))
    print(f"  share other (batch, adv.)     {100 * rest / s_without:.0f} %")
    print(f"collector share (hook time):   {100 * timed.seconds / s_with:.2f} %  ({timed.seconds:.3f} s in hooks)")
    print(f"collector share (difference):  {100 * (s_with - s_without) / s_with:+.2f} %  (noisy on a shared CPU)")
    print(f"projected 200-step run:        {200 * s_with / n / 60:.1f} min")


if __name__ == "__main__":
    main()
