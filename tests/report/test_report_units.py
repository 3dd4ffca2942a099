"""Unit tests of the report's pure parts, against hand-worked cases and direct numpy computations."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from arldiag.findings import Finding
from arldiag.report import data as D
from arldiag.report.dimensions import config_value
from arldiag.report.downsample import downsample_xy, minmax_indices
from arldiag.report.figures import alert_segments
from arldiag.report.recommend import evidence_line, recommendations
from arldiag.report.signals import TIMELINE, resolve
from arldiag.verdict import verdict


# ---------------------------------------------------------------- downsampling
def test_minmax_keeps_every_bucket_extreme():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(1003)
    y[[5, 500, 900]] = np.nan
    y[321] = 50.0   # a one-step spike must survive
    y[777] = -40.0
    idx = minmax_indices(y, 100)
    assert len(idx) <= 100
    assert 321 in idx and 777 in idx
    finite = np.flatnonzero(np.isfinite(y))
    width = math.ceil(finite.size / 50)
    for b in range(50):
        members = finite[b * width:(b + 1) * width]
        if members.size:
            assert members[np.argmin(y[members])] in idx
            assert members[np.argmax(y[members])] in idx
    assert np.all(np.diff(idx) > 0) and np.isfinite(y[idx]).all()


def test_minmax_small_input_and_bad_args():
    y = np.array([1.0, np.nan, 3.0])
    assert minmax_indices(y, 10).tolist() == [0, 2]
    x, yy = downsample_xy(np.array([10, 11, 12]), y, 10)
    assert x.tolist() == [10, 12] and yy.tolist() == [1.0, 3.0]
    with pytest.raises(ValueError, match="max_points"):
        minmax_indices(y, 1)
    with pytest.raises(ValueError, match="same shape"):
        downsample_xy(np.arange(2), y, 10)


# ---------------------------------------------------------------- signals
def test_resolve_prefers_own_names_then_user_aliases():
    cols = {"success_frac", "success_rate", "user/entropy", "actor/grad_norm"}
    got = resolve([s for p in TIMELINE for s in p.signals], cols)
    assert got["success"] == "success_rate"        # first candidate wins
    assert got["entropy"] == "user/entropy"        # imported metric clashing with a derived name
    assert got["grad_norm"] == "actor/grad_norm"   # verl alias
    assert "ppo_kl" not in got


def test_config_value_nested_and_suffix():
    cfg = {"actor_rollout_ref": {"actor": {"loss_agg_mode": "seq-mean-token-mean", "clip_ratio": 0.2}}, "lr": 1}
    assert config_value(cfg, ("loss_agg", "loss_agg_mode")) == "seq-mean-token-mean"
    assert config_value(cfg, ("lr",)) == 1
    assert config_value(cfg, ("nothing",)) is None


# ---------------------------------------------------------------- verdict
def _f(det, status="fired", sev="warning", step=None, **kw):
    return Finding(detector=det, status=status, severity=sev, first_step=step, title=f"{det} title", **kw)


def _pairs(df):
    return list(zip(df["step"], df["state"]))


def test_verdict_collapsed_with_precursor_and_lead_time():
    """The precursor is the first non-lagging finding at warning or above inside the alert episode open at the
    collapse (steps 30..44 here): the watch-level finding at 27 and the warning one before the episode are not."""
    fs = [_f("success_collapse", sev="critical", step=20),     # lagging: never the precursor
          _f("grad_norm_spike", sev="critical", step=38),
          _f("neg_adv_low_is", sev="watch", step=27),          # watch: not a precursor
          _f("kl_ref_drift", sev="warning", step=12),          # fell back before the episode: not a precursor
          _f("ppo_kl_spike", sev="info", step=10),             # info is not a precursor
          _f("clip_pressure", status="quiet", step=5)]
    tl = pd.DataFrame({"step": range(50), "state": ["ok"] * 30 + ["warning"] * 10 + ["critical"] * 10})
    v = verdict(fs, 44, _pairs(tl), lagging={"success_collapse"})
    assert v.status == "collapsed" and v.collapse_step == 44 and v.episode == (30, 44)
    assert v.first_precursor["detector"] == "grad_norm_spike"
    assert v.first_precursor["step"] == 38 and v.first_precursor["lead_time"] == 6
    assert v.first_warning_step == 30 and v.warning_lead_time == 14
    assert v.max_state == "critical" and v.n_fired == 5


def test_verdict_at_risk_and_healthy():
    # a finding at warning severity alone does not make a run at risk: the alert state does
    v = verdict([_f("kl_ref_drift", sev="warning", step=3)], None, n_steps=20, warmup=10)
    assert v.status == "healthy"
    v = verdict([_f("kl_ref_drift", sev="watch", step=3)], None, _pairs(pd.DataFrame({"step": [0, 1],
                                                                                      "state": ["ok", "watch"]})))
    assert v.status == "healthy" and v.max_state == "watch"
    v = verdict([_f("kl_ref_drift", sev="warning", step=1)], None,
                _pairs(pd.DataFrame({"step": [0, 1], "state": ["ok", "warning"]})))
    assert v.status == "at risk" and v.first_precursor["step"] == 1 and v.first_precursor["lead_time"] is None


def test_verdict_declined_counts_leads_to_the_decline():
    tl = _pairs(pd.DataFrame({"step": range(70), "state": ["ok"] * 35 + ["warning"] * 35}))
    v = verdict([_f("kl_ref_drift", sev="warning", step=40)], None, tl, decline=60)
    assert v.status == "declined" and v.collapse_step is None and v.decline_step == 60
    assert v.first_precursor["lead_time"] == 20 and v.warning_lead_time == 25
    assert v.summary.startswith("Declined: the outcome never") and "20 steps before the decline" in v.summary
    v = verdict([], 44, tl, decline=60)  # a collapse wins over a decline a caller passed anyway
    assert v.status == "collapsed" and v.decline_step is None and v.warning_lead_time == 9


# ---------------------------------------------------------------- recommendations
def test_recommendations_merge_and_name_evidence():
    fs = [_f("grad_norm_spike", sev="warning", step=40, recommendation="Lower the LR.",
             evidence={"peak_value": 18.5, "series": {"step": [1]}, "metric": "grad_norm"}),
          _f("ppo_kl_spike", sev="critical", step=30, recommendation="Lower the LR."),
          _f("mismatch_drift", sev="watch", step=12),
          _f("entropy_collapse", status="quiet")]
    recs = recommendations(fs)
    assert [r.text for r in recs][0] == "Lower the LR."
    assert recs[0].severity == "critical" and recs[0].detectors == ["ppo_kl_spike", "grad_norm_spike"]
    assert recs[0].first_step == 30
    assert "grad_norm_spike (warning from step 40)" in recs[0].evidence[1]
    assert "peak_value=18.5" in recs[0].evidence[1] and "series" not in recs[0].evidence[1]
    assert len(recs) == 2 and "TIS" in recs[1].text  # default advice of the mismatch family
    assert recs[1].evidence == [evidence_line(fs[2])]


def test_no_recommendation_without_fired_findings():
    assert recommendations([_f("x", status="quiet"), _f("y", status="skipped")]) == []


# ---------------------------------------------------------------- figures helpers
def test_alert_segments():
    tl = pd.DataFrame({"step": [0, 1, 2, 3, 4, 5], "state": ["ok", "watch", "watch", "warning", "ok", "critical"]})
    assert alert_segments(tl) == [(0.5, 2.5, "watch"), (2.5, 3.5, "warning"), (4.5, 5.5, "critical")]
    assert alert_segments(None) == []


# ---------------------------------------------------------------- data gathering
def test_compare_windows_hand_worked():
    steps = pd.DataFrame({"step": np.arange(20), "v": np.arange(20, dtype=float)})
    c = D.compare_windows(steps, {"k": "v"}, collapse=15, window=3)
    assert c.windows == ((0, 11), (12, 18)) and c.rows["k"] == (5.5, 15.0)
    c = D.compare_windows(steps, {"k": "v"}, collapse=None, window=3)
    assert c.labels == ("early", "late") and c.rows["k"] == (3.0, 16.0)


def _parquet(run_dir, table):
    return ds.dataset(f"{run_dir}/{table}", format="parquet").to_table().to_pandas()


def test_ratio_heatmap_matches_numpy(collapse_run):
    import arldiag

    run = arldiag.open_run(collapse_run)
    band = D.log_band(run.manifest["seq_clip"])
    hm = D.ratio_heatmap(run, run.names[0], "sequences", "seq_log_ratio", band, max_x=7, n_y=9)
    seq = _parquet(collapse_run, "sequences")
    seq = seq[np.isfinite(seq.seq_log_ratio) & (seq.advantage != 0)]
    s0, s1 = seq.step.min(), seq.step.max()
    width = math.ceil((s1 - s0 + 1) / 7)
    n_x = math.ceil((s1 - s0 + 1) / width)
    L, bw = hm.limit, 2 * hm.limit / 9
    assert L >= 1.5 * abs(band[0]) - 1e-12  # the clip band is always inside the plotted range
    xb = np.minimum((seq.step.to_numpy() - s0) // width, n_x - 1)
    yb = np.clip(np.floor((np.clip(seq.seq_log_ratio.to_numpy(np.float64), -L, L) + L) / bw), 0, 8).astype(int)
    for sign, sel in (("neg", seq.advantage.to_numpy() < 0), ("pos", seq.advantage.to_numpy() > 0)):
        m = np.zeros((9, n_x))
        np.add.at(m, (yb[sel], xb[sel]), 1)
        assert hm.counts[sign] == sel.sum()
        expect = m / np.where(m.sum(0) > 0, m.sum(0), 1)
        np.testing.assert_allclose(hm.z[sign], expect, atol=1e-12)
    np.testing.assert_array_equal(hm.x, s0 + width * np.arange(n_x))


def test_top_offenders_kl_share_and_tokens(collapse_run):
    import arldiag

    run = arldiag.open_run(collapse_run)
    offs = D.top_offenders(run, run.names[0], (41, 47), n=4)
    seq = _parquet(collapse_run, "sequences")
    tot = seq.groupby("step").ppo_kl_k3_sum.sum()
    assert len(offs) == 4 and all(41 <= o.step <= 47 for o in offs)
    assert sum(o.neg_adv_low_is for o in offs) >= 2  # half of them come from the neg-adv low-IS set
    top = seq[(seq.step >= 41) & (seq.step <= 47)].ppo_kl_k3_sum.max()
    assert max(o.kl_k3_sum for o in offs) == pytest.approx(top, rel=1e-6)
    for o in offs:
        assert o.kl_share == pytest.approx(o.kl_k3_sum / tot[o.step], rel=1e-5)
        assert o.tokens is not None and len(o.tokens) == o.n_tokens  # anomalous sequences keep their tokens
        labels, mode = D.token_labels(o)
        assert mode == "text" and labels == o.text.split()


def test_token_labels_modes():
    t = pd.DataFrame({"pos": [0, 1], "token_id": [7, 9], "log_ratio": [0.1, -0.2]})
    o = D.Offender(1, 0, 5, -1.0, 0.5, 1.0, 0.1, True, 2, text="a b", tokens=t)
    assert D.token_labels(o) == (["a", "b"], "text")
    assert D.token_labels(o, decode=lambda i: f"<{i}>") == (["<7>", "<9>"], "decoded")
    o.text = "three words here"
    assert D.token_labels(o) == (["#7", "#9"], "ids")
    o.tokens = t.assign(token_id=[-1, -1])
    assert D.token_labels(o) == (["@0", "@1"], "positions")
    o.tokens = None
    assert D.token_labels(o) == ([], "none")


def test_dimension_sections_from_manifest_and_data():
    from arldiag.report.dimensions import sections

    steps = pd.DataFrame({"step": np.arange(10), "zero_std_group_frac": np.full(10, 0.5),
                          "adv_zero_frac": np.full(10, 0.5), "cov_logp_adv": np.linspace(-0.1, 0.3, 10)})
    cols = {"zero_std_group_frac": "zero_std_group_frac", "adv_zero_frac": "adv_zero_frac",
            "cov_logp_adv": "cov_logp_adv"}
    manifest = {"algorithm": "sapo", "clip": [0.2, 0.2], "seq_clip": [0.2, 0.2],
                "config": {"trainer": {"loss_agg": "token-mean", "adv_estimator": "grpo", "dynamic_filter": False}}}
    fired = Finding("zero_std_groups", "fired", "warning", first_step=2, title="zero-variance groups")
    secs = {s.key: s for s in sections(manifest, steps, cols, [fired])}
    assert list(secs) == ["loss_aggregation", "is_clipping", "advantage_design", "dynamic_filtering"]
    assert "loss aggregation: token-mean" in secs["loss_aggregation"].did
    assert not secs["loss_aggregation"].has_data  # no length metrics in this run
    assert any("sapo is a tolerant loss" in d for d in secs["is_clipping"].did)
    assert not any("sequence-level clipping" in d for d in secs["is_clipping"].did)  # seq_clip == clip: default
    assert "50% of samples carry no learning signal (A == 0) on average." in secs["advantage_design"].shows
    assert any(s.startswith("Cov(logp, A) is positive on average") for s in secs["advantage_design"].shows)
    assert any(s.startswith("50% of groups have zero reward variance") for s in secs["dynamic_filtering"].shows)
    assert secs["dynamic_filtering"].findings == ["zero_std_groups (warning from step 2): zero-variance groups"]
