"""Families of outcome series for the alert floor's property tests and the false-alarm budget: a score on several
scales, with noise, a log interval, and a collapse of several shapes at several places (issue: "never silent, by
construction"). Plain numpy, seeded: the same draw gives the same series."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCALES = ("unit", "pm1", "zero2", "percent", "sum")
SHAPES = ("none", "sudden", "sliding", "stepwise", "zero", "noisy_floor")
PLACES = ("early", "mid", "late")


@dataclass(frozen=True)
class Family:
    n: int              # logged points
    interval: int       # optimizer steps between logged points
    noise: float        # sd of one point on the [0, 1] scale (or binomial: samples per point)
    level: float        # the score's plateau on [0, 1]
    shape: str          # SHAPES
    place: str          # PLACES: 5 points in, mid-run, in the last 10 points
    slide: int          # steps a sliding collapse takes (20..100)
    scale: str          # SCALES
    binomial: int = 0   # > 0: the score is the mean of this many 0/1 samples (one prompt x 8 samples: 8)
    seed: int = 0


def unit_series(f: Family) -> np.ndarray:
    """The score on [0, 1] before the scale: plateau (after a short climb), then the collapse."""
    rng = np.random.default_rng(f.seed)
    p = np.full(f.n, f.level)
    climb = min(5, f.n // 4)
    p[:climb] = np.linspace(f.level / 2, f.level, climb) if climb else p[:climb]
    c = {"early": 5, "mid": f.n // 2, "late": f.n - 1 - int(rng.integers(0, 10))}[f.place]
    c = int(np.clip(c, 1, f.n - 1))
    tail = f.n - c
    if f.shape in ("sudden", "zero"):
        p[c:] = 0.0 if f.shape == "zero" else f.level * 0.1
    elif f.shape == "noisy_floor":
        p[c:] = 0.05
    elif f.shape == "sliding":
        pts = max(1, f.slide // f.interval)
        p[c:] = f.level * np.clip(1.0 - np.arange(1, tail + 1) / pts, 0.0, 1.0)
    elif f.shape == "stepwise":
        pts = max(2, f.slide // f.interval)
        steps = np.floor(np.arange(tail) / max(1, pts // 3)) + 1
        p[c:] = f.level * np.clip(1.0 - steps / 3.0, 0.0, 1.0)
    if f.binomial:
        y = rng.binomial(f.binomial, np.clip(p, 0, 1)) / f.binomial
    else:
        y = np.clip(p + f.noise * rng.standard_normal(f.n), 0.0, 1.0)
    if f.shape == "zero":
        y[c:] = 0.0  # exactly zero, as a loop whose policy stopped answering logs it
    return y


def scaled(y: np.ndarray, scale: str, seed: int = 0) -> np.ndarray:
    """The [0, 1] score on the scale a trainer logs: +1/-1, [0, 2] (two reward terms), percent, or an unbounded
    sum of reward terms with an offset (a penalty that can make it negative)."""
    if scale == "unit":
        return y
    if scale == "pm1":
        return 2.0 * y - 1.0
    if scale == "zero2":
        return 2.0 * y
    if scale == "percent":
        return 100.0 * y
    if scale == "sum":
        off = np.random.default_rng(seed + 7).uniform(-3.0, 3.0)
        return 7.5 * y + off
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


def series(f: Family) -> tuple[np.ndarray, np.ndarray]:
    """(steps, score as logged)."""
    steps = np.arange(f.n) * f.interval
    return steps, scaled(unit_series(f), f.scale, f.seed)
