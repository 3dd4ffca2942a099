"""arldiag, rlwatch 0.5.1, rldoctor 0.2.0 and rlprobe 0.1.0 side by side, each with its defaults, on the same runs and the same
scoring (evaluation.scoring.score_run, through eval-detect's score_evaluation): the real development runs
(shared/real_runs, scored on its labels.json) and the reference trainer's sample runs (arldiag's own label).

    pip install rlwatch==0.5.1 rldoctor==0.2.0 rlprobe==0.1.0      (or: pip install -e '.[peer]')
    python benchmarks/peers_real.py [--real ../shared/real_runs] [--toy sample_runs] [--hold 10] [--json] [--write]

``--write`` rewrites the section between ``<!-- peers-real:start -->`` and ``<!-- peers-real:end -->`` in
docs/detectors.md (inserted before ``## Catalog`` the first time) and writes benchmarks/results/peers_real.json.

How each tool is run
* arldiag, as a user runs it: ``arldiag import csv FILE --out DIR``, then ``detectors.batch.evaluate_run`` (the
  alert state of ``arldiag eval-detect --labels``); on the sample runs, ``evaluate_run`` over the run store.
* rlwatch: ``peer_rlwatch.rlwatch_timeline`` (``DetectorSuite`` + ``AlertManager`` from ``RLWatchConfig()``).
* rldoctor: ``rl_doctor.live.LiveMonitor(check_every=1)``, every other argument default (60-record warm-up,
  ``alert_at=WARNING``; ``on_finding`` is a no-op instead of its logging handler, which changes no finding).
  ``log()`` returns the findings that are new or got worse; those are its alerts.
* rlprobe: what its live watcher (``rlprobe.doctor.live.RunWatcher``) does at each tick, without the Parquet round
  trip: each logged step becomes a ``StepRecord``; from the 30th record on (``min_steps=30``, its default) its
  whole detector catalog runs over the records so far (``diagnose_view`` on a ``RunView``, default thresholds), and
  a finding whose (signature, severity) was not reported before is an alert. Its ``warn`` and ``critical`` findings
  are alerts (warning / critical); ``info`` findings (a throughput note) are not warnings.

Mapping. A real log's columns get arldiag's names from arldiag's alias table (``aliases.alias_table`` /
``resolve_name``, sorted names, first wins, a name already logged under the arldiag name is kept; ``task_score``
/ ``val_score`` by ``task_score_source`` / ``val_score_source``); the sample runs carry those names already. Each
peer then gets (peer argument <- arldiag name; real-log names as logged by TRL / verl):

    rlwatch | rldoctor         <- arldiag name (a | b: the first present)   real logs: TRL name / verl name
    entropy | entropy          <- entropy                                    entropy / actor/entropy
    kl_divergence | kl         <- kl_ref_k3                                  not logged (verl actor/kl_loss: no alias)
    reward_mean | reward_mean  <- reward_mean                                reward / critic/rewards/mean
    reward_std | reward_std    <- reward_std                                 reward_std / -
    advantage_std | same       <- adv_std                                    - / -
    loss | policy_loss         <- loss (its own name)                        loss / -
    grad_norm | grad_norm      <- grad_norm                                  grad_norm / actor/grad_norm
    - | eval_score             <- val_score | eval_success                   - / val-core/openai/gsm8k/*/mean@1
    - | zero_var_group_frac    <- zero_std_group_frac                        frac_reward_zero_std / -
    - | pg_clipfrac            <- pg_clipfrac | clip_ratio_region_mean       clip_ratio/region_mean / actor/pg_clipfrac
    - | pg_clipfrac_low        <- pg_clipfrac_lower | clip_ratio_low_mean    clip_ratio/low_mean / ..._lower
    - | pg_clipfrac_high       <- clip_ratio_high_mean                       clip_ratio/high_mean / -
    - | response_len_mean, _max <- response_length_mean, _max                completions/mean_length / ..length/mean
    - | response_len_clip_ratio <- truncated_frac                            completions/clipped_ratio / ..clip_ratio
    - | lr                     <- lr                                         learning_rate / actor/lr
    - | reward components      <- TRL rewards/<fn>/mean, under its own name

rlprobe ``StepRecord`` fields (``RLPROBE_MAPPING``): reward_mean, reward_std, kl_mean <- kl_ref_k3, entropy_mean <-
entropy, clip_fraction <- pg_clipfrac | clip_ratio_region_mean, adv_std, zero_variance_group_frac <-
zero_std_group_frac, loss, lr, grad_norm, completion_len_mean / _max <- response_length_mean / _max,
truncation_rate <- truncated_frac, value_loss <- verl's critic/vf_loss (as logged), step_time_s <- verl's
timing_s/step (as logged); TRL rewards/<fn>/mean as reward_components.

The sample runs carry eval_success, the real verl logs a validation score. The generated section in
docs/detectors.md lists the names each input was found under in the real logs.

A missing or non-finite cell is not passed (rlwatch: None; rldoctor: the key is left out of that step's dict,
since rldoctor reads a logged NaN as numerical failure). rlwatch's ``rewards`` array is not in any log.

State. A peer raises events, not a state: an alert puts the run in its severity (warning / critical) for
``--hold`` optimizer steps from its step, a later alert extends it (peer_rlwatch's rule, 10 steps by default). The
same rule serves rldoctor: LiveMonitor announces each detector once (again only when it gets worse), the
analogue of rlwatch's cooldown; its standing diagnosis (``monitor.latest``) is not pushed to the user.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arldiag.evaluation.peer_rlwatch import MAPPING as RLWATCH_MAPPING, _value, rlwatch_timeline  # noqa: E402

TOOLS = ("arldiag", "rlwatch", "rldoctor", "rlprobe")
TITLES = {"arldiag": "arldiag", "rlwatch": "rlwatch 0.5.1", "rldoctor": "rldoctor 0.2.0", "rlprobe": "rlprobe 0.1.0"}
HOLD = 10
RLDOCTOR_WARMUP = 60  # rl_doctor.live.DEFAULT_MIN_STEPS: LiveMonitor checks nothing before this many records
RLPROBE_MIN_STEPS = 30  # rlprobe.doctor.live.RunWatcher(min_steps=30): no diagnosis before this many records
START, END = "<!-- peers-real:start -->", "<!-- peers-real:end -->"
DOC = ROOT / "docs" / "detectors.md"
RESULTS = ROOT / "benchmarks" / "results" / "peers_real.json"
REAL_DEFAULT = ROOT.parent / "shared" / "real_runs"
# rldoctor canonical field <- arldiag step metric(s), the first present wins
RLDOCTOR_MAPPING = {
    "entropy": ("entropy",), "kl": ("kl_ref_k3",), "reward_mean": ("reward_mean",), "reward_std": ("reward_std",),
    "advantage_std": ("adv_std",), "policy_loss": ("loss",), "grad_norm": ("grad_norm",),
    "eval_score": ("val_score", "eval_success"), "zero_var_group_frac": ("zero_std_group_frac",),
    "pg_clipfrac": ("pg_clipfrac", "clip_ratio_region_mean"),
    "pg_clipfrac_low": ("pg_clipfrac_lower", "clip_ratio_low_mean"), "pg_clipfrac_high": ("clip_ratio_high_mean",),
    "response_len_mean": ("response_length_mean",), "response_len_max": ("response_length_max",),
    "response_len_clip_ratio": ("truncated_frac",), "lr": ("lr",),
}
# rlprobe StepRecord field <- arldiag step metric(s) or, where arldiag has no name for it, the name verl logs
RLPROBE_MAPPING = {
    "reward_mean": ("reward_mean",), "reward_std": ("reward_std",), "kl_mean": ("kl_ref_k3",),
    "entropy_mean": ("entropy",), "clip_fraction": ("pg_clipfrac", "clip_ratio_region_mean"), "adv_std": ("adv_std",),
    "zero_variance_group_frac": ("zero_std_group_frac",), "loss": ("loss",), "lr": ("lr",),
    "grad_norm": ("grad_norm",), "completion_len_mean": ("response_length_mean",),
    "completion_len_max": ("response_length_max",), "truncation_rate": ("truncated_frac",),
    "value_loss": ("critic/vf_loss",), "step_time_s": ("timing_s/step",),
}
RLPROBE_SEVERITY = {"warn": "warning", "critical": "critical"}  # info findings are not warnings
USED = dict.fromkeys([*RLWATCH_MAPPING.values(), *(c for cs in RLDOCTOR_MAPPING.values() for c in cs),
                      *(c for cs in RLPROBE_MAPPING.values() for c in cs if "/" not in c)])
COMPONENT = re.compile(r"^rewards/[^/]+/mean$")  # TRL per-function rewards: rldoctor's reward components


def arldiag_columns(names) -> dict[str, str]:
    """{arldiag name: logged name} of a log's columns by arldiag's alias table (as aliases.LiveResolver)."""
    from arldiag.aliases import (TASK_SCORE, VAL_SCORE, alias_table, resolve_name, task_score_source,
                                 val_score_source)

    names, table = list(names), alias_table()
    out, taken = {}, set(names)
    for k in sorted(names):
        to = resolve_name(k, table)
        if to is not None and to != k and to not in taken:
            out[to] = k
            taken.add(to)
    for src, to in ((task_score_source(names), TASK_SCORE), (val_score_source(names), VAL_SCORE)):
        if src is not None and src != to and to not in taken:
            out[to] = src
    return out


def peer_frame(csv_path: Path):
    """The log with copies of its columns under arldiag's names: (frame, {arldiag name: logged name})."""
    import pandas as pd

    df = pd.read_csv(csv_path)
    cols = arldiag_columns(c for c in df.columns if c != "step")
    return pd.concat([df, pd.DataFrame({to: df[src] for to, src in cols.items()})], axis=1), cols


def rldoctor_columns(columns) -> dict[str, str]:
    """{rldoctor key: frame column}: RLDOCTOR_MAPPING's first present column, plus TRL reward components."""
    have = list(columns)
    out = first_present(RLDOCTOR_MAPPING, have)
    out.update({c: c for c in have if COMPONENT.match(c)})
    return out


def hold_states(steps, alerts: dict, hold: int = HOLD) -> list[tuple[int, float, str, str | None]]:
    """[(step, nan, state, detector)] from {step: [(severity, detector)]}: an alert holds its severity for
    ``hold`` steps, a later one extends it, critical wins (the rule of peer_rlwatch.rlwatch_timeline)."""
    out, until, level, top = [], -1, "ok", None
    for step in steps:
        sent = alerts.get(step) or []
        if sent:
            sev, det = max(sent, key=lambda a: a[0] == "critical")
            level = "critical" if sev == "critical" or (level == "critical" and step < until) else "warning"
            until, top = step + hold, det
        if step >= until:
            level, top = "ok", None
        out.append((step, math.nan, level, top))
    return out


def rldoctor_timeline(frame, hold: int = HOLD):
    """rldoctor's LiveMonitor, checked every step with its defaults, over one run's frame."""
    from rl_doctor.live import LiveMonitor

    mon = LiveMonitor(check_every=1, on_finding=lambda f: None)
    cols = {k: frame[c].tolist() for k, c in rldoctor_columns(frame.columns).items()}
    steps, alerts = [int(s) for s in frame["step"].tolist()], {}
    for i, step in enumerate(steps):
        rec = {k: x for k, v in cols.items() if (x := _value(v[i])) is not None}
        found = mon.log(rec, step=step)
        if found:
            alerts[step] = [(f.severity.name.lower(), f.detector) for f in found]
    return hold_states(steps, alerts, hold)


def first_present(mapping: dict, columns) -> dict[str, str]:
    """{peer key: frame column}: for each key the first of its columns present in ``columns``."""
    have = list(columns)
    return {k: next(c for c in cs if c in have) for k, cs in mapping.items() if any(c in have for c in cs)}


def rlprobe_timeline(frame, hold: int = HOLD, min_steps: int = RLPROBE_MIN_STEPS):
    """rlprobe's live watcher over one run's frame: a ``StepRecord`` per logged step, its catalog over the records
    so far at each step from ``min_steps`` on, each new (signature, severity) at warn or critical an alert."""
    from rlprobe.doctor.engine import diagnose_view
    from rlprobe.doctor.runview import RunView
    from rlprobe.schemas import RunManifest, StepRecord

    manifest = RunManifest(run_id="peers_real", created_at="1970-01-01T00:00:00Z", algorithm="grpo")
    cols = {k: frame[c].tolist() for k, c in first_present(RLPROBE_MAPPING, frame.columns).items()}
    comps = {c: frame[c].tolist() for c in frame.columns if COMPONENT.match(c)}
    steps, alerts, records, seen = [int(s) for s in frame["step"].tolist()], {}, [], set()
    for i, step in enumerate(steps):
        rec = {k: x for k, v in cols.items() if (x := _value(v[i])) is not None}
        parts = {c.split("/")[1]: x for c, v in comps.items() if (x := _value(v[i])) is not None}
        records.append(StepRecord(step=step, reward_components=parts, **rec))
        if len(records) < min_steps:
            continue
        found = diagnose_view(RunView(manifest, list(records), samples_provider=lambda: []))
        new = [f for f in found if (f.signature_id, f.severity) not in seen]
        seen.update((f.signature_id, f.severity) for f in new)
        sent = [(RLPROBE_SEVERITY[f.severity], f.signature_id) for f in new if f.severity in RLPROBE_SEVERITY]
        if sent:
            alerts[step] = sent
    return hold_states(steps, alerts, hold)


def arldiag_real(csv_path: Path, tmp: Path):
    """(timeline, tracks) of arldiag's defaults on one log: ``arldiag import csv``, then evaluate_run."""
    from arldiag.detectors.batch import evaluate_run
    from arldiag.store.reader import open_run

    out = tmp / csv_path.stem
    cmd = [sys.executable, "-c", "import sys; from arldiag.cli import main; sys.exit(main())",
           "import", "csv", str(csv_path), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp)
    re_ = evaluate_run(open_run(str(out)), csv_path.stem)
    return re_.timeline, re_.evaluator.tracks


def score(name: str, timelines: dict, label: dict) -> dict:
    """{tool: eval-detect row} of each tool's timeline against one label (collapse, dips, decline, ...)."""
    from arldiag.evaluation.evaluate import score_evaluation
    from arldiag.evaluation.scoring import ScoreConfig

    return {tool: score_evaluation(name, tl, label["collapse_step"], label.get("dips", []), label.get("faults", {}),
                                   tracks, ScoreConfig(), label.get("decline"), interval=label.get("interval", 1),
                                   ambiguous=label.get("ambiguous", False))
            for tool, (tl, tracks) in timelines.items()}


def real_set(real: Path, hold: int) -> dict:
    labels = json.loads((real / "labels.json").read_text())
    runs, logged = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(real.glob("*.csv")):
            lab = labels[path.stem]
            frame, cols = peer_frame(path)
            for name in USED:  # the logged name each peer input came from (its own name when logged as it)
                src = cols.get(name, name if name in frame.columns else None)
                if src is not None:
                    logged.setdefault(name, set()).add(src)
            tl = {"arldiag": arldiag_real(path, Path(tmp)), "rlwatch": (rlwatch_timeline(frame, hold), {}),
                  "rldoctor": (rldoctor_timeline(frame, hold), {}), "rlprobe": (rlprobe_timeline(frame, hold), {})}
            label = {"collapse_step": lab["collapse_step"], "ambiguous": bool(lab.get("ambiguous")),
                     "interval": lab.get("log_interval_steps") or 1}
            runs.append({"run": path.stem, "columns": cols, "rows": score(path.stem, tl, label)})
    return {"key": "real", "title": f"Real development runs ({real.name}, labels.json)", "runs": runs,
            "logged_as": {k: sorted(v) for k, v in sorted(logged.items())}}


def toy_sets(toy: Path, hold: int) -> list[dict]:
    """One set per split of the sample runs (run.json ``config.split``), labelled by arldiag's own rule."""
    from arldiag.evaluation.evaluate import injected_faults, split_of
    from arldiag.detectors import decline_of, evaluate_run, events_of
    from arldiag.store.reader import open_run

    run, by_split = open_run(str(toy)), {}
    for name in run.names:
        re_ = evaluate_run(run, name)
        c, dips = events_of(re_.frame)
        label = {"collapse_step": c, "dips": dips, "decline": decline_of(re_.frame),
                 "faults": injected_faults(run, name)}
        tl = {"arldiag": (re_.timeline, re_.evaluator.tracks), "rlwatch": (rlwatch_timeline(re_.frame, hold), {}),
              "rldoctor": (rldoctor_timeline(re_.frame, hold), {}), "rlprobe": (rlprobe_timeline(re_.frame, hold), {})}
        by_split.setdefault(split_of(run, name) or "all", []).append({"run": name, "rows": score(name, tl, label)})
    order = sorted(by_split, key=lambda s: {"heldout": 0, "dev": 1}.get(s, 2))
    return [{"key": f"sample_{sp}", "title": f"Reference trainer's sample runs ({toy.name}), {sp} split", "runs":
             by_split[sp]} for sp in order]


def figures(rows) -> dict:
    """Set figures of one tool's scored rows (false alarms: on collapse and stable runs; ambiguous, decline and
    fault runs are scored apart)."""
    coll = [r for r in rows if r["kind"] == "collapse"]
    stable = [r for r in rows if r["kind"] == "stable"]
    return {"collapses": len(coll), "warned_10_ahead": sum(bool(r["caught_at_10"]) for r in coll),
            "alarmed_by_late_points": sum(bool(r["alarmed_by_late_points"]) for r in coll),
            "stable": len(stable), "stable_without_warning": sum(not r["episodes"] for r in stable),
            "false_alarm_episodes": sum(r["false_alarms"] for r in coll + stable),
            "ambiguous": sum(r["kind"] == "ambiguous" for r in rows), "other": sum(
                r["kind"] not in ("collapse", "stable", "ambiguous") for r in rows)}


def set_table(s: dict) -> str:
    f = {t: figures([r["rows"][t] for r in s["runs"]]) for t in TOOLS}
    lines = ["| tool | collapses warned >= 10 steps ahead | collapses alarmed before or within 3 logged points "
             "| stable runs without any warning | false-alarm episodes (collapse and stable runs) |",
             "|---|---|---|---|---|"]
    for t in TOOLS:
        x = f[t]
        lines.append(f"| {TITLES[t]} | {x['warned_10_ahead']} of {x['collapses']} | {x['alarmed_by_late_points']} "
                     f"of {x['collapses']} | {x['stable_without_warning']} of {x['stable']} | "
                     f"{x['false_alarm_episodes']} |")
    return "\n".join(lines)


def label_text(r: dict) -> str:
    if r["kind"] == "collapse":
        return f"collapse {r['collapse_step']}"
    if r["kind"] == "decline":
        return f"decline {r['decline_step']}"
    dips = ", ".join(f"{a}-{b}" for a, b in r["dips"])
    return r["kind"] + (f" (dip {dips})" if dips else "")


def cell(r: dict) -> str:
    """First warning step, and for a collapse the lead (collapse - start of the episode active at it)."""
    first = "-" if r["first_episode_step"] is None else str(r["first_episode_step"])
    if r["kind"] != "collapse":
        return first
    return f"{first} / {'-' if r['lead_time'] is None else r['lead_time']}"


def runs_table(s: dict) -> str:
    lines = ["| run | label | " + " | ".join(f"{TITLES[t]}: first warning / lead" for t in TOOLS) + " |",
             "|---|---|" + "---|" * len(TOOLS)]
    for r in s["runs"]:
        lines.append(f"| {r['run']} | {label_text(r['rows']['arldiag'])} | "
                     + " | ".join(cell(r["rows"][t]) for t in TOOLS) + " |")
    return "\n".join(lines)


def mapping_table(logged: dict) -> str:
    """Peer inputs per arldiag name, with the names the real logs carried them under."""
    lines = ["| arldiag name | rlwatch argument | rldoctor key | rlprobe field | logged in the real runs as |",
             "|---|---|---|---|---|"]
    for name in USED:
        rw = [k for k, v in RLWATCH_MAPPING.items() if v == name]
        rd = [k for k, cs in RLDOCTOR_MAPPING.items() if name in cs]
        rp = [k for k, cs in RLPROBE_MAPPING.items() if name in cs]
        srcs = ", ".join(f"`{x}`" for x in logged.get(name, [])) or "(not in these logs)"
        lines.append(f"| `{name}` | {', '.join(rw) or '-'} | {', '.join(rd) or '-'} | {', '.join(rp) or '-'} | {srcs} |")
    raw = [f"| (verl `{c}`, no arldiag name) | - | - | {k} | `{c}` |" for k, cs in RLPROBE_MAPPING.items() for c in cs
           if "/" in c]
    return "\n".join(lines + raw + ["| TRL `rewards/<fn>/mean` | - | (reward component, under its own name) | "
                                    "reward_components | `rewards/*/mean` |"])


def section(sets: list[dict], hold: int) -> str:
    out = ["## Side by side: arldiag, rlwatch 0.5.1, rldoctor 0.2.0 and rlprobe 0.1.0 on real runs and sample runs "
           "(generated)", "",
           "Generated by `python benchmarks/peers_real.py --write` (raw figures: `benchmarks/results/peers_real.json`;"
           " how each tool is run and the metric mapping: the module docstring). Each tool runs with its shipped "
           "defaults: arldiag as `arldiag import csv` + `arldiag eval-detect --labels` run it; rlwatch's "
           "`DetectorSuite` + `AlertManager` from `RLWatchConfig()`; rldoctor's `LiveMonitor(check_every=1)` "
           "(60-record warm-up, alerts at WARNING); rlprobe's live watcher (`RunWatcher` defaults: 30-record minimum, "
           "its 14-detector catalog over the records so far at each step, each new warn or critical finding an "
           "alert). A peer's alert holds the run in its severity for "
           f"{hold} optimizer steps (a later one extends it); all three states are scored by the same "
           "`evaluation.scoring.score_run`. Real runs are labelled by `labels.json` (ambiguous runs scored apart), "
           "the sample runs by arldiag's own label (decline and fault runs are listed, not counted). First warning: "
           "the first step in warning or critical; lead: the collapse step minus the start of the warning active "
           "at it (- : none active at the collapse).", ""]
    for s in sets:
        short = sum(r["rows"]["rldoctor"]["steps"] < RLDOCTOR_WARMUP for r in s["runs"])
        few = sum(r["rows"]["rlprobe"]["steps"] < RLPROBE_MIN_STEPS for r in s["runs"])
        note = " ".join(x for x in (
            (f"{short} of {len(s['runs'])} logs have fewer than {RLDOCTOR_WARMUP} logged points: rldoctor's live "
             "monitor never checks them.") if short else "",
            (f"{few} of {len(s['runs'])} have fewer than {RLPROBE_MIN_STEPS}: rlprobe's watcher never diagnoses "
             "them.") if few else "") if x)
        out += [f"### {s['title']}", "", set_table(s), "", runs_table(s), ""] + ([note, ""] if note else [])
    out += ["### Inputs of the peers", "", "A real log's columns get arldiag's names from arldiag's alias table "
            "(`arldiag.aliases`); a missing cell is not passed. Where a key has two arldiag names, the first present "
            "is used.", "", mapping_table(sets[0].get("logged_as", {})), ""]
    return "\n".join(out).rstrip() + "\n"


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the marked section of ``doc`` (insert it before ``## Catalog`` when it is not there yet)."""
    body = doc.read_text(encoding="utf-8")
    block = f"{START}\n{text}{END}\n"
    if START in body and END in body:
        a, b = body.index(START), body.index(END) + len(END)
        body = body[:a] + block.rstrip("\n") + body[b:]
    elif "\n## Catalog" in body:
        i = body.index("\n## Catalog") + 1
        body = body[:i] + block + "\n" + body[i:]
    else:
        raise SystemExit(f"{doc}: no '## Catalog' heading to insert the section before")
    doc.write_text(body, encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--real", type=Path, default=REAL_DEFAULT, help="folder with the real *.csv and labels.json")
    p.add_argument("--toy", type=Path, default=ROOT / "sample_runs", help="the reference trainer's run stores")
    p.add_argument("--hold", type=int, default=HOLD, help="steps a peer's alert keeps the run in warning")
    p.add_argument("--json", action="store_true")
    p.add_argument("--write", action="store_true", help="rewrite the docs/detectors.md section and the JSON")
    args = p.parse_args(argv)
    if not (args.real / "labels.json").is_file():
        sys.exit(f"peers_real: no real runs at {args.real} (expected *.csv and labels.json); pass --real DIR")
    if not args.toy.is_dir():
        sys.exit(f"peers_real: no sample runs at {args.toy}; pass --toy DIR")
    sets = [real_set(args.real, args.hold)] + toy_sets(args.toy, args.hold)
    for s in sets:
        s["figures"] = {t: figures([r["rows"][t] for r in s["runs"]]) for t in TOOLS}
    versions = {t: __import__(m).__version__ for t, m in zip(TOOLS, ("arldiag", "rlwatch", "rl_doctor", "rlprobe"))}
    res = {"hold": args.hold, "versions": versions, "rlwatch_mapping": RLWATCH_MAPPING,
           "rldoctor_mapping": RLDOCTOR_MAPPING, "rlprobe_mapping": RLPROBE_MAPPING, "sets": sets}
    text = section(sets, args.hold)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(res, indent=1, default=str) + "\n")
        write_doc(text)
    print(json.dumps(res, indent=1, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
