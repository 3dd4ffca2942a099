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
import math
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
    from arldiag.label import collapse_step_of, run_decline
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
    columns = {c: df[c].to_numpy(float) for c in numeric}
    collapse = collapse_step_of(steps, columns)
    decline = run_decline(steps, columns)
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
                wall_min=int(wall.group(1)) / 60 if wall else float("nan"),
                # for the comparison tables (summaries/): the warm start, the always-on corrections, the curve
                decline=decline, warm_start=cfg.get("warm_start"), nalis_delta=cfg.get("nalis_delta"),
                # pinned numerics (`--reproducible`, run.json config.numerics): the row retrains bit for bit on a machine with the same fingerprint
                pinned=bool((cfg.get("numerics") or {}).get("pinned")),
                numerics=(cfg.get("numerics") or {}).get("fingerprint"),
                opsm_delta=cfg.get("opsm_delta"), tis_cap=cfg.get("tis_cap"),
                eval_steps=[int(x) for x in ev_steps], eval_success=[round(float(x), 6) for x in ev])


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


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free interval for the median over seeds: the k-th smallest and k-th largest value, k as large as
    keeps P(x_(k) <= median <= x_(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1) at ``level`` or above (k = 1 when even
    the full range falls short). Returns (low, high, that probability)."""
    xs = sorted(values)
    n = len(xs)
    coverage = lambda k: 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2 ** n  # noqa: E731
    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= level:
        k += 1
    return xs[k - 1], xs[n - k], coverage(k) if n else float("nan")


def fmt_median(values: list[float], signed: bool = False) -> str:
    """"median [low, high]" over seeds (median_interval); one seed: the value alone."""
    spec = "+.2f" if signed else ".2f"
    mid = format(float(np.median(values)), spec)
    if len(values) < 2:
        return mid
    lo, hi, _ = median_interval(values)
    return f"{mid} [{format(lo, spec)}, {format(hi, spec)}]"


def interval_note(counts: list[int]) -> str:
    """The generated line under a table with median intervals: which order statistics, with what probability."""
    parts = []
    for n in sorted(set(c for c in counts if c >= 2)):
        lo, hi, cov = median_interval(list(range(n)))
        which = "smallest and largest" if lo == 0 else f"{_ordinal(int(lo) + 1)} smallest and {_ordinal(int(lo) + 1)} largest"
        parts.append(f"{n} seeds: the {which}, {100 * cov:.1f} %")
    return ("Medians over seeds with [an interval]: order statistics that hold the median of the seeds' distribution "
            "with at least 90 % probability where the seeds allow it, whatever that distribution (" + "; ".join(parts)
            + ").") if parts else ""


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def pinned_line(rows: list[dict]) -> str:
    """Rows pinned: how many of a table's rows ran with pinned numerics (`--reproducible`), so a reader knows which
    per-seed rows another machine reproduces bit for bit and which only as a set figure."""
    pinned = [r["name"] for r in rows if r.get("pinned")]
    n = len(rows)
    if not pinned:
        return (f"Rows pinned: none of {n} (trained before pinned numerics, on that machine's own kernels: a chaotic run "
                "can end differently on another machine; read per-seed rows as one draw and the counts and medians "
                "as the result).")
    if len(pinned) == n:
        return (f"Rows pinned: all {n} (`--reproducible`: the same bits on a machine with the same CPU vendor, torch, "
                "transformers, numpy and glibc; elsewhere each row is one draw per seed).")
    return (f"Rows pinned: {len(pinned)} of {n} ({', '.join(pinned)}: the same bits on a machine with the same CPU "
            "vendor, torch, transformers, numpy and glibc); the others ran on their machine's own kernels. Elsewhere "
            "every row is one draw per seed: read the counts and medians.")


def fmt(x, spec=".2f"):
    if x is None:
        return "none"
    if isinstance(x, float) and not np.isfinite(x):
        return "-"
    return format(x, spec)


def tables(rows: list[dict]) -> str:
    out = [pinned_line(rows), "", "| run | split | BC start | peak (step) | final | collapse step | valid format, last 10 | max KL to ref "
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
        groups.setdefault(arm(r), []).append(r)
    for name, rs in groups.items():
        learned = sum(r["peak"] - r["start"] >= LEARN_POINTS for r in rs)
        gains = [r.get("gain150") for r in rs]
        early = sum(g is not None and g >= EARLY_POINTS for g in gains)
        unknown = sum(g is None for g in gains)  # rows kept from a table that did not record it
        early = f"{early} ({unknown} unknown)" if unknown else early
        late = sum(r["collapse"] is not None and r["collapse"] > LATE_COLLAPSE for r in rs)
        anyc = sum(r["collapse"] is not None for r in rs)
        out.append(f"| {name} | {len(rs)} | {learned} | {early} | {late} | {anyc} | {fmt_median([r['peak'] for r in rs])} "
                   f"| {fmt_median([r['final'] for r in rs])} |")
    out += ["", interval_note([len(rs) for rs in groups.values()])]
    pairs = stress_pairs(rows)
    if pairs.count("\n") > 1:
        out += ["", pairs]
    return "\n".join(out)


def arm(r: dict) -> str:
    """The row's arm: its algorithm and what was added to it (the mask, the always-on corrections, the loop)."""
    return (r["algo"] + (" + mask" if r["nalis_mask"] and r["algo"] != "sampo" else "")
            + (f" + opsm {r['opsm_delta']:g}" if r.get("opsm_delta") is not None else "")
            + (f" + tis {r['tis_cap']:g}" if r.get("tis_cap") is not None else "")
            + (f" + auto-stabilize {r['auto']}" if r.get("auto") else ""))


# --- per-run summaries (summaries/SET/NAME.json): the tables of the sets whose run stores are too big to commit -------
SUMMARIES = HERE / "summaries"


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def save_summaries(rows: list[dict], which: str) -> list[Path]:
    """Write one summary per row to summaries/WHICH/NAME.json (a later retraining of NAME replaces its row)."""
    folder = SUMMARIES / which
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for r in rows:
        path = folder / f"{r['name']}.json"
        path.write_text(json.dumps(_plain(r), indent=1, sort_keys=True) + "\n")
        out.append(path)
    return out


def load_summaries(which: str) -> list[dict]:
    rows = []
    for path in sorted((SUMMARIES / which).glob("*.json")):
        r = json.loads(path.read_text())
        for key in ("start", "peak", "final", "valid_end", "kl_max", "nalis_peak", "share_peak", "wall_min"):
            r[key] = float("nan") if r.get(key) is None else float(r[key])
        r["actions"] = [tuple(a) for a in r.get("actions", [])]
        rows.append(r)
    return rows


def _seed_order(rows: list[dict]) -> list[dict]:
    """Seed-major, the arms of a seed in MITIGATION_ARMS order (others after them, by name)."""
    order = {stem: i for i, (stem, _) in enumerate(MITIGATION_ARMS)}
    return sorted(rows, key=lambda r: (r.get("seed") or 0, order.get(_stem(r["name"]), len(order)), r["name"]))


def rows_from_table(markdown: str) -> list[dict]:
    """The per-run rows of a generated table (``tables``' first table) as summaries marked ``legacy``: how rows whose
    run stores are gone enter summaries/ (the +25-within-150 gain is known only when the peak came by step 150)."""
    out = []
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) != 12 or not re.fullmatch(r"\w+_s\d+", cells[0]):
            continue
        num = lambda x: None if x in ("-", "none") else float(x)  # noqa: E731
        name = cells[0]
        peak, peak_step = re.fullmatch(r"([\d.]+) \((\d+)\)", cells[3]).groups()
        start, peak, peak_step = num(cells[2]), float(peak), int(peak_step)
        collapse, lead = num(cells[5]), num(cells[10])
        out.append(dict(
            legacy=True, name=name, algo=name.split("_")[0], seed=int(name.rsplit("_s", 1)[1]), split=cells[1],
            nalis_mask=name.startswith("sampo") or "_nalis_" in name, auto=None, actions=[], steps=200,
            start=start, peak=peak, peak_step=peak_step, final=num(cells[4]),
            collapse=None if collapse is None else int(collapse), valid_end=num(cells[6]), kl_max=num(cells[7]),
            nalis_peak=num(cells[8]), share_peak=num(cells[9]), nalis_lead=None if lead is None else int(lead),
            wall_min=num(cells[11]), gain150=round(peak - start, 6) if peak_step <= EARLY else None,
            decline=None, warm_start=None))
    return out


def set_tables(rows: list[dict]) -> str:
    """The lag set's block: the rows trained from the shipped warm start, then (a separate table, never pooled with
    them) the rows kept from the earlier per-seed warm starts."""
    new = _seed_order([r for r in rows if not r.get("legacy")])
    old = _seed_order([r for r in rows if r.get("legacy")])
    parts = []
    if new:
        prints = sorted({(r.get("warm_start") or {}).get("fingerprint") or "?" for r in new})
        parts += [f"Trained from the shipped warm start ({', '.join(prints)}):", "", tables(new)]
    if old:
        parts += ["", "Trained from the earlier per-seed warm starts (cloned on the machine that trained them; "
                      "their run stores are not kept, so these rows come from the table they were first written "
                      "to and do not retrain exactly; their set figures are recomputed from its two-decimal values, "
                      "so a median can differ by 0.01 and a borderline count by one from those first written, and "
                      "the +25-within-150 count is unknown where the peak came after step 150):", "", tables(old)]
    return "\n".join(parts).strip()


# the mitigations comparison: the arms in this order, named by their run-name stem
MITIGATION_ARMS = (("cispo_lag1", "plain CISPO"), ("cispo_nalis_lag1", "+ low-IS mask (ARLArena), delta 3e-3"),
                   ("cispo_opsm_lag1", "+ off-policy sequence mask (DeepSeek-V3.2), delta 0.03"),
                   ("cispo_tis_lag1", "+ truncated IS, C = 2"), ("cispo_lag1_auto", "+ --auto-stabilize default"),
                   ("sampo_lag1", "SAMPO"))


def _stem(name: str) -> str:
    return re.sub(r"_s\d+$", "", name)


def reach_step(r: dict, level: float) -> int | None:
    """The first evaluated step at which the run's eval success reached ``level`` (None: never)."""
    for step, y in zip(r.get("eval_steps", []), r.get("eval_success", [])):
        if y is not None and y >= level - 1e-6:  # the summaries keep 6 decimals (eval success is k / 128)
            return int(step)
    return None


# the levers set: an entropy bonus that runs away, plain against the closed loop's two policies
LEVER_ARMS = (("grpo_ent10", "plain GRPO, entropy bonus 0.1"), ("grpo_ent10_auto", "+ --auto-stabilize default"),
              ("grpo_ent10_levers", "+ --auto-stabilize levers"))


def mitigation_table(rows: list[dict]) -> str:
    """Per arm, over the held-out seeds trained from the shipped warm start: collapses, declines, median peak and
    final eval success, steps to reach the plain run's peak (same seed), and the loop's actions; then per seed."""
    return arm_table(rows, MITIGATION_ARMS, split="heldout", reading=True)


def arm_table(rows: list[dict], arms: tuple[tuple[str, str], ...], split: str | None = "heldout",
              reading: bool = False) -> str:
    """Per arm (``arms``: run-name stem -> label, the plain arm first), over the seeds of the plain arm (of ``split``;
    None: every seed): collapses, declines, median peak and final eval success, the median final minus the plain
    run's, steps to reach the plain run's peak (same seed), and the loop's actions; then per seed."""
    plain = arms[0][0]
    rows = [r for r in rows if not r.get("legacy") and (split is None or r.get("split") == split)
            and _stem(r["name"]) in dict(arms)]
    by = {(_stem(r["name"]), r["seed"]): r for r in rows}
    plain_seeds = sorted(s for stem, s in by if stem == plain)
    if not plain_seeds:
        return "(no held-out plain run trained from the shipped warm start yet)"
    shown = [by[(stem, s)] for stem, _ in arms for s in plain_seeds if (stem, s) in by]
    out = [pinned_line(shown), "", "| arm | seeds | collapsed | declined | median peak | median final | final - plain's final, median "
           "| steps to reach plain's peak: median (never) | actions of the loop (seed: step action) |",
           "|---|---|---|---|---|---|---|---|---|"]
    counts = []
    for stem, label in arms:
        rs = [by[(stem, s)] for s in plain_seeds if (stem, s) in by]
        if not rs:
            continue
        counts.append(len(rs))
        reach = [reach_step(r, by[(plain, r["seed"])]["peak"]) for r in rs]
        got = [x for x in reach if x is not None]
        diff = [r["final"] - by[(plain, r["seed"])]["final"] for r in rs]
        acts = "; ".join(f"{r['seed']}: " + ", ".join(f"{s} {a}" for s, a in r["actions"]) for r in rs if r["actions"])
        out.append(f"| {label} | {len(rs)} | {sum(r['collapse'] is not None for r in rs)} "
                   f"| {sum(r.get('decline') is not None for r in rs)} | {fmt_median([r['peak'] for r in rs])} "
                   f"| {fmt_median([r['final'] for r in rs])} | {fmt_median(diff, signed=True)} "
                   f"| {fmt(float(np.median(got)), '.0f') if got else '-'} ({len(reach) - len(got)}) "
                   f"| {acts or ('none' if rs[0].get('auto') else '')} |")
    out += ["", interval_note(counts)]
    words = _reading(by, plain_seeds) if reading else []
    stems = [stem for stem, _ in arms if any((stem, s) in by for s in plain_seeds)]
    out += ["", "| seed | " + " | ".join(dict(arms)[s] for s in stems) + " |",
            "|---|" + "---|" * len(stems)]
    for seed in plain_seeds:
        cells = []
        for stem in stems:
            r = by.get((stem, seed))
            cells.append("-" if r is None else f"{fmt(r['peak'])} / {fmt(r['final'])}"
                         + (f" (collapse {r['collapse']})" if r["collapse"] is not None else "")
                         + (f" (decline {r['decline']})" if r.get("decline") is not None else ""))
        out.append(f"| {seed} | " + " | ".join(cells) + " |")
    return "\n".join(out + ([""] + words if words else []))


ALWAYS_ON_STEMS = ("cispo_nalis_lag1", "cispo_opsm_lag1", "cispo_tis_lag1")


def _reading(by: dict, seeds: list[int]) -> list[str]:
    """The comparison in words, generated with the table: each always-on arm against the closed loop on the seeds
    both have (median final, and on how many seeds the loop ends lower)."""
    loop = {s: by[("cispo_lag1_auto", s)]["final"] for s in seeds if ("cispo_lag1_auto", s) in by}
    if not loop:
        return []
    out = []
    for stem in ALWAYS_ON_STEMS:
        both = [s for s in loop if (stem, s) in by]
        if not both:
            continue
        arm_final = [by[(stem, s)]["final"] for s in both]
        lower = sum(loop[s] < by[(stem, s)]["final"] for s in both)
        out.append(f"- {dict(MITIGATION_ARMS)[stem]}: median final {fmt(float(np.median(arm_final)))} against the "
                   f"loop's {fmt(float(np.median([loop[s] for s in both])))} on the same {len(both)} seed(s); the "
                   f"loop ends lower on {lower} of them.")
    return out


def write_block(text: str, block: str) -> str:
    """Replace the generated block ``<!-- BLOCK:start -->...<!-- BLOCK:end -->`` of sample_runs/README.md (appended
    when absent)."""
    START, END = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    readme = HERE / "README.md"
    body = readme.read_text()
    new = f"{START}\n{text}\n{END}"
    if START in body and END in body:
        body = body[:body.index(START)] + new + body[body.index(END) + len(END):]
    else:
        body = body.rstrip() + "\n\n" + new + "\n"
    readme.write_text(body)
    return text


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
    return write_block(tables([summarize(d) for d in (dirs or suite_runs())]), block)


def main(argv: list[str]) -> None:
    write = "--write" in argv
    block = next((a.split("=", 1)[1] for a in argv if a.startswith("--block=")), "suite-table")
    dirs = [Path(a) for a in argv if not a.startswith("--")] or suite_runs()
    print(write_table(dirs, block) if write else tables([summarize(d) for d in dirs]))


if __name__ == "__main__":
    main(sys.argv[1:])
