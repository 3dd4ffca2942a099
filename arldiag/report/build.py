"""Assemble a report: open the run(s), run the detectors, gather the data each section needs.

The result (``Report``) is renderer-agnostic: the sections (report/sections/, in SECTIONS order) turn it into blocks
that html.py and markdown.py render, and jsonout.py writes the sections' data fields. The detectors
are imported lazily (``analyse``) so this module imports even where the detectors package is absent, and tests can
inject their own findings.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from arldiag import __version__
from arldiag.detectors import analyse, decline_of
from arldiag.detectors.advice import settings_of, with_actions
from arldiag.diff.compare import RunDiff, diff_runs
from arldiag.evaluation.precursors import BASE, LEAD, precursor_scan
from arldiag.findings import Finding
from arldiag.progress import bar as progress_bar
from arldiag.report import data as D
from arldiag.report.dimensions import Dimension, sections
from arldiag.report.recommend import Recommendation, recommendations
from arldiag.schema import STEP_METRICS
from arldiag.store.reader import open_run
from arldiag.verdict import Verdict, registry_lagging, verdict
from arldiag.views import catalog as S, heatmap as H, offenders as O, series as V
from arldiag.views._sql import table_rows
from arldiag.views.events import action_outcomes

# analyse(run) -> (findings, {run name: collapse step or None}, alert timeline DataFrame)
Analyse = Callable[[Any], tuple[list[Finding], dict[str, int | None], pd.DataFrame]]


def detector_analysis(run: Any) -> tuple[list[Finding], dict[str, int | None], pd.DataFrame]:
    """The detectors' view of a run: the same Findings `arldiag detect` prints."""
    return analyse(run)


@dataclass
class RunReport:
    name: str
    path: str
    manifest: dict[str, Any]
    steps: pd.DataFrame                       # full step metrics (one row per step)
    cols: dict[str, str]                      # signal key -> step column holding its data
    findings: list[Finding]
    timeline: pd.DataFrame                    # run, step, risk, state
    verdict: Verdict
    recommendations: list[Recommendation]
    sections: list[Dimension]                 # the four ARLArena dimensions
    rows: dict[str, int]                      # rows per table for this run
    heatmaps: dict[str, H.Heatmap] = field(default_factory=dict)  # "sequences" / "tokens"
    comparison: V.Comparison | None = None    # neg-adv low-IS before vs at collapse
    turns: pd.DataFrame | None = None
    offenders: list[O.Offender] = field(default_factory=list)
    alerts: pd.DataFrame | None = None        # alerts recorded while the run was written (first 50)
    actions: pd.DataFrame | None = None       # what --auto-stabilize applied (first 50)
    window: tuple[int, int] | None = None     # steps the offenders were taken from
    clip: list[float] | None = None
    seq_clip: list[float] | None = None
    precursors: list[dict] | None = None      # step metrics that moved most before the collapse (None: no collapse)
    precursor_base: int = BASE                # steps of the baseline window of that scan (precursor_base)
    parting: RunDiff | None = None            # where this run and the --baseline part (arldiag.diff)


@dataclass
class Report:
    main: RunReport
    baseline: RunReport | None
    generated: str
    version: str
    max_points: int
    decode: Callable[[int], str] | None = None
    decode_note: str | None = None            # why tokens are shown by id (no tokenizers package)

    @property
    def runs(self) -> list[RunReport]:
        return [self.main] + ([self.baseline] if self.baseline is not None else [])


def _open(run_or_path: Any, arg: str) -> Any:
    """An open Run of exactly one run (a report is about one run; --baseline adds a second)."""
    run = run_or_path
    if isinstance(run_or_path, (str, Path)):
        run = open_run(str(run_or_path))
    if len(run.names) != 1:
        raise ValueError(f"{arg}: {run_or_path} holds {len(run.names)} runs ({', '.join(run.names[:5])}); "
                         "pass one run folder (and a second one with --baseline)")
    return run


def _window(n_steps: int) -> int:
    """Half-width of the 'at collapse' window: 5 % of the run, at least 3 steps."""
    return max(3, int(round(0.05 * n_steps)))


def gather(run: Any, analyse: Analyse = detector_analysis, name: str | None = None, progress: Any = None
           ) -> RunReport:
    """Everything the renderers need for one run (``name`` picks one run of a multi-run view)."""
    tick = (lambda desc: (progress.set_description(desc), progress.update(1))) if progress is not None \
        else (lambda desc: None)
    name = name or run.names[0]
    sub = run.subset(name) if len(run.names) > 1 else run
    manifest = dict(sub.manifests.get(name, sub.manifest) if hasattr(sub, "manifests") else sub.manifest)
    tick(f"{name}: detectors")
    found, collapse_by_run, timeline = analyse(sub)
    found = [f for f in found if f.run in (None, name)]
    collapse = collapse_by_run.get(name)
    if timeline is not None and not timeline.empty and "run" in timeline:
        timeline = timeline[timeline["run"] == name]
    timeline = timeline if timeline is not None else pd.DataFrame(columns=["run", "step", "risk", "state"])
    tick(f"{name}: step series")
    steps = V.step_frame(sub, name)
    states = list(zip(timeline["step"].tolist(), timeline["state"].tolist())) if len(timeline) else []
    v = verdict(found, collapse, states, registry_lagging(), n_steps=len(steps),
                decline=_decline_step(steps, collapse))
    cols = S.resolve(S.ALL_SIGNALS, V.columns_with_data(steps))
    rows = {t: table_rows(sub, t, name) for t in ("tokens", "sequences", "turns", "groups", "steps", "alerts",
                                                     "actions")}
    clip, seq_clip = manifest.get("clip"), manifest.get("seq_clip")
    # advice fits the settings the run ended with: run.json's config plus what --auto-stabilize switched on
    settings = with_actions(settings_of(manifest), action_outcomes(sub, name) if rows["actions"] else [])
    rep = RunReport(name=name, path=str(getattr(sub, "paths", {}).get(name, "")), manifest=manifest, steps=steps,
                    cols=cols, findings=found, timeline=timeline, verdict=v, recommendations=recommendations(found, settings),
                    sections=sections(manifest, steps, cols, found), rows=rows, clip=clip, seq_clip=seq_clip)

    if v.event is not None:  # the metrics that moved 20..10 steps before the collapse or decline (precursors.py)
        rep.precursor_base = precursor_base(steps)
        rep.precursors = training_precursors(steps, v.event[1], top=8, base=rep.precursor_base)

    tick(f"{name}: IS-ratio heatmaps")
    rep.heatmaps = _heatmaps(sub, name, rows, clip, seq_clip)
    w = _window(len(steps))
    nalis = {k: cols[k] for k in ("nalis_count", "nalis_frac", "nalis_kl_share", "nalis_delta_frac") if k in cols}
    rep.comparison = V.compare_windows(steps, nalis, collapse, w)

    tick(f"{name}: turns")
    rep.turns = V.turn_summary(sub, name, H.log_band(seq_clip or clip))
    rep.alerts = D.alerts_frame(sub, name)
    rep.actions = D.actions_frame(sub, name)

    tick(f"{name}: offender sequences")
    rep.window = _offender_window(v, w)
    rep.offenders = O.top_offenders(sub, name, rep.window, pinned=_pinned(found, rep.window))
    if not rep.offenders and rep.window is not None:  # no sequence rows in the window (e.g. a NaN last step)
        rep.window = None
        rep.offenders = O.top_offenders(sub, name, None, pinned=_pinned(found, None))
    return rep


def _is_training_signal(col: str) -> bool:
    """Step columns that describe what training did, not how long it took: wall-clock timings (``*_s``, the
    trainer's rollout_s / update_s / step_s), the time stamp, the learning-rate schedule and row counters move with
    the machine or the config, not with the policy."""
    return not (col in ("step", "time", "lr", "n_updates", "n_tokens", "n_sequences", "n_samples", "n_groups")
                or col.endswith("_s") or col.endswith("_time") or col.startswith("user/"))


def _aliases(a: str, b: str) -> bool:
    """Two names of one statistic: ``x`` and ``x_mean`` (a trainer's ``response_length`` and arldiag's
    ``response_length_mean``)."""
    return a == b + "_mean" or b == a + "_mean"


def _decline_step(steps: pd.DataFrame, collapse: int | None) -> int | None:
    """The step at which a run without a collapse declined (detectors.decline_of on its outcome series), else
    None."""
    if collapse is not None or steps.empty or "step" not in steps:
        return None

    return decline_of(steps)


# the scan's smallest samples (evaluation.precursors.precursor_scan): 3 values in the lead window, 10 in the baseline
MIN_LEAD_POINTS, MIN_BASE_POINTS = 3, 10


def log_gap(steps: pd.DataFrame) -> int:
    """Optimizer steps between logged points (the median gap; 1 for a run logged every step)."""
    s = steps["step"].to_numpy() if "step" in steps else []
    gaps = sorted(int(b - a) for a, b in zip(s, s[1:]) if b > a)
    return max(1, gaps[len(gaps) // 2]) if gaps else 1


def precursor_base(steps: pd.DataFrame) -> int:
    """The baseline window in steps: BASE, widened so that it holds MIN_BASE_POINTS logged points of a run that
    logs every few steps (a TRL log every 5 steps has 8 points in 40 steps, too few for the scan)."""
    return max(BASE, MIN_BASE_POINTS * log_gap(steps))


def history_needed(steps: pd.DataFrame, event: int, base: int) -> str:
    """What the scan needs and what the run has before ``event``, in logged points."""
    s = steps["step"].to_numpy() if "step" in steps else []
    lo, hi = event - LEAD[1], event - LEAD[0]
    n_lead = int(((s >= lo) & (s <= hi)).sum())
    n_base = int(((s >= lo - base) & (s < lo)).sum())
    return (f"the comparison needs {MIN_LEAD_POINTS} logged points in steps {lo}..{hi} (the run has {n_lead}) and "
            f"{MIN_BASE_POINTS} in the {base} steps before them, {lo - base}..{lo - 1} (it has {n_base})")


def training_precursors(steps: pd.DataFrame, collapse: int, top: int = 8, base: int = BASE) -> list[dict]:
    """The training signals that moved most before the collapse (precursor_scan over the training columns only),
    one entry per statistic: a column that is an alias of, or equal step by step to, a higher-ranked one is left
    out, keeping arldiag's own name (schema.STEP_METRICS) over a trainer's."""
    import numpy as np

    own = {m.name for m in STEP_METRICS}
    cols = [c for c in steps.columns if c == "step" or _is_training_signal(c)]
    ranked = precursor_scan(steps[cols], collapse, base=base, top=len(cols))
    values = lambda c: steps[c].to_numpy(dtype=np.float64, na_value=np.nan)  # noqa: E731
    kept: list[dict] = []
    for r in ranked:
        x = values(r["metric"])
        dup = next((i for i, k in enumerate(kept) if _aliases(k["metric"], r["metric"])
                    or np.allclose(values(k["metric"]), x, rtol=1e-4, atol=1e-12, equal_nan=True)), None)
        if dup is None:
            kept.append(r)
        elif r["metric"] in own and kept[dup]["metric"] not in own:
            kept[dup] = r  # same statistic: show it under arldiag's name
        if len(kept) >= top and dup is None:
            break
    return kept[:top]


def _heatmaps(run: Any, name: str, rows: dict[str, int], clip, seq_clip) -> dict[str, H.Heatmap]:
    """Sequence ratios against the sequence band; token ratios (unbiased sample only) against the token band."""
    bands = {"sequences": H.log_band(seq_clip or clip), "tokens": H.log_band(clip)}
    out = {t: H.ratio_heatmap(run, t, name, bands[t]) for t in ("sequences", "tokens") if rows[t]}
    return {k: h for k, h in out.items() if h is not None}


def _offender_window(v: Verdict, w: int) -> tuple[int, int] | None:
    """The build-up, where the sequences that drove the run are (at the collapse step itself a collapsed run holds
    mostly zero-advantage rows that teach nothing): around the first warning alert, before the collapse; else the
    steps before the collapse (or decline); else after the first precursor; else the whole run (None)."""
    c = v.event[1] if v.event is not None else None
    if v.first_warning_step is not None and (c is None or v.first_warning_step < c):
        lo, hi = v.first_warning_step - w, v.first_warning_step + w
        return (max(0, lo), hi if c is None else min(hi, c - 1))
    if c is not None:
        return (max(0, c - 3 * w), max(0, c - 1))
    if v.first_precursor is not None:
        return (v.first_precursor["step"], v.first_precursor["step"] + 2 * w)
    return None


def _pinned(found: list[Finding], window: tuple[int, int] | None) -> list[dict]:
    """Sequences the fired findings name as evidence (``top_sequences``) inside the window."""
    out = []
    for f in found:
        tops = f.evidence.get("top_sequences") if f.fired else None
        for s in tops if isinstance(tops, list) else []:
            if isinstance(s, dict) and (window is None or window[0] <= s.get("step", -1) <= window[1]):
                out.append({**s, "source": f.detector})
    return out


def tokenizers_installed() -> bool:
    return importlib.util.find_spec("tokenizers") is not None


def tokenizer_path(tokenizer: str | None, run_path: str | None) -> str | None:
    """``tokenizer`` when given, else a tokenizer.json in the run folder or in its model/ folder (the reference
    trainer's --save-model); None when there is none."""
    if tokenizer is not None or not run_path:
        return tokenizer
    found = [p for p in (Path(run_path) / "tokenizer.json", Path(run_path) / "model" / "tokenizer.json")
             if p.is_file()]
    return str(found[0]) if found else None


def decode_note(tokenizer: str | None, run_path: str | None) -> str | None:
    """Why tokens are shown by id although a tokenizer.json is at hand: the ``tokenizers`` package is missing."""
    cand = tokenizer_path(tokenizer, run_path)
    if cand is None or not Path(cand).expanduser().is_file() or tokenizers_installed():
        return None
    return (f"Token ids are shown undecoded: decoding {cand} needs the tokenizers package "
            "(pip install 'arldiag[report]').")


def load_decoder(tokenizer: str | None, run_path: str | None = None) -> Callable[[int], str] | None:
    """A token-id -> text function from a local tokenizer (never downloaded): ``tokenizer`` (a tokenizer.json file
    or a local model folder), else a tokenizer.json in the run folder or in its model/ folder (the reference
    trainer's --save-model). None when there is none, or when the tokenizers package is missing (decode_note)."""
    cand = tokenizer_path(tokenizer, run_path)
    if not cand:
        return None
    p = Path(cand).expanduser()
    if p.is_file():
        if not tokenizers_installed():
            return None  # the offenders section shows ids and says what decodes them (decode_note)
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(p))
        return lambda i: tok.decode([int(i)], skip_special_tokens=False)
    if p.is_dir():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        return lambda i: tok.decode([int(i)])
    raise ValueError(f"tokenizer: {cand!r} is neither a tokenizer.json file nor a local model folder")


def build_report(run: Any, baseline: Any = None, analyse: Analyse = detector_analysis, progress: bool = True,
                 max_points: int = 1500, tokenizer: str | None = None) -> Report:
    """Gather the report of ``run`` (a path or an open Run) and, optionally, of a ``baseline`` run."""
    if max_points < 10:
        raise ValueError(f"max_points must be >= 10, got {max_points!r}")
    runs = [_open(run, "run")] + ([_open(baseline, "baseline")] if baseline is not None else [])
    with progress_bar(total=5 * len(runs), desc="report", file=sys.stderr, disable=not progress, leave=False) as bar:
        reps = [gather(r, analyse, progress=bar) for r in runs]

    main = reps[0]
    if len(runs) > 1:
        main.parting = diff_runs(runs[0], runs[1])
    return Report(main=main, baseline=reps[1] if len(reps) > 1 else None,
                  generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), version=__version__,
                  max_points=max_points, decode=load_decoder(tokenizer, main.path or None),
                  decode_note=decode_note(tokenizer, main.path or None))

