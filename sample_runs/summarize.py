"""Print the sample-run table of README.md from the run stores (python sample_runs/summarize.py [RUN ...]).

Success and valid-format ratio are per-step means over 16 training episodes (temperature 1), so they are noisy;
the table uses 10-step moving averages (MA10): peak = max MA10 of success, final = mean of the last 10 steps.
Collapse step = first step from which the valid-format ratio stays below 0.5 for 5 steps (none if it never does).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def ma(x: np.ndarray, k: int = 10) -> np.ndarray:
    return np.array([np.nanmean(x[max(0, i - k + 1):i + 1]) for i in range(len(x))])


def summarize(run_dir: Path) -> dict:
    import arldiag

    run = arldiag.open_run(str(run_dir))
    try:
        df = run.df("select * from steps order by step")
    finally:
        run.close()
    succ, valid = df["success_rate"].to_numpy(float), df["valid_format_ratio"].to_numpy(float)
    s_ma, v_ma = ma(succ), ma(valid)
    full = slice(9 if len(succ) >= 10 else 0, None)  # only complete 10-step windows
    # collapse: the first step whose valid-format ratio and that of the next 4 steps are all below 0.5
    below = [i for i in range(len(valid) - 4) if np.all(valid[i:i + 5] < 0.5)]
    log = run_dir.with_suffix(".log")
    wall = re.search(r"done: \d+ steps in (\d+)s", log.read_text()) if log.exists() else None
    col = lambda name: df[name].to_numpy(float) if name in df else np.full(len(df), np.nan)  # noqa: E731
    return dict(name=run_dir.name, steps=len(df), wall_min=(int(wall.group(1)) / 60 if wall else float("nan")),
                first=float(np.mean(succ[:10])), peak=float(np.nanmax(s_ma[full])), peak_step=int(np.nanargmax(s_ma[full])) + full.start,
                final=float(np.mean(succ[-10:])), valid_final=float(np.mean(valid[-10:])),
                valid_min=float(np.nanmin(v_ma[full])), collapse=(int(below[0]) if below else None),
                kl_max=float(np.nanmax(col("kl_ref_k3"))), grad_max=float(np.nanmax(col("grad_norm_max"))),
                nalis=float(np.nanmean(col("nalis_masked_frac"))), size_mb=sum(f.stat().st_size for f in
                                                                                run_dir.rglob("*") if f.is_file()) / 1e6)


def main(argv: list[str]) -> None:
    dirs = [Path(a) for a in argv] or sorted(p for p in HERE.iterdir() if (p / "run.json").exists())
    print("| run | steps | wall (min) | success first 10 | peak success (MA10, step) | final success (last 10) "
          "| valid-format final / min MA10 | collapse step | max KL to ref (k3) | max grad norm | NALIS masked | size MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        try:
            s = summarize(d)
        except (KeyError, ValueError):  # no step rows yet
            continue
        print(f"| {s['name']} | {s['steps']} | {s['wall_min']:.1f} | {s['first']:.2f} | {s['peak']:.2f} ({s['peak_step']}) "
              f"| {s['final']:.2f} | {s['valid_final']:.2f} / {s['valid_min']:.2f} | {s['collapse'] if s['collapse'] is not None else 'none'} "
              f"| {s['kl_max']:.3f} | {s['grad_max']:.2f} | {100 * s['nalis']:.1f} % | {s['size_mb']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
