"""Generated step-scalar runs for the false-alarm budget and the alert floor (docs/detectors.md "False-alarm
budget"): stable families that look like trouble to a naive rule, and collapsing families, each a seeded draw.

A run is a dict of step columns (arldiag's names, as `arldiag import` writes them) over logged points every
``interval`` optimizer steps. The stable families, each a run that a user would not want warned:

* ``noise``: the task score on a plateau with noise (sd 0.01-0.45 on [0, 1], or the mean of 8 / 16 0/1 samples),
  the other metrics stationary with multiplicative noise;
* ``drift``: the score climbing slowly, entropy falling as the policy converges, KL to the reference growing;
* ``spike``: one logged point of the gradient norm 30-200x its level, or of the PPO KL, the KL to the reference or
  the response length, then back (a log written every k steps shows it once);
* ``length_rise``: responses growing 1.5-3x while the score rises (reasoning grows);
* ``kl_flat``: KL to the reference growing 10-40x while the score holds at its peak.

The collapsing families (``collapse``): the same runs whose score falls (sudden, sliding, to zero) at a random
point, with or without precursors (responses at the cap and entropy rising 10-40 steps before).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STABLE = ("noise", "drift", "spike", "length_rise", "kl_flat")
SPIKED = ("grad_norm", "ppo_kl", "kl_ref_k3", "response_length_mean")


@dataclass(frozen=True)
class RunDraw:
    family: str
    seed: int
    n: int           # logged points
    interval: int    # optimizer steps between logged points


def _base(rng: np.random.Generator, n: int, level: float) -> dict[str, np.ndarray]:
    """Stationary step metrics around typical GRPO magnitudes, with multiplicative noise."""
    mult = lambda sd: np.exp(sd * rng.standard_normal(n))  # noqa: E731
    return {
        "grad_norm": 0.3 * mult(0.25),
        "ppo_kl": 2e-3 * mult(0.4),
        "kl_ref_k3": 0.01 * mult(0.2),
        "entropy": 0.6 * mult(0.05),
        "response_length_mean": 250.0 * mult(0.05),
        "pg_clipfrac": 0.02 * mult(0.3),
        "lr": np.full(n, 1e-6),
        "reward_std": np.full(n, 0.3) * mult(0.1),
    }


def _score(rng: np.random.Generator, p: np.ndarray) -> np.ndarray:
    """The logged score for success probabilities ``p``: Gaussian noise (sd 0.01-0.45, clipped to [0, 1]) or the
    mean of 8 or 16 0/1 samples (one or two prompts a step)."""
    kind = rng.integers(0, 3)
    if kind == 0:
        return np.clip(p + rng.uniform(0.01, 0.45) * rng.standard_normal(p.size), 0.0, 1.0)
    k = (8, 16)[kind - 1]
    return rng.binomial(k, np.clip(p, 0.0, 1.0)) / k


def stable_run(d: RunDraw) -> dict[str, np.ndarray]:
    """One stable run of family ``d.family`` (STABLE): step columns, ``step`` included."""
    if d.family not in STABLE:
        raise ValueError(f"family must be one of {STABLE}, got {d.family!r}")
    rng = np.random.default_rng(d.seed)
    n = d.n
    level = rng.uniform(0.3, 0.9)
    cols = _base(rng, n, level)
    p = np.full(n, level)
    climb = max(3, n // 10)
    p[:climb] = np.linspace(level * 0.6, level, climb)
    ramp = np.linspace(0.0, 1.0, n)
    if d.family == "drift":
        p = np.clip(level * 0.7 + level * 0.4 * ramp, 0.0, 1.0)
        cols["entropy"] = cols["entropy"] * (1.0 - 0.6 * ramp)
        cols["kl_ref_k3"] = cols["kl_ref_k3"] * (1.0 + 5.0 * ramp)
    elif d.family == "spike":
        col = SPIKED[int(rng.integers(0, len(SPIKED)))]
        at = int(rng.integers(n // 4, n - 2))
        cols[col] = cols[col].copy()
        cols[col][at] *= rng.uniform(30.0, 200.0) if col != "response_length_mean" else rng.uniform(2.0, 4.0)
    elif d.family == "length_rise":
        p = np.clip(level * 0.7 + level * 0.3 * ramp, 0.0, 1.0)
        cols["response_length_mean"] = cols["response_length_mean"] * (1.0 + rng.uniform(0.5, 2.0) * ramp)
    elif d.family == "kl_flat":
        cols["kl_ref_k3"] = cols["kl_ref_k3"] * (1.0 + rng.uniform(9.0, 39.0) * ramp)
    cols["task_score"] = _score(rng, p)
    cols["step"] = np.arange(n) * d.interval
    return cols


def collapse_run(d: RunDraw) -> dict[str, np.ndarray]:
    """A run that learns, then collapses at a random point (sudden, sliding over 20-100 steps, or to exactly 0),
    with precursors 10-40 steps before on half of the draws (entropy rising, responses growing to a cap)."""
    rng = np.random.default_rng(d.seed)
    n = d.n
    level = rng.uniform(0.4, 0.9)
    cols = _base(rng, n, level)
    p = np.full(n, level)
    c = int(rng.integers(max(6, n // 5), max(7, n - 12)))
    shape = int(rng.integers(0, 3))
    if shape == 1:
        pts = max(1, int(rng.integers(20, 101)) // d.interval)
        p[c:] = level * np.clip(1.0 - np.arange(1, n - c + 1) / pts, 0.0, 1.0)
    else:
        p[c:] = 0.05 * level
    if rng.random() < 0.5:
        lead = max(2, int(rng.integers(10, 41)) // d.interval)
        a = max(1, c - lead)
        grow = np.clip((np.arange(n) - a) / max(1, c - a), 0.0, None)
        cols["entropy"] = cols["entropy"] * (1.0 + 1.5 * np.minimum(grow, 2.0))
        cols["response_length_mean"] = np.minimum(cols["response_length_mean"] * (1.0 + grow), 1024.0)
    y = _score(rng, p)
    if shape == 2:
        y[c:] = 0.0
    cols["task_score"] = y
    cols["step"] = np.arange(n) * d.interval
    return cols


def draws(family: str, count: int, seed: int = 0, n_range=(40, 600), intervals=(1, 2, 5, 10)) -> list[RunDraw]:
    """``count`` seeded draws of a family: lengths in ``n_range`` logged points, log intervals from ``intervals``."""
    rng = np.random.default_rng([seed, STABLE.index(family) + 1 if family in STABLE else 0])
    return [RunDraw(family, int(rng.integers(0, 2 ** 31)), int(rng.integers(*n_range)),
                    int(rng.choice(intervals))) for _ in range(count)]
