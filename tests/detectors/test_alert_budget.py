"""The false-alarm budget (docs/detectors.md "False-alarm budget"): a one-point spike of any size in any precursor
metric opens at most a watch; one precursor family alone warns only while the outcome weakens, with a second family,
or after it held critical for solo_critical_steps; the declared budget holds on the generated stable families."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from arldiag.detectors.engine import Evaluator
from arldiag.detectors.risk import Corroboration, RiskConfig
from arldiag.evaluation.families import STABLE, RunDraw, draws, stable_run
from arldiag.levels import rank

from _detect_cases import healthy

PRECURSOR_COLUMNS = ("grad_norm", "ppo_kl", "ppo_kl_k3", "kl_ref_k3", "entropy", "response_length_mean",
                     "truncated_frac", "pg_clipfrac", "neg_adv_low_is_frac", "tok_oob_frac", "kl_top1pct_share",
                     "mismatch_k3", "zero_std_group_frac", "cov_logp_adv")


def max_state(rows) -> int:
    ev = Evaluator()
    return max(rank(ev.update(int(r["step"]), r).state) for r in rows)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(col=st.sampled_from(PRECURSOR_COLUMNS), at=st.integers(15, 110), factor=st.floats(3.0, 1000.0),
       down=st.booleans(), interval=st.sampled_from([1, 2, 5, 10]), seed=st.integers(0, 50))
def test_a_one_point_spike_opens_at_most_a_watch(col, at, factor, down, interval, seed):
    """The token-profile healthy run of the detector tests (every precursor input logged) with one point of one
    metric multiplied (or divided) by up to 1000: the state never passes watch, at any log interval."""
    rows = healthy(seed=seed)
    for i, r in enumerate(rows):
        r["step"] = i * interval
    base = rows[at][col]
    rows[at] = dict(rows[at], **{col: base / factor if down else (base if base else 1e-3) * factor})
    assert max_state(rows) <= rank("watch")


def test_the_healthy_run_itself_is_quiet():
    assert max_state(healthy()) <= rank("watch")


def test_one_family_alone_waits_for_its_hold_time():
    """The gate: one family while the outcome holds opens at most a watch until it has been critical for
    solo_critical_steps points (at least 2); at once with a second family or once the outcome weakens."""
    cfg = RiskConfig(corroborate=True, solo_critical_steps=4)
    g = Corroboration(cfg)
    assert [g.ceiling({"length_growth": 2}, holding=True) for _ in range(6)] == [1] * 6  # warning held: still a watch
    assert [g.ceiling({"length_growth": 3}, holding=True) for _ in range(5)] == [1, 1, 1, 3, 3]
    g = Corroboration(cfg)
    assert g.ceiling({"length_growth": 2, "kl_ref_drift": 2}, holding=True) == 3
    assert Corroboration(cfg).ceiling({"length_growth": 2}, holding=False) == 3
    g = Corroboration(RiskConfig(corroborate=True, solo_critical_steps=1))
    assert g.ceiling({"grad_norm_spike": 3}, holding=True) == 1  # one point is a spike, whatever the settings
    assert g.ceiling({"grad_norm_spike": 3}, holding=True) == 3


# Declared budget for the precursors on the generated stable families (arldiag.evaluation.families; the alert
# floor's own cost depends on the score's noise alone and is declared apart in docs/detectors.md): at most this
# share of stable runs warned by a precursor, and at most this many precursor episodes per 1,000 optimizer steps.
PRECURSOR_RUNS_WARNED = 0.10
PRECURSOR_EPISODES_PER_1000 = 0.2


def test_precursor_budget_on_generated_stable_families():
    warned = eps = steps_total = runs = 0
    for family in STABLE:
        for d in draws(family, 8, seed=11, n_range=(40, 300)):
            cols = stable_run(d)
            ev = Evaluator()
            names = [c for c in cols if c != "step"]
            prev, run_eps = 0, 0
            for i, s in enumerate(cols["step"]):
                res = ev.update(int(s), {c: float(cols[c][i]) for c in names})
                lv = rank(res.state)
                # an episode that a precursor opened (the floor and the score rule are the outcome itself)
                if lv >= 2 and prev < 2 and res.top not in ("collapse_floor", "score_collapse"):
                    run_eps += 1
                prev = lv
            runs += 1
            warned += run_eps > 0
            eps += run_eps
            steps_total += int(cols["step"][-1]) + d.interval
    assert warned / runs <= PRECURSOR_RUNS_WARNED, (warned, runs)
    assert 1000.0 * eps / steps_total <= PRECURSOR_EPISODES_PER_1000, (eps, steps_total)


def test_families_are_seeded():
    d = RunDraw("noise", 3, 50, 5)
    a, b = stable_run(d), stable_run(d)
    assert all(np.array_equal(a[k], b[k]) for k in a)
