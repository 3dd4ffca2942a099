"""Reference-trainer speed: steps/s, generated tokens/s, and the Collector's share of step time.

The same run (same seed, so the same rollouts and updates) is trained twice in one process: once with the real
arldiag.Collector and once with a no-op object with the same methods (loop.NullCollector). The Collector's share is
reported two ways: (a) the time spent inside its hooks, measured by a timing proxy around the real Collector
(robust on a shared machine), and (b) the difference of the two runs' step times (noisy when other jobs share the
CPU). Target on the 2-core dev machine: a 200-step Sokoban run in <= 20 min, the Collector <= 3 % of step time.

    python benchmarks/trainer_speed.py --steps 5 [--algo sampo] [--hidden-size 64] [--init bc]
"""
from __future__ import annotations

import argparse
import tempfile
import time

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="sampo")
    p.add_argument("--env", default="sokoban")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--n-tasks", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--init", default="bc")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--token-sample-rate", type=float, default=0.05)
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="arldiag-speed-")
    cfg = make_config(a.algo, env=a.env, steps=a.steps, hidden_size=a.hidden_size, n_tasks=a.n_tasks,
                      group_size=a.group_size, init=a.init, threads=a.threads, out=out,
                      token_sample_rate=a.token_sample_rate)
    quiet = lambda s: None  # noqa: E731
    train(make_config(a.algo, env=a.env, steps=1, hidden_size=a.hidden_size, n_tasks=a.n_tasks,
                      group_size=a.group_size, init=a.init, threads=a.threads, out=out + "-warm"),
          collector=NullCollector(), log=quiet)  # warm-up: BC cache, imports, allocator
    timed = TimedCollector(open_collector(cfg))
    with_col = train(cfg, collector=timed, log=quiet)
    without = train(cfg, collector=NullCollector(), log=quiet)

    def summary(res):
        h = res["history"]
        step_s = sum(x["step_s"] for x in h)
        return step_s, sum(x["gen_tokens"] for x in h), len(h)

    s_with, tok, n = summary(with_col)
    s_without, _, _ = summary(without)
    print(f"config: algo={a.algo} env={a.env} hidden={a.hidden_size} tasks x group={a.n_tasks}x{a.group_size} "
          f"steps={n} layout={with_col['layout']}")
    print(f"steps/s (no collector):        {n / s_without:.3f}  ({s_without / n:.2f} s/step)")
    print(f"steps/s (with collector):      {n / s_with:.3f}  ({s_with / n:.2f} s/step)")
    print(f"generated tokens/s:            {tok / s_without:.1f}")
    print(f"collector share (hook time):   {100 * timed.seconds / s_with:.2f} %  ({timed.seconds:.3f} s in hooks)")
    print(f"collector share (difference):  {100 * (s_with - s_without) / s_with:+.2f} %  (noisy on a shared CPU)")
    print(f"projected 200-step run:        {200 * s_with / n / 60:.1f} min")


if __name__ == "__main__":
    main()
