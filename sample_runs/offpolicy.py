"""Which off-policy source makes the negative-advantage low-IS set build up across steps?

    python sample_runs/offpolicy.py [--steps 40] [--jobs 2] [--out /tmp/arldiag-offpolicy]

Trains the tolerant loss (CISPO, no mask) under the suite's setting with one off-policy source changed at a time
(none; a rollout lag of 2 steps with the sampler's log-probs as logp_old; 4 PPO epochs; 16 mini-batches), then
reads each run's steps view and prints, per 10-step window, the mean negative-advantage low-IS fraction at the
documented delta (sequence ratio below the reference band 0.8 = exp(-0.223), ``neg_adv_low_is_frac``) and at a
smaller one (``neg_adv_low_is_delta_frac`` with delta 3e-3, ARLArena's scripts), and the KL share of the first set. The table is
printed as Markdown for sample_runs/README.md.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suite import SETTING, train_args  # noqa: E402

SOURCES: dict[str, dict] = {
    "on-policy sampler (lag 0)": {},
    "rollout lag 2, logp_old from the sampler": {"rollout_lag": 2, "logp_old_source": "sampler"},
    "rollout lag 2, logp_old recomputed": {"rollout_lag": 2, "logp_old_source": "recompute"},
    "4 PPO epochs": {"ppo_epochs": 4},
    "16 mini-batches": {"n_minibatches": 16},
}


def run(out: Path, label: str, steps: int) -> Path:
    name = "op_" + "".join(c if c.isalnum() else "_" for c in label)[:40]
    # the mask is off, so nalis_delta only sets the delta of the Collector's second set (neg_adv_low_is_delta_*)
    options = {**SETTING, **SOURCES[label], "steps": steps, "eval_every": 0, "token_sample_rate": 0.0,
               "nalis_delta": 3e-3}
    args = train_args(name, "cispo", options)
    args[args.index("--out") + 1] = str(out / name)
    with open(out / f"{name}.log", "w") as log:
        subprocess.check_call(args, stdout=log, stderr=subprocess.STDOUT)
    return out / name


def windows(run_dir: Path, width: int = 10) -> list[tuple[float, float, float]]:
    import arldiag

    r = arldiag.open_run(str(run_dir))
    try:
        df = r.df("select step, neg_adv_low_is_frac, neg_adv_low_is_delta_frac, neg_adv_low_is_kl_share "
                  "from steps order by step")
    finally:
        r.close()
    out = []
    for s in range(0, len(df), width):
        w = df.iloc[s:s + width]
        out.append(tuple(float(np.nanmean(w[c])) for c in ("neg_adv_low_is_frac", "neg_adv_low_is_delta_frac",
                                                           "neg_adv_low_is_kl_share")))
    return out


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="/tmp/arldiag-offpolicy")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        dirs = dict(zip(SOURCES, pool.map(lambda label: run(out, label, a.steps), SOURCES)))
    n_win = (a.steps + 9) // 10
    head = " | ".join(f"steps {10 * i}-{10 * i + 9}" for i in range(n_win))
    print(f"| source (CISPO, suite setting) | {head} |")
    print("|---|" + "---|" * n_win)
    for label, d in dirs.items():
        cells = [f"{f:.4f} / {fd:.4f} / {sh:.3f}" for f, fd, sh in windows(d)]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("\ncells: neg-adv low-IS fraction at the reference band / at delta 3e-3 / KL share of the set")


if __name__ == "__main__":
    main(sys.argv[1:])
