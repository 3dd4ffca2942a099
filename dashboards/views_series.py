"""Step-series views (overview, clipping, KL and mismatch, advantages and groups, entropy, turns): which metrics
each view stacks, and the render functions the callbacks call (also called directly by the speed benchmark)."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from arldiag.dashboards import detectors_bridge, figures, queries
from arldiag.dashboards.source import RunSource

MAX_POINTS = 1000  # points per series after bucketing; plenty for a ~1000 px wide chart

# The outcome leads every view: the success rate of arldiag's own runs, or the task score a real run logs on its
# own scale (arldiag.aliases: critic/score/mean, the reward, an accuracy) and its validation score
SCORE_PANEL = ("task score (success rate, or the logged task score and validation score on their scale)",
               ["success_rate", "success_frac", "task_score", "val_score"])

PANELS: dict[str, list[tuple[str, list[str]]]] = {
    "overview": [
        ("format_valid_frac", ["format_valid_frac"]),
        ("ppo_kl: policy-update KL k1", ["ppo_kl"]),
        ("kl_ref_k3: KL to the reference", ["kl_ref_k3"]),
        ("grad_norm", ["grad_norm"]),
        ("entropy", ["entropy"]),
        ("response length mean", ["response_length_mean"]),
        ("truncated fraction (responses at the length limit)", ["truncated_frac"]),
    ],
    "clipping": [
        ("token ratio outside the band, by bound and advantage sign",
         ["tok_oob_low_neg_frac", "tok_oob_low_pos_frac", "tok_oob_high_neg_frac", "tok_oob_high_pos_frac"]),
        ("sequence ratio outside the band",
         ["seq_oob_low_neg_frac", "seq_oob_low_pos_frac", "seq_oob_high_neg_frac", "seq_oob_high_pos_frac"]),
        ("verl pg_clipfrac / dual-clip pg_clipfrac_lower", ["pg_clipfrac", "pg_clipfrac_lower"]),
        ("sequence ratio s_i: min / mean / max", ["seq_ratio_min", "seq_ratio_mean", "seq_ratio_max"]),
    ],
    "kl": [
        ("policy-update KL: k1 ppo_kl, k3", ["ppo_kl", "ppo_kl_k3"]),
        ("KL to the reference: k1 / k2 / k3", ["kl_ref_k1", "kl_ref_k2", "kl_ref_k3"]),
        ("negative-advantage low-IS: fraction, KL share; top-1% KL share",
         ["neg_adv_low_is_frac", "neg_adv_low_is_kl_share", "kl_top1pct_share"]),
        ("training-inference mismatch: k1 / k3 / chi2", ["mismatch_k1", "mismatch_k3", "mismatch_chi2"]),
        ("mismatch extremes: max |lp_old - lp_roll|, max |p_old - p_roll|",
         ["mismatch_log_abs_max", "mismatch_prob_abs_max"]),
        ("p_old / p_roll Pearson correlation", ["mismatch_prob_corr"]),
        ("retokenization mismatch fraction", ["retok_mismatch_frac"]),
    ],
    "advantages": [
        ("groups with zero reward std (no GRPO signal)", ["zero_std_group_frac"]),
        ("advantage sign fractions", ["adv_pos_frac", "adv_neg_frac", "adv_zero_frac"]),
        ("reward mean / std / mean within-group std", ["reward_mean", "reward_std", "group_reward_std_mean"]),
        ("token advantage mean / std", ["adv_mean", "adv_std"]),
    ],
    "entropy": [
        ("entropy", ["entropy"]),
        ("Cov(logp, A) (sustained > 0 predicts entropy collapse)", ["cov_logp_adv"]),
        ("mean logp", ["logp_mean"]),
        ("response length mean / max", ["response_length_mean", "response_length_max"]),
        ("truncated fraction", ["truncated_frac"]),
    ],
    "turns": [
        ("ATPO turn ratio s_ik: min / max", ["turn_ratio_min", "turn_ratio_max"]),
        ("turns outside the band", ["turn_oob_low_frac", "turn_oob_high_frac"]),
        ("AT2PO turn entropy H_turn", ["turn_entropy_mean"]),
    ],
}


PANELS = {view: [SCORE_PANEL] + panels for view, panels in PANELS.items()}


def metrics_of(view: str) -> list[str]:
    return list(dict.fromkeys(m for _, ms in PANELS[view] for m in ms))


def series(source: RunSource, runs: Sequence[str], view: str, max_points: int = MAX_POINTS) -> dict:
    metrics = metrics_of(view)
    return {name: source.cached(name, ("series", view, max_points),
                                lambda run: queries.step_series(run, metrics, max_points)) for name in runs}


def bands(source: RunSource, name: str) -> tuple[list[tuple[int, int, str]], str]:
    """Alert-state bands of the focus run (from the detectors' alert_timeline) and a note if degraded."""
    t, note = source.cached(name, ("timeline",), detectors_bridge.timeline)
    return queries.state_segments(t), note


def collapse_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("collapse",), detectors_bridge.collapse)


def decline_step(source: RunSource, name: str) -> int | None:
    return source.cached(name, ("decline",), detectors_bridge.decline)


def render_panels(source: RunSource, runs: Sequence[str], view: str, with_bands: bool = True
                  ) -> tuple[go.Figure, str]:
    """(figure, note) for a step-series view over the selected runs: alert bands of every run (its own colour in
    compare mode), the collapse (or decline) step of each run as a vertical line."""
    if not runs:
        return figures.message_figure("no run selected"), ""
    data = series(source, runs, view)
    segs, notes = {}, []
    for name in runs if with_bands else []:
        segs[name], note = bands(source, name)
        notes.append(note)
    note = next((n for n in notes if n), "")
    if all(df.empty for df in data.values()):
        return figures.message_figure("no steps recorded yet"), note
    if with_bands:  # the alert view's findings are the slowest query: compute them while the user reads this
        source.warm(runs[0], ("findings",), detectors_bridge.findings)
    title = ""
    if any(segs.values()):
        title = (f"shaded: alert state of {runs[0]} (yellow watch, orange warning, red critical)" if len(runs) == 1
                 else "shaded: each run's alert state in the run's colour (darker: more severe)")
    collapse = {name: collapse_step(source, name) for name in runs}
    decline = {name: decline_step(source, name) for name in runs}
    return figures.panel_figure(data, PANELS[view], bands=segs, title=title, collapse=collapse,
                                decline=decline), note


def turns_missing(source: RunSource, runs: Sequence[str]) -> str:
    """A message when none of the selected runs recorded turns (the Turns tab shows it instead of empty panels)."""
    if not runs:
        return "no run selected"
    data = series(source, runs, "turns")
    heat = [source.cached(n, ("turn_heatmap",), queries.turn_heatmap) for n in runs]
    # the turn panels proper: the task score that leads every view says nothing about turns
    turn_panels = [pnl for pnl in PANELS["turns"] if pnl != SCORE_PANEL]
    if any(h is not None and not h.empty for h in heat) or figures.recorded_panels(data, turn_panels)[0]:
        return ""
    return (f"Turns were not recorded for {', '.join(runs)}: the run has no turn rows (single-turn samples, or "
            "turn_ids were not given to record_rollout / record_update).")


def render_ratios(source: RunSource, runs: Sequence[str], level: str) -> go.Figure:
    if not runs:
        return figures.message_figure("no run selected")
    name = runs[0]
    hist = source.cached(name, ("ratio_hist", level), lambda run: queries.ratio_histogram(run, level))
    manifest = source.cached(name, ("manifest",), lambda run: dict(getattr(run, "manifest", {}) or {}))
    return figures.ratio_heatmap_figure(hist, queries.band_edges(manifest, level))


def render_turn_heatmap(source: RunSource, runs: Sequence[str]) -> go.Figure:
    if not runs:
        return figures.message_figure("no run selected")
    return figures.turn_heatmap_figure(source.cached(runs[0], ("turn_heatmap",), queries.turn_heatmap))
