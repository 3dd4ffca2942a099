"""The timeline's panel layout, without plotly: which signals share a panel (split by scale), which are left out
(flat, or a repeat of another), so the Markdown and JSON report (base install) name the same panels and omissions as
the HTML figure drawn by figures.py."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from arldiag.views import catalog as S
from arldiag.views.series import series


def _same_series(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and np.allclose(a[1], b[1], equal_nan=True)


def flat(runs: Sequence, key: str) -> bool:
    """Zero or missing at every step of every run: a signal the run does not have (e.g. the mask counter of a run
    without the mask), which would be a flat line on a -1..1 axis."""
    return all(not np.any(np.nan_to_num(series(r.steps, r.cols[key])[1], nan=0.0)) for r in runs if key in r.cols)


def hidden_signals(runs: Sequence, keys: Sequence[str]) -> dict[str, str]:
    """{key: why} of the signals (in ``keys`` order) a figure leaves out: flat ones (``flat``), and those whose series
    in the first run repeats an earlier one (an imported run's task score copied from its reward would draw the same
    curve twice)."""
    main, seen, out = runs[0], {}, {}
    for key in keys:
        if flat(runs, key):
            out[key] = "zero or missing at every step"
            continue
        if key not in main.cols:
            continue
        xy = series(main.steps, main.cols[key])
        same = next((k for k, s in seen.items() if _same_series(xy, s)), None)
        if same is not None:
            label = S.BY_KEY[same].label if same in S.BY_KEY else same
            out[key] = f"the same series as {label}"
        else:
            seen[key] = xy
    return out


def timeline_panels(runs: Sequence) -> list:
    """[(title, [(index, signal)], log_y)] of the catalog's TIMELINE panels split by scale, before hiding."""
    return [(title, sigs, p.log_y) for p in S.TIMELINE for title, sigs in split_by_scale(runs, p)]


def distinct_panels(runs: Sequence, panels: list) -> list:
    """The panels without the hidden signals (``hidden_signals``); panels left empty dropped."""
    hidden = hidden_signals(runs, [sig.key for _, sigs, _ in panels for _, sig in sigs])
    out = []
    for title, sigs, log_y in panels:
        keep = [(j, sig) for j, sig in sigs if sig.key not in hidden]
        if keep:
            out.append((title if len(keep) == len(sigs) else _title(title, keep), keep, log_y))
    return out


SCALE_RATIO = 10.0  # signals whose typical magnitudes differ more than this get panels of their own


def _scale(runs: Sequence, key: str) -> float:
    """Typical magnitude of a signal: the 95th percentile of |y| over the runs (0 for an all-zero series)."""
    ys = [np.abs(series(r.steps, r.cols[key])[1]) for r in runs if key in r.cols]
    y = np.concatenate(ys) if ys else np.zeros(0)
    y = y[np.isfinite(y)]
    return float(np.quantile(y, 0.95)) if y.size else 0.0


def split_by_scale(runs: Sequence, panel: S.Panel) -> list[tuple[str, list[tuple[int, S.Signal]]]]:
    """A panel's signals grouped so that no group spans more than SCALE_RATIO in magnitude (ppo_kl ~0.07 next to
    kl_ref_k3 ~3 would be a flat line at zero): [(title, [(index in the panel, signal)])], largest scale first.
    All-zero signals join the group of the smallest scale."""
    present = [(j, sig, _scale(runs, sig.key)) for j, sig in enumerate(panel.signals)
               if any(sig.key in r.cols for r in runs)]
    nonzero = sorted((t for t in present if t[2] > 0), key=lambda t: -t[2])
    groups: list[list[tuple[int, S.Signal, float]]] = []
    for t in nonzero:
        if groups and groups[-1][0][2] <= SCALE_RATIO * t[2]:
            groups[-1].append(t)
        else:
            groups.append([t])
    zeros = [t for t in present if t[2] == 0]
    if not groups:
        groups = [zeros] if zeros else []
    else:
        groups[-1].extend(zeros)
    if len(groups) <= 1:
        return [(panel.title, [(j, sig) for j, sig, _ in sorted(g, key=lambda t: t[0])]) for g in groups]
    return [(f"{panel.title}: {', '.join(sig.label for _, sig, _ in sorted(g, key=lambda t: t[0]))}",
             [(j, sig) for j, sig, _ in sorted(g, key=lambda t: t[0])]) for g in groups]


def _title(title: str, keep: list) -> str:
    """A split panel's title (split_by_scale: "Panel: a, b, c") naming only the signals kept."""
    head = title.split(": ", 1)[0]
    return head if ": " not in title else f"{head}: {', '.join(sig.label for _, sig in keep)}"
