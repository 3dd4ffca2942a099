"""The speed cost of pinned numerics (`arldiag train --reproducible`, arldiag/trainer/numerics.py).

Pinned numerics must be in the environment before torch loads, so the two settings cannot share a process: each
measurement is a fresh Python process training the lag set's setting (sample_runs/suite.py LAG: CISPO, 8 tasks x 4
rollouts, 2 PPO epochs of 2 mini-batches, the shipped warm start, seed 73) for ``--steps`` steps with no store
(loop.NullCollector) and no evaluation, on one thread in both arms, so the ratio is the cost of the pins (baseline
kernels in torch, MKL and oneDNN; deterministic algorithms), not of threading. Pinned and unpinned processes alternate
(``--repeat`` pairs), so a drift of a shared machine hits both; each process reports the median seconds per step after
its first step and its CPU seconds per step (the whole training call, setup and the first step included, so it is not
comparable with the median step), plus a float32 matmul of the policy's shape ([256, 128] x [128, 512])
timed in the same process, which isolates the BLAS kernels' share of the cost.

    python benchmarks/pinned_numerics.py [--repeat 3] [--steps 12] [--json out.json]

Figures, not assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

# One measurement (run in a fresh process; argv[1] is "pinned" or "unpinned").
CHILD = r"""
import json, statistics, sys, time
pinned = sys.argv[1] == "pinned"
if pinned:
    from arldiag.trainer.numerics import ensure_environment
    ensure_environment()  # before torch loads
import torch
sys.path.insert(0, "sample_runs")
from suite import LAG
from arldiag.trainer.config import make_config
from arldiag.trainer.loop import NullCollector, train

torch.set_num_threads(1)
a, b = torch.randn(256, 128), torch.randn(128, 512)
for _ in range(20):
    a @ b
t0 = time.perf_counter()
for _ in range(400):
    a @ b
matmul_us = (time.perf_counter() - t0) / 400 * 1e6
options = dict(LAG, steps=int(sys.argv[2]), eval_every=0, seed=73, reproducible=pinned, out="unused")
cpu0 = time.process_time()
hist = train(make_config("cispo", **options), collector=NullCollector(), log=lambda s: None)["history"]
cpu = time.process_time() - cpu0
print(json.dumps(dict(step_s=statistics.median(h["step_s"] for h in hist[1:]), cpu_s=cpu / len(hist),
                      matmul_us=matmul_us, capability=torch.backends.cpu.get_cpu_capability())))
"""


def measure(arm: str, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA",
                                                            "ARLDIAG_NUMERICS_REEXEC")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", CHILD, arm, str(steps)], env=env, cwd=root, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="pinned/unpinned pairs (alternating processes)")
    p.add_argument("--steps", type=int, default=12, help="training steps per process")
    p.add_argument("--json", help="also write the figures to this file")
    a = p.parse_args(argv)
    if a.repeat < 1 or a.steps < 2:
        p.error("--repeat must be >= 1 and --steps >= 2")
    runs: dict[str, list[dict]] = {"unpinned": [], "pinned": []}
    for i in range(a.repeat):
        for arm in ("unpinned", "pinned") if i % 2 == 0 else ("pinned", "unpinned"):
            runs[arm].append(measure(arm, a.steps))
            print(f"pair {i + 1} {arm}: {runs[arm][-1]}", flush=True)
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in ("step_s", "cpu_s", "matmul_us")}
           for arm, rs in runs.items()}
    ratios = {k: med["pinned"][k] / med["unpinned"][k] for k in ("step_s", "cpu_s", "matmul_us")}
    pair_ratios = [p_["step_s"] / u["step_s"] for p_, u in zip(runs["pinned"], runs["unpinned"])]
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; unpinned kernels: "
          f"{runs['unpinned'][0]['capability']}, pinned: {runs['pinned'][0]['capability']}")
    for arm in ("unpinned", "pinned"):
        m = med[arm]
        print(f"{arm:9s} s/step {m['step_s']:.3f}  CPU s/step (with setup) {m['cpu_s']:.3f}  matmul {m['matmul_us']:.1f} us")
    print(f"pinned / unpinned: step {ratios['step_s']:.2f}x (per pair {', '.join(f'{r:.2f}' for r in pair_ratios)}), "
          f"CPU {ratios['cpu_s']:.2f}x, matmul {ratios['matmul_us']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(runs=runs, medians=med, ratios=ratios, pair_step_ratios=pair_ratios, steps=a.steps), f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
