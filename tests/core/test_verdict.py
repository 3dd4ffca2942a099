"""The one verdict (arldiag.verdict): each of the six words from a hand-built (step, state) series and findings, and
the first precursor inside the alert episode open at the collapse."""
from arldiag.findings import Finding, level_steps
from arldiag.verdict import (AT_RISK, COLLAPSED, DECLINED, HEALTHY, NO_SIGNAL, RECENT_ALERT_STEPS, TOO_SHORT,
                             alert_episode, verdict)


def _tl(states, start=0):
    return [(start + i, s) for i, s in enumerate(states)]


def _fired(name, severity, first, alarm=(), first_at=None):
    return Finding(detector=name, status="fired", severity=severity, first_step=first, title=name,
                   evidence={"alarm_intervals": [list(a) for a in alarm], "first_at": first_at or {}})


QUIET = [Finding(detector="entropy_blowup", status="quiet")]


def test_collapsed_and_declined():
    v = verdict(QUIET, 30, _tl(["ok"] * 40), n_steps=40, warmup=10)
    assert v.status == COLLAPSED and "step 30" in v.reason
    v = verdict(QUIET, None, _tl(["ok"] * 40), n_steps=40, warmup=10, decline=25)
    assert v.status == DECLINED and v.decline_step == 25


def test_no_signal_when_every_detector_is_skipped():
    skipped = [Finding(detector=n, status="skipped") for n in ("entropy_blowup", "kl_ref_drift")]
    v = verdict(skipped, None, _tl(["ok"] * 60), n_steps=60, warmup=10)
    assert v.status == NO_SIGNAL and "none of the 2 detectors" in v.reason


def test_at_risk_exactly_when_the_alert_state_is_at_warning_now_or_recently():
    n = 100
    # a finding at critical severity but an alert state that never left watch: healthy, not at risk
    crit = [_fired("entropy_blowup", "critical", 10, [(10, 12)])]
    v = verdict(crit, None, _tl(["ok"] * 50 + ["watch"] * 50), n_steps=n, warmup=10)
    assert v.status == HEALTHY and "never reached warning" in v.reason
    # at warning now
    v = verdict(crit, None, _tl(["ok"] * 95 + ["warning"] * 5), n_steps=n, warmup=10)
    assert v.status == AT_RISK and v.reason == "the alert state is warning now (step 99)"
    # back to ok, the last warning step exactly RECENT_ALERT_STEPS before the last step: still at risk
    last_warn = 99 - RECENT_ALERT_STEPS
    states = ["ok"] * 70 + ["critical"] * (last_warn - 70 + 1) + ["ok"] * RECENT_ALERT_STEPS
    v = verdict(crit, None, _tl(states), n_steps=n, warmup=10)
    assert v.status == AT_RISK and f"critical at step {last_warn}" in v.reason
    # one step earlier than that: healthy, and the reason says when the warning was
    states = ["ok"] * 70 + ["critical"] * (last_warn - 70) + ["ok"] * (RECENT_ALERT_STEPS + 1)
    v = verdict(crit, None, _tl(states), n_steps=n, warmup=10)
    assert v.status == HEALTHY and f"last reached warning at step {last_warn - 1}" in v.reason


def test_too_short_and_healthy():
    v = verdict(QUIET, None, _tl(["ok"] * 5), n_steps=5, warmup=10)
    assert v.status == TOO_SHORT and v.reason.startswith("5 logged steps, the detectors need 10")
    assert verdict(QUIET, None, _tl(["ok"]), n_steps=1, warmup=10).reason.startswith("1 logged step,")
    assert verdict(QUIET, None, _tl(["ok"] * 10), n_steps=10, warmup=10).status == HEALTHY


def test_alert_episode_open_at_a_step():
    tl = _tl(["ok", "warning", "ok", "ok", "warning", "critical", "critical", "ok"])
    assert alert_episode(tl, 6) == (4, 6)
    assert alert_episode(tl, 1) == (1, 1)
    assert alert_episode(tl, 3) is None and alert_episode(tl, 7) is None


def test_first_precursor_lies_inside_the_episode_open_at_the_collapse():
    """The rho0.30 case: an entropy blip at watch/critical that fell back long before (step 20), the episode that
    mattered from step 75; the precursor is the first finding at warning or above inside that episode."""
    tl = [(s, "ok") for s in range(0, 75, 5)] + [(s, "critical") for s in range(75, 125, 5)]
    blip = _fired("entropy_blowup", "critical", 20, [(20, 25), (90, 120)],
                  {"watch": 20, "warning": 20, "critical": 100})
    length = _fired("length_growth", "critical", 75, [(75, 120)], {"watch": 75, "warning": 75, "critical": 80})
    v = verdict([blip, length], 90, tl, n_steps=25, warmup=10)
    assert v.episode == (75, 90)
    assert v.first_precursor["detector"] == "length_growth" and v.first_precursor["step"] == 75
    assert v.first_precursor["lead_time"] == 15 and v.warning_lead_time == 15
    # a finding already at warning when the episode opened counts from the episode's first step, not from before
    early = _fired("kl_ref_drift", "warning", 60, [(60, 85)])
    v = verdict([blip, length, early], 90, tl, n_steps=25, warmup=10)
    p = v.first_precursor  # tie at 75: the more severe peak; its level at 75 is warning (critical from 80)
    assert (p["detector"], p["step"], p["severity"], p["peak_severity"]) == ("length_growth", 75, "warning", "critical")
    # no episode open at the collapse: no precursor is claimed
    v = verdict([blip], 90, [(s, "ok") for s in range(0, 125, 5)], n_steps=25, warmup=10)
    assert v.first_precursor is None and "no precursor is claimed" in v.summary


def test_level_steps_names_the_first_step_at_each_level():
    f = _fired("x", "critical", 20, first_at={"watch": 20, "warning": 75, "critical": 80})
    assert level_steps(f) == "watch at 20, warning at 75, critical at 80"
    assert level_steps(Finding(detector="y", status="fired", severity="warning", first_step=7)) == \
        "warning from step 7"


def test_sample_runs_at_risk_only_with_an_alert_at_warning():
    """The issue's check on the bundled runs: no run "at risk" whose alert state never reached warning (before:
    14 of the then 16 at risk, 13 of them with a worst state of ok or watch)."""
    from pathlib import Path

    from arldiag.fleet import fleet_table

    root = Path(__file__).resolve().parents[2] / "sample_runs"
    rows = fleet_table(root)
    assert len(rows) == sum((d / "run.json").is_file() for d in root.iterdir())  # every bundled run, none skipped
    for r in rows:
        assert r["verdict_reason"], r["name"]
        if r["verdict"] == AT_RISK:
            assert r["max_state"] in ("warning", "critical") and r["first_warning"] is not None, r


def test_trainer_of_a_run():
    from arldiag.detectors.advice import settings_of, trainer_of
    from arldiag.detectors.registry import advise

    assert trainer_of({"config": {"framework": "trl"}}) == "trl"
    assert trainer_of({"config": {"import_format": "csv", "renamed": {"completions/mean_length": "x"}}}) == "trl"
    assert trainer_of({"config": {"import_format": "csv", "renamed": {"actor/entropy": "entropy"}}}) == "verl"
    assert trainer_of({"config": {"algo": "grpo", "env": "calculator"}}) == "reference"
    assert trainer_of({"config": {"import_format": "csv", "renamed": {}}}) is None
    trl = advise("entropy_blowup", settings_of({"config": {"framework": "trl", "clip_high": 0.28}}))
    assert "TRL entropy_coef=0.0" in trl and "verl" not in trl and "reference trainer" not in trl
    anyone = advise("entropy_blowup", {"clip_high": 0.28})
    assert "verl actor_rollout_ref.actor.entropy_coeff=0" in anyone and "TRL entropy_coef=0.0" in anyone
