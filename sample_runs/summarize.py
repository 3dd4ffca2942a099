"""The sample-run tables of sample_runs/README.md, generated from the run stores (never typed by hand).

    python sample_runs/summarize.py            # print the tables of every run under sample_runs/
    python sample_runs/summarize.py --write    # and replace them in sample_runs/README.md (between the markers)
    python sample_runs/summarize.py DIR... --write --block=stress-table   # another generated block

Per run: the behaviour-cloned start, peak and final eval success (the fixed evaluation set, greedy), the collapse
step (arldiag's collapse label, docs/detectors.md), the valid-format ratio at the end, the largest KL to the reference,
the peak negative-advantage low-IS fraction and its KL share (steps view), and how many steps before the collapse
that fraction was first non-zero after the peak. Per algorithm, over seeds: how many runs learned (peak eval success
at least 0.15 above the start) and how many collapsed after step 40.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LEARN_POINTS = 0.15  # "learns": peak eval success at least this far above the step-0 evaluation
LATE_COLLAPSE = 40  # the phenomenon: a collapse after this step (learn first, then collapse)
EARLY, EARLY_POINTS = 150, 0.25  # the issue's learning check: +25 points of eval success within 150 steps


def summarize(run_dir: Path) -> dict:
    import arldiag
    from arldiag.detectors.label import collapse_step_of
    from arldiag.report.data import actions_frame

    run = arldiag.open_run(str(run_dir))
    try:
        df = run.df("select * from steps order by step")
        acts = actions_frame(run, run.names[0], limit=10_000)  # the store reader's view of the actions table
    finally:
        run.close()
    meta = json.loads((run_dir / "run.json").read_text())
    cfg = meta.get("config", {})
    col = lambda name: df[name].to_numpy(float) if name in df else np.full(len(df), np.nan)  # noqa: E731
    steps = df["step"].to_numpy(int)
    numeric = [c for c in df.columns if c != "step" and df[c].dtype.kind in "fiub"]
    collapse = collapse_step_of(steps, {c: df[c].to_numpy(float) for c in numeric})
    ev = col("eval_success")
    ev_steps = steps[np.isfinite(ev)]
    ev = ev[np.isfinite(ev)]
    nalis, share = col("neg_adv_low_is_frac"), col("neg_adv_low_is_kl_share")
    lead = None
    if collapse is not None and ev.size:
        peak_step = int(ev_steps[int(np.argmax(ev))])
        window = (steps >= min(peak_step, collapse)) & (steps < collapse) & (np.nan_to_num(nalis) > 0)
        lead = int(collapse - steps[window][0]) if window.any() else 0
    valid = col("valid_format_ratio")
    log = run_dir.with_suffix(".log")
    wall = re.search(r"done: \d+ steps in (\d+)s", log.read_text()) if log.exists() else None
    return dict(actions=[] if acts is None else list(zip(acts["step"].astype(int), acts["action"])),
                auto=cfg.get("auto_stabilize"), name=run_dir.name, algo=meta.get("algorithm", cfg.get("algo", "?")),
                seed=cfg.get("seed"),
                split=cfg.get("split", "?"), nalis_mask=bool(cfg.get("nalis_mask")), steps=len(df),
                start=float(ev[0]) if ev.size else float("nan"), peak=float(ev.max()) if ev.size else float("nan"),
                peak_step=int(ev_steps[int(np.argmax(ev))]) if ev.size else None,
                final=float(ev[-1]) if ev.size else float("nan"), collapse=collapse,
                gain150=float(ev[ev_steps <= EARLY].max() - ev[0]) if ev.size else float("nan"),
                valid_end=float(np.nanmean(valid[-10:])), kl_max=float(np.nanmax(col("kl_ref_k3"))),
                nalis_peak=float(np.nanmax(nalis)) if np.isfinite(nalis).any() else float("nan"),
                share_peak=float(np.nanmax(share)) if np.isfinite(share).any() else float("nan"), nalis_lead=lead,
                wall_min=int(wall.group(1)) / 60 if wall else float("nan"))


def stress_pairs(rows: list[dict]) -> str:
    """Per seed: the run without and with --auto-stabilize (``NAME_sK`` and ``NAME_auto_sK``), side by side: peak,
    final and collapse step of each, the final eval success of the stabilised run minus that of the same seed
    without it, and the actions taken."""
    by = {r["name"]: r for r in rows}
    out = ["| seed (split) | without: peak / final / collapse | with: peak / final / collapse | final, with - without "
           "| actions (step: action) |", "|---|---|---|---|---|"]
    for name, plain in by.items():
        m = re.fullmatch(r"(.+)_s(\d+)", name)
        auto = by.get(f"{m.group(1)}_auto_s{m.group(2)}") if m and not m.group(1).endswith("_auto") else None
        if auto is None:
            continue
        acts = "; ".join(f"{s}: {a}" for s, a in auto["actions"]) or "none"
        out.append(f"| {plain['seed']} ({plain['split']}) | {fmt(plain['peak'])} / {fmt(plain['final'])} / "
                   f"{fmt(plain['collapse'], 'd')} | {fmt(auto['peak'])} / {fmt(auto['final'])} / "
                   f"{fmt(auto['collapse'], 'd')} | {auto['final'] - plain['final']:+.2f} | {acts} |")
    return "\n".join(out)


def fmt(x, spec=".2f"):
    if x is None:
        return "none"
    if isinstance(x, float) and not np.isfinite(x):
        return "-"
    return format(x, spec)


def tables(rows: list[dict]) -> str:
    out = ["| run | split | BC start | peak (step) | final | collapse step | valid format, last 10 | max KL to ref "
           "| peak neg-adv low-IS frac | its peak KL share | frac > 0 this many steps before collapse | wall (min) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['split']} | {fmt(r['start'])} | {fmt(r['peak'])} ({fmt(r['peak_step'], 'd')}) "
                   f"| {fmt(r['final'])} | {fmt(r['collapse'], 'd')} | {fmt(r['valid_end'])} | {fmt(r['kl_max'], '.3f')} "
                   f"| {fmt(r['nalis_peak'], '.4f')} | {fmt(r['share_peak'], '.3f')} | {fmt(r['nalis_lead'], 'd')} "
                   f"| {fmt(r['wall_min'], '.1f')} |")
    out += ["", "| algorithm | runs | learned (+15 points) | +25 points within 150 steps | collapsed after step 40 "
                "| collapsed at all | median peak | median final |", "|---|---|---|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["algo"] + (" + mask" if r["nalis_mask"] and r["algo"] != "sampo" else "")
                          + (f" + auto-stabilize {r['auto']}" if r.get("auto") else ""), []).append(r)
    for name, rs in groups.items():
        learned = sum(r["peak"] - r["start"] >= LEARN_POINTS for r in rs)
        early = sum(r.get("gain150", float("nan")) >= EARLY_POINTS for r in rs)
        late = sum(r["collapse"] is not None and r["collapse"] > LATE_COLLAPSE for r in rs)
        anyc = sum(r["collapse"] is not None for r in rs)
        out.append(f"| {name} | {len(rs)} | {learned} | {early} | {late} | {anyc} | {fmt(float(np.median([r['peak'] for r in rs])))} "
                   f"| {fmt(float(np.median([r['final'] for r in rs])))} |")
    pairs = stress_pairs(rows)
    if pairs.count("\n") > 1:
        out += ["", pairs]
    return "\n".join(out)


def suite_runs() -> list[Path]:
    """The runs of the seeded suite: those whose run.json carries a split (written by the v2 trainer)."""
    out = []
    for p in sorted(HERE.iterdir()):
        if (p / "run.json").exists() and "split" in json.loads((p / "run.json").read_text()).get("config", {}):
            out.append(p)
    return out


def write_table(dirs: list[Path] | None = None, block: str = "suite-table") -> str:
    """Replace the generated block ``<!-- BLOCK:start -->...<!-- BLOCK:end -->`` of sample_runs/README.md (appended
    when absent); returns the block's text."""
    START, END = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    text = tables([summarize(d) for d in (dirs or suite_runs())])
    readme = HERE / "README.md"
    body = readme.read_text()
    block = f"{START}\n{text}\n{END}"
    if START in body and END in body:
        body = body[:body.index(START)] + block + body[body.index(END) + len(END):]
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    readme.write_text(body)
    return text


def main(argv: list[str]) -> None:
    write = "--write" in argv
    block = next((a.split("=", 1)[1] for a in argv if a.startswith("--block=")), "suite-table")
    dirs = [Path(a) for a in argv if not a.startswith("--")] or suite_runs()
    print(write_table(dirs, block) if write else tables([summarize(d) for d in dirs]))


if __name__ == "__main__":
    main(sys.argv[1:])
