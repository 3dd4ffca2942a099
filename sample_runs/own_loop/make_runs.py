"""Generate own_loop's evaluation set: 14 stable runs and 4 unhealthy ones, plus labels.json for eval-detect.

    python sample_runs/own_loop/make_runs.py [--out /work/own_loop_runs] [--jobs 2] [--steps 200]
    arldiag eval-detect /work/own_loop_runs --labels /work/own_loop_runs/labels.json
    arldiag ls /work/own_loop_runs

Stable runs (``--set main``): the healthy config over seeds 0-9, and two mild variants over two seeds each (a
lower learning rate; a stronger KL penalty). Unhealthy runs: one per failure knob of own_loop.py, each on a seed of
its own. ``--set noisy``: the same 14 + 4 design at a quarter of the batch (other seeds), into its own folder. Every run is
one ``own_loop.py`` process (one torch thread, niced). labels.json is written from the runs themselves: a stable run
gets ``collapse_step: null``; an unhealthy run gets the step at which arldiag's collapse label (``arldiag ls``,
arldiag/label.py) places its collapse, and make_runs says so loudly when a run meant to break did not (or a stable
one did), instead of writing a label the run does not bear out. Existing run folders are kept (``--force``
retrains them).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import arldiag

HERE = Path(__file__).resolve().parent

# name -> (kind, own_loop.py flags); kind "stable" or the failure knob
MAIN: dict[str, tuple[str, list[str]]] = {
    **{f"healthy_s{s}": ("stable", ["--seed", str(s)]) for s in range(10)},
    **{f"healthy_lr2e-3_s{s}": ("stable", ["--seed", str(s), "--lr", "2e-3"]) for s in (10, 11)},
    **{f"healthy_kl0.05_s{s}": ("stable", ["--seed", str(s), "--kl-coef", "0.05"]) for s in (12, 13)},
    "lr_spike_s100": ("lr_spike", ["--seed", "100", "--failure", "lr_spike"]),
    "stale_noclip_s101": ("stale_noclip", ["--seed", "101", "--failure", "stale_noclip"]),
    "entropy_bonus_s102": ("entropy_bonus", ["--seed", "102", "--failure", "entropy_bonus"]),
    "format_exploit_s103": ("format_exploit", ["--seed", "103", "--failure", "format_exploit"]),
}
# the same design at a quarter of the batch (4 hidden numbers x 8 episodes, 2 mini-batches): the batch success
# swings about +-0.08 from step to step instead of +-0.04, as in loops that train on few prompts per step
SMALL = ["--n-tasks", "4", "--group-size", "8", "--n-minibatches", "2"]
NOISY: dict[str, tuple[str, list[str]]] = {
    **{f"noisy_s{s}": ("stable", ["--seed", str(s), *SMALL]) for s in range(20, 34)},
    **{f"noisy_{k}_s{s}": (k, ["--seed", str(s), "--failure", k, *SMALL])
       for s, k in zip(range(120, 124), ("lr_spike", "stale_noclip", "entropy_bonus", "format_exploit"))},
}
SETS = {"main": MAIN, "noisy": NOISY}


def train_one(name: str, flags: list[str], out: Path, steps: int, force: bool) -> dict:
    """Train one run into out/name (its stdout in out/name.log); skip a finished run unless ``force``."""
    run = out / name
    done = run / "run.json"
    if done.is_file() and json.loads(done.read_text()).get("status") == "finished" and not force:
        return {"run": name, "wall_s": None, "skipped": True}
    if run.exists():
        shutil.rmtree(run)
    cmd = ["nice", "-n", "10", sys.executable, str(HERE / "own_loop.py"), *flags, "--steps", str(steps),
           "--out", str(run)]
    t0 = time.time()
    with open(out / f"{name}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"{name}: own_loop.py exited with {rc}; see {out / (name + '.log')}")
    return {"run": name, "wall_s": round(time.time() - t0, 1), "skipped": False}


def collapse_labels(out: Path) -> dict[str, dict]:
    """arldiag's own collapse label of every run under ``out`` ({run: row of `arldiag ls --json`})."""
    res = subprocess.run([sys.executable, "-m", "arldiag.cli", "ls", str(out), "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"arldiag ls {out} failed: {res.stderr.strip()}")
    rows = json.loads(res.stdout)
    rows = rows.get("runs", rows) if isinstance(rows, dict) else rows
    return {r["name"]: r for r in rows}


def write_labels(out: Path, runs: dict[str, tuple[str, list[str]]]) -> dict:
    """labels.json in eval-detect's format, from the runs' own collapse labels; prints every disagreement."""
    ls = collapse_labels(out)
    labels = {}
    for name, (kind, _) in runs.items():
        row = ls.get(name)
        if row is None:
            print(f"make_runs: warning: {name} is missing from arldiag ls {out}", file=sys.stderr)
            continue
        collapse = row.get("collapse_step")
        if kind == "stable" and collapse is not None:
            print(f"make_runs: warning: stable run {name} collapsed at {collapse} by arldiag's label", file=sys.stderr)
        if kind != "stable" and collapse is None:
            print(f"make_runs: warning: unhealthy run {name} did not collapse by arldiag's label", file=sys.stderr)
        labels[name] = {"collapse_step": None if kind == "stable" else collapse, "ambiguous": False,
                        "kind": kind, "log_interval_steps": 1, "framework": "own_loop.py (sample_runs/own_loop)"}
    (out / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    return labels


def trainer_wall_s(out: Path, name: str) -> float | None:
    """The training time own_loop.py printed on its last line (out/name.log), or None."""
    log = out / f"{name}.log"
    lines = log.read_text().strip().splitlines() if log.is_file() else []
    try:
        return float(json.loads(lines[-1])["wall_s"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def outcome_summary(run: Path) -> dict[str, float]:
    """Batch success and episode format validity of a run: the peak of their 10-step trailing mean (from step 2,
    as the collapse label takes it) and their mean over the last 10 steps."""
    d = arldiag.open_run(run).sql("select success_rate, format_valid_frac from steps order by step").df()
    out = {}
    for col, key in (("success_rate", "success"), ("format_valid_frac", "format")):
        m = d[col].rolling(10, min_periods=1).mean().to_numpy()
        out[f"{key}_peak"] = float(np.max(m[2:])) if m.size > 2 else float("nan")
        out[f"{key}_last"] = float(d[col].to_numpy()[-10:].mean())
    return out


def table(out: Path, runs: dict[str, tuple[str, list[str]]]) -> str:
    """Markdown table of the runs under ``out``: kind, flags, success and format (peak of the 10-step mean, mean of
    the last 10 steps), collapse step by arldiag's label, the first warning of `arldiag ls`, steps, training time."""
    ls = collapse_labels(out)
    lines = ["| run | kind | flags | success peak | success last 10 | format peak | format last 10 | collapse (label) "
             "| first warning | steps | train s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))  # noqa: E731
    for name, (kind, flags) in runs.items():
        r = ls.get(name)
        if r is None:
            continue
        o = outcome_summary(out / name)
        lines.append(f"| {name} | {kind} | `{' '.join(flags)}` | {f(o['success_peak'])} | {f(o['success_last'])} | "
                     f"{f(o['format_peak'])} | {f(o['format_last'])} | {f(r['collapse_step'])} | "
                     f"{f(r['first_warning'])} | {r['steps']} | {f(trainer_wall_s(out, name))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="/work/own_loop_runs", help="folder of the run stores and labels.json")
    p.add_argument("--jobs", type=int, default=2, help="runs trained at once (each uses one thread)")
    p.add_argument("--steps", type=int, default=200, help="steps per run")
    p.add_argument("--only", nargs="*", help="train only these run names (labels.json still covers all)")
    p.add_argument("--force", action="store_true", help="retrain runs that already finished")
    p.add_argument("--table", action="store_true", help="train nothing: print the runs' Markdown table")
    p.add_argument("--set", choices=sorted(SETS), default="main",
                   help="main: 128 episodes a step (the evaluation set); noisy: 32 episodes a step")
    args = p.parse_args(argv)
    runs = SETS[args.set]
    out = Path(args.out)
    if args.table:
        print(table(out, runs))
        return
    out.mkdir(parents=True, exist_ok=True)
    todo = {k: v for k, v in runs.items() if not args.only or k in args.only}
    unknown = set(args.only or ()) - set(runs)
    if unknown:
        p.error(f"--only: unknown run(s) {sorted(unknown)}; known: {', '.join(runs)}")
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futs = [pool.submit(train_one, name, flags, out, args.steps, args.force) for name, (_, flags) in todo.items()]
        for f in futs:
            r = f.result()
            print(f"{r['run']:<24} {'kept' if r['skipped'] else str(r['wall_s']) + ' s'}", flush=True)
    labels = write_labels(out, runs)
    print(f"wrote {out / 'labels.json'} ({len(labels)} runs)")


if __name__ == "__main__":
    main()
