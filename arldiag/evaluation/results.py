"""Markdown for the detection results: figure tables, the per-run table, and the generated sections between markers
in docs/detectors.md and README.md (written by ``benchmarks/calibrate.py --write``; pure functions, no I/O except
``write_between``).
"""
from __future__ import annotations

from pathlib import Path

# (summary key, label, format) of the set figures, in table order (evaluation.scoring.summarize)
FIGURES = (("recall_at_10", "recall@10 (warned >= 10 steps ahead)", "rate"),
           ("recall_at_20", "recall@20", "rate"),
           ("median_lead", "median lead (steps)", "num"),
           ("false_alarm_episodes", "false-alarm episodes", "int"),
           ("false_alarms_per_100_healthy_steps", "false-alarm episodes / 100 healthy steps", "num"),
           ("healthy_warning_share", "healthy steps in warning", "pct"),
           ("stable_runs_with_warning", "stable runs with a false alarm", "of_stable"),
           ("declines_warned", "declining runs warned near their decline (not scored)", "of_declines"),
           ("nab_score", "NAB score", "num1"))


def fmt(v, kind: str, s: dict | None = None) -> str:
    """One table cell. ``rate``: a share of collapses written as caught/collapses (the count matters with few)."""
    if kind in ("of_stable", "of_declines"):
        n = (s or {}).get("stable" if kind == "of_stable" else "declines", "?")
        return "-" if v is None else f"{v} of {n}"
    if v is None:
        return "-" if kind != "rate" else "n/a (no collapse)"
    if kind == "rate":
        n = (s or {}).get("collapsing")
        return f"{round(v * n)}/{n} ({100 * v:.0f} %)" if n else f"{100 * v:.0f} %"
    if kind == "pct":
        return f"{100 * v:.1f} %"
    if kind == "int":
        return str(int(v))
    if float(v).is_integer() and kind == "num":
        return str(int(v))
    return f"{v:.1f}" if kind == "num1" else f"{v:.2f}"


def figures_table(columns: list[tuple[str, dict]]) -> str:
    """A markdown table: one row per figure of FIGURES, one column per (header, summary)."""
    lines = ["| figure | " + " | ".join(h for h, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key, label, kind in FIGURES:
        lines.append(f"| {label} | " + " | ".join(fmt(s.get(key), kind, s) for _, s in columns) + " |")
    lines.append("| runs (collapsing / early / stable / declining / fault) | " + " | ".join(
        f"{s['runs']} ({s['collapsing']} / {s['early_collapses']} / {s['stable']} / {s.get('declines', 0)} / "
        f"{s.get('fault', 0)})"
        for _, s in columns) + " |")
    return "\n".join(lines)


def _eps(eps) -> str:
    return ", ".join(f"{a}-{'end' if b is None else b - 1}" for a, b in eps) or "-"


def per_run_table(rows: list[dict]) -> str:
    """One line per run: (run, split, kind, collapse step or decline step with a d, dips, lead, false-alarm
    episodes, steps in warning) for each tool given in the row (``tools``: {tool: score_run output})."""
    tools = list(rows[0]["tools"]) if rows else []
    hdr = "| run | split | kind | collapse | dips | " + " | ".join(
        f"{t}: lead | {t}: false alarms (steps) | {t}: steps in warning" for t in tools) + " |"
    lines = [hdr, "|---" * (5 + 3 * len(tools)) + "|"]
    for r in rows:
        dec = r.get("decline")
        cells = [r["run"], r["split"], r["kind"],
                 str(r["collapse"]) if r["collapse"] is not None else ("-" if dec is None else f"{dec}d"),
                 _eps(r["dips"])]
        for t in tools:
            s = r["tools"][t]
            cells += ["-" if s["lead_time"] is None else str(s["lead_time"]),
                      f"{s['false_alarms']} ({_eps(s['false_alarm_episodes'])})" if s["false_alarms"] else "0",
                      f"{100 * s['warning_share']:.0f} %"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def begin(tag: str) -> str:
    return f"<!-- BEGIN generated:{tag} (benchmarks/calibrate.py --write; do not edit by hand) -->"


def end(tag: str) -> str:
    return f"<!-- END generated:{tag} -->"


def replace_between(text: str, tag: str, body: str) -> str:
    """``text`` with everything between the markers of ``tag`` replaced by ``body`` (markers kept)."""
    b, e = begin(tag), end(tag)
    i, j = text.find(b), text.find(e)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"markers for {tag!r} not found (expected the lines {b!r} ... {e!r})")
    return text[:i + len(b)] + "\n" + body.strip("\n") + "\n" + text[j:]


def write_between(path: Path, tag: str, body: str) -> None:
    path = Path(path)
    path.write_text(replace_between(path.read_text(), tag, body))


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**not met**")


def targets(s: dict) -> list[str]:
    """The issue's held-out targets, each with the measured figure."""
    r10, ml = s.get("recall_at_10"), s.get("median_lead")
    n_stable = s["stable"] + s.get("fault", 0)
    return [
        f"- collapses warned >= 10 steps ahead >= 80 %: {fmt(r10, 'rate', s)} -> {_met(None if r10 is None else r10 >= 0.8)}",
        f"- median lead >= 20 steps: {'-' if ml is None else ml} -> {_met(None if ml is None else ml >= 20)}",
        f"- no warning episode on a run that does not collapse: {s['stable_runs_with_warning']} of {s['stable']} "
        f"stable runs have one"
        + (f" ({s['declines']} declining run(s) not counted)" if s.get("declines") else "")
        + f" -> {_met(s['stable_runs_with_warning'] == 0) if n_stable else 'n/a'}",
        f"- at most 1 % of healthy steps in warning: {fmt(s['healthy_warning_share'], 'pct')} -> "
        f"{_met(None if s['healthy_warning_share'] is None else s['healthy_warning_share'] <= 0.01)}",
    ]


def _recall_note(s: dict, where: str) -> str:
    if not s["collapsing"]:
        return (f"The {where} runs contain **no collapse**, so recall and lead cannot be measured on them: these "
                f"figures test false alarms only.")
    if s["collapsing"] < 5:
        return (f"The {where} runs contain only {s['collapsing']} collapse(s): each one moves recall by "
                f"{100 / s['collapsing']:.0f} points.")
    return ""


def regenerate(source: str) -> str:
    """The command that regenerates these figures; SUITE, STRESS and LAG (placeholders for the folders the suite
    script wrote) are explained."""
    text = f"`python benchmarks/calibrate.py {source} --write`"
    made = {"SUITE": "`sample_runs/suite.py all --out SUITE`",
            "STRESS": "`suite.py run --set stress --seeds 0-49 --out STRESS` (the runs without auto-stabilize)",
            "LAG": "`suite.py all --set lag --seeds 0-39 --out LAG` (the plain CISPO runs) and `suite.py run --set lag "
                   "--seeds 43,44,48,49,53,54,58,59,63,64,68,69,73,74,78,79,83,84,88,89,93,94,98,99 --out LAG "
                   "cispo_lag1_s43 ...` (held-out seeds trained later, one per name)"}
    used = [name for name in made if f"{name}/" in source]
    if used:
        text += (f" ({', '.join(used)}: the folders that " + ", ".join(made[n] for n in used) + " wrote)")
    return text


def _choice_note(out: dict, h: dict) -> list[str]:
    """Why the shipped model ships: held-out J, and the eligibility checks of calibrate.choose_default."""
    syn = out.get("synthetic_collapse_warned_10_ahead")
    if not syn:
        return []
    j = {m: h[m]["objective"] for m in ("rules", "learned")}
    said = lambda ok: "warned >= 10 steps ahead" if ok else "not warned ahead"  # noqa: E731
    return [f"Choice: held-out J {j['rules']:.3f} (rules) against {j['learned']:.3f} (learned); the constructed "
            f"collapse of `arldiag synth --collapse-at {out['synthetic_collapse_at']}` "
            f"(calibrate.synthetic_check): rules {said(syn['rules'])}, "
            f"learned {said(syn['learned'])}. A model that does not warn ahead of it while the other does is not "
            f"eligible (calibrate.choose_default).", ""]


def docs_section(out: dict, runs: list[dict], pr: dict, source: str) -> str:
    """The generated results section of docs/detectors.md."""
    shipped = out["default_model"]
    other = "learned" if shipped == "rules" else "rules"
    h, d = out["heldout"], out["dev"]
    risk, model, fit = out["risk"], out["learned"], out["fit"]
    n = lambda sp: sum(r["split"] == sp for r in runs)  # noqa: E731
    lines = [
        f"Regenerated by {regenerate(source)} (split from {out['split_source']}; "
        f"{n('dev')} dev runs, {n('heldout')} held-out runs). Everything below is measured by that command.",
        "",
        f"**Chosen on dev** ({fit['dev_fit_runs']} dev runs without planted faults; {fit['grid_points']} grid points, "
        f"then greedy demotion, each demotion buying > {fit['demote_cost']} of J): enter_steps {risk['enter_steps']}, "
        f"warning threshold {risk['enter'][1]}, exit_steps {risk['exit_steps']}, critical_steps "
        f"{risk.get('critical_steps', 1)}, demoted detectors (count one level "
        f"lower in the risk): {', '.join(f'`{x}`' for x in risk['demote']) or 'none'}. Learned risk: alarm threshold "
        f"{model['threshold']}, {model['positives']} positive and {model['negatives']} negative dev steps.",
        "",
    ]
    if h is not None:
        lines += [
            f"### Held out (scored after the fit, which never reads them): shipped default = **{shipped}**",
            "",
            figures_table([(f"arldiag {shipped} (shipped)", h[shipped]), (f"arldiag {other}", h[other]),
                           ("rlwatch 0.5.1 defaults", pr["heldout"]["rlwatch"])]),
            "",
            _recall_note(h[shipped], "held-out"),
            "",
            *_choice_note(out, h),
            f"Issue targets on the held-out runs (arldiag {shipped}):",
            "",
            *targets(h[shipped]),
            "",
        ]
    lines += [
        "### Dev (the runs the settings were fitted on: optimistic, reported apart)",
        "",
        figures_table([("class defaults (before the fit)", d["previous"]), ("arldiag rules (chosen)", d["rules"]),
                       ("arldiag learned", d["learned"]), ("rlwatch 0.5.1 defaults", pr["dev"]["rlwatch"])]),
        "",
        _recall_note(d["rules"], "dev"),
        "",
        f"**What the dev data can tune.** The dev runs hold {d['rules']['collapsing']} collapse(s) and "
        f"{d['rules']['stable']} stable runs: the fit can lower false alarms on healthy runs (their steps are "
        f"plentiful), but any choice of lead-time behaviour rests on {d['rules']['collapsing']} example(s) and would "
        f"be fitted to noise. A demotion is taken when it raises J, which prices each dev collapse's alarm "
        f"(1 / collapses in R10 and R0) against each stable run it clears (1 / stable runs); a detector demoted here "
        f"still warns together with any second signal, but a future collapse that only it precedes is warned later. "
        f"The learned model's dev recall is measured on the very collapse windows it was trained on "
        f"({model['positives']} positive steps), so it says nothing about unseen collapses.",
        "",
        f"### Per run (arldiag {shipped}, rlwatch 0.5.1 defaults; episode ranges are inclusive)",
        "",
        per_run_table([{"run": r["name"], "split": r["split"], "kind": a["kind"], "collapse": r["collapse"],
                        "decline": a["decline_step"], "dips": r["dips"], "tools": {"arldiag": a, "rlwatch": b}}
                       for r, a, b in zip(runs, pr["_rows"]["arldiag"], pr["_rows"]["rlwatch"])]),
    ]
    return "\n".join(lines)


def readme_headline(out: dict, source: str) -> str:
    """Two or three sentences for the README: held-out figures first, dev apart, rlwatch beside."""
    shipped = out["default_model"]
    h, d, pr = out["heldout"], out["dev"], out.get("peer_rlwatch") or {}

    def line(s):
        return (f"recall@10 {fmt(s['recall_at_10'], 'rate', s)}, {s['stable_runs_with_warning']} of {s['stable']} "
                f"stable runs with a false alarm, {fmt(s['false_alarms_per_100_healthy_steps'], 'num')} false-alarm "
                f"episodes per 100 healthy steps, {fmt(s['healthy_warning_share'], 'pct')} of healthy steps in warning")

    parts = []
    if h is not None:
        hs = h[shipped]
        parts.append(f"**Held-out seeds** ({hs['runs']} runs, scored after calibrating on dev, which never reads them; shipped risk "
                     f"model: {shipped}): {line(hs)}.")
        if not hs["collapsing"]:
            parts.append("The held-out runs contain no collapse, so they measure false alarms only; recall is "
                         "measured on dev alone and rests on its collapses.")
        h1 = hs["healthy_warning_share"]
        parts.append(f"Issue targets on them: no warning episode on a non-collapsing run "
                     f"{_met(hs['stable_runs_with_warning'] == 0)}; at most 1 % of healthy steps in warning "
                     f"{_met(None if h1 is None else h1 <= 0.01)}; >= 80 % of collapses warned 10 steps ahead "
                     f"{_met(None if hs['recall_at_10'] is None else hs['recall_at_10'] >= 0.8)}.")
        if "heldout" in pr:
            parts.append(f"rlwatch 0.5.1 with its defaults on the same runs: {line(pr['heldout']['rlwatch'])}.")
    ds = d[shipped]
    lead = "-" if ds["median_lead"] is None else fmt(ds["median_lead"], "num")
    parts.append(f"Dev seeds ({ds['runs']} runs, the fit's own data): {line(ds)}; median lead {lead} step(s).")
    parts.append(f"Regenerate: {regenerate(source)}; details in "
                 f"[docs/detectors.md](docs/detectors.md#results-on-the-seeded-suite-generated).")
    return " ".join(parts)
