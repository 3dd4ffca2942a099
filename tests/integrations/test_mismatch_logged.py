"""The training-inference mismatch trainers log (verl rollout_corr/*, TRL sampling/*) reaches arldiag's mismatch
metrics with the definitions docs/schema.md gives, through `arldiag import` and a live ``record_step``; verl's values
come from verl's own rollout-correction helper, TRL's (its code path needs vLLM) by hand after grpo_trainer.py;
each is checked against an independent numpy formula. mismatch_drift reads them and stays quiet on healthy series."""
import json
from pathlib import Path

import numpy as np
import pytest

from arldiag.detectors.batch import evaluate_run, steps_frame
from arldiag.detectors.mismatch import abs_to_k3
from arldiag.store.reader import open_run
from integrations.logfiles import REAL, import_log, write_csv
from integrations.need import need

needs_real = pytest.mark.skipif(not (REAL / "labels.json").exists(), reason="shared/real_runs not beside the repo")
LENGTHS = (7, 5, 3, 6)


def _logprobs(seed: int, spread: float):
    """(lp_old, lp_roll, mask) as float64 numpy [B, T]: engine log-probs and the trainer's, ``spread`` nats apart."""
    rng = np.random.default_rng(seed)
    roll = -rng.uniform(0.05, 3.0, (len(LENGTHS), max(LENGTHS)))
    old = roll + spread * rng.standard_normal(roll.shape)
    mask = (np.arange(max(LENGTHS))[None, :] < np.array(LENGTHS)[:, None]).astype(float)
    return old, roll, mask


def _by_hand(old, roll, mask, cap=2.0, low=0.5):
    """The docs/schema.md definitions in numpy (d = lp_old - lp_roll, token means over the mask, i a sequence)."""
    d, m = (old - roll), mask.astype(bool)
    tok = d[m]
    seq_mean = np.array([d[i, m[i]].mean() for i in range(len(d))])
    seq_sum = np.array([d[i, m[i]].sum() for i in range(len(d))])
    w = np.minimum(np.exp(tok), cap)
    return {"mismatch_k1": float(np.mean(-tok)), "mismatch_k3": float(np.mean(np.exp(tok) - tok - 1)),
            "mismatch_chi2": float(np.mean(np.exp(2 * tok)) - 1), "mismatch_chi2_seq": float(np.mean(np.exp(2 * seq_sum)) - 1),
            "mismatch_log_ppl_diff": float(np.mean(-seq_mean)), "mismatch_log_ppl_abs_diff": float(np.mean(np.abs(seq_mean))),
            "mismatch_ppl_ratio": float(np.mean(np.exp(-seq_mean))), "mismatch_is_mean": float(w.mean()),
            "mismatch_is_max": float(w.max()), "mismatch_is_min": float(w.min()),
            "mismatch_is_high_frac": float(np.mean(np.exp(tok) > cap)),
            "mismatch_is_low_frac": float(np.mean(np.exp(tok) < low)),
            "mismatch_log_abs_max": float(np.abs(tok).max()), "mismatch_log_abs_mean": float(np.abs(tok).mean())}


def _verl_metrics(old, roll, mask) -> dict:
    torch = need("torch")
    helper = need("verl.trainer.ppo.rollout_corr_helper")
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    _, _, metrics = helper.compute_rollout_correction_and_rejection_mask(
        t(old), t(roll), t(mask), rollout_is="token", rollout_is_threshold=2.0)
    return metrics


VERL_NAMES = {"rollout_corr/kl": "mismatch_k1", "rollout_corr/k3_kl": "mismatch_k3",
              "rollout_corr/chi2_token": "mismatch_chi2", "rollout_corr/chi2_seq": "mismatch_chi2_seq",
              "rollout_corr/log_ppl_diff": "mismatch_log_ppl_diff",
              "rollout_corr/log_ppl_abs_diff": "mismatch_log_ppl_abs_diff", "rollout_corr/ppl_ratio": "mismatch_ppl_ratio",
              "rollout_corr/rollout_is_mean": "mismatch_is_mean", "rollout_corr/rollout_is_max": "mismatch_is_max",
              "rollout_corr/rollout_is_min": "mismatch_is_min",
              "rollout_corr/rollout_is_ratio_fraction_high": "mismatch_is_high_frac",
              "rollout_corr/rollout_is_ratio_fraction_low": "mismatch_is_low_frac"}


def test_verl_rollout_corr_import_equals_definitions(tmp_path):
    rows, expect = [], {}
    for step in range(1, 4):
        old, roll, mask = _logprobs(step, spread=0.4 * step)
        m = _verl_metrics(old, roll, mask)
        rows.append({"step": step, "critic/score/mean": 0.5, **{k: m[k] for k in VERL_NAMES}})
        expect[step] = _by_hand(old, roll, mask)
        # verl's helper and the numpy definitions agree (the helper's +-20 clamp is far away here)
        for k, name in VERL_NAMES.items():
            assert m[k] == pytest.approx(expect[step][name], rel=1e-7, abs=1e-12), k
    assert any(e["mismatch_is_high_frac"] > 0 for e in expect.values())  # the threshold cut something
    write_csv(tmp_path / "verl.csv", rows)
    msg = import_log(tmp_path / "verl.csv", tmp_path / "run")
    assert "rollout_corr/k3_kl -> mismatch_k3" in msg and "not read by any detector: rollout_corr" not in msg
    run = open_run(str(tmp_path / "run"))
    df = steps_frame(run, run.names[0]).set_index("step")
    for step, e in expect.items():
        for name in VERL_NAMES.values():
            assert df.loc[step, name] == pytest.approx(e[name], rel=1e-7, abs=1e-12), (step, name)


def test_verl_masked_fraction_icepop_and_rejection():
    old, roll, mask = _logprobs(7, spread=0.8)
    torch = need("torch")
    helper = need("verl.trainer.ppo.rollout_corr_helper")
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    _, _, m = helper.compute_rollout_correction_and_rejection_mask(t(old), t(roll), t(mask), rollout_is="token",
                                                                   rollout_is_threshold="0.5_2.0")
    rho = np.exp((old - roll)[mask.astype(bool)])
    outside = float(np.mean((rho < 0.5) | (rho > 2.0)))
    assert 0 < outside < 1 and m["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(outside)
    from arldiag.aliases import LiveResolver

    out = LiveResolver()(m)
    assert out["mismatch_masked_frac"] == pytest.approx(outside)  # IcePop zeroes those weights: masked
    assert out["mismatch_is_min"] == 0.0


def test_arldiag_tensor_statistics_equal_verls_logged_ones(tmp_path):
    # the "same as" column of docs/schema.md: arldiag's own k1/k3/chi2 from the tensors equal verl's logged values
    from arldiag.collectors.collector import Collector

    old, roll, mask = _logprobs(11, spread=0.3)
    m = _verl_metrics(old, roll, mask)
    with Collector(tmp_path / "run", strict=True) as col:
        col.record_update(1, logp=old, logp_old=old, advantages=np.zeros(len(LENGTHS)), response_mask=mask,
                          logp_rollout=roll)
        got = col.record_step(1)
    for k, name in (("rollout_corr/kl", "mismatch_k1"), ("rollout_corr/k3_kl", "mismatch_k3"),
                    ("rollout_corr/chi2_token", "mismatch_chi2")):
        assert got[name] == pytest.approx(m[k], rel=1e-5), name


def _trl_sampling(old, roll, mask, cap=3.0):
    """What TRL 1.16's GRPOTrainer logs under sampling/ in its default sequence_mask mode (grpo_trainer.py, the
    vLLM branch): |lp_old - lp_roll| over the completion tokens, and the sequence IS ratio exp(sum_t d) with the
    ratios above vllm_importance_sampling_clip_max (3) set to 0."""
    d = (old - roll) * mask
    delta = np.abs(old - roll)[mask.astype(bool)]
    ratio = np.exp(d.sum(axis=1))
    ratio = np.where(ratio > cap, 0.0, ratio)
    return {"sampling/sampling_logp_difference/mean": float(delta.mean()),
            "sampling/sampling_logp_difference/max": float(delta.max()),
            "sampling/importance_sampling_ratio/min": float(ratio.min()),
            "sampling/importance_sampling_ratio/mean": float(ratio.mean()),
            "sampling/importance_sampling_ratio/max": float(ratio.max())}


def test_trl_sampling_names_import_and_live(tmp_path):
    from arldiag.collectors.collector import Collector

    rows, expect = [], {}
    for i, step in enumerate((5, 10, 15)):
        old, roll, mask = _logprobs(20 + i, spread=0.3 * (i + 1))
        logged = _trl_sampling(old, roll, mask)
        rows.append({"step": step, "reward": 0.4, **logged})
        e = _by_hand(old, roll, mask)
        seq = np.exp(((old - roll) * mask).sum(axis=1))
        kept = np.where(seq > 3.0, 0.0, seq)
        expect[step] = {"mismatch_log_abs_mean": e["mismatch_log_abs_mean"],
                        "mismatch_log_abs_max": e["mismatch_log_abs_max"], "mismatch_is_mean": float(kept.mean()),
                        "mismatch_is_min": float(kept.min()), "mismatch_is_max": float(kept.max())}
    assert any(v["mismatch_is_min"] == 0.0 for v in expect.values())  # a sequence was masked (ratio > 3)
    write_csv(tmp_path / "trl.csv", rows)
    import_log(tmp_path / "trl.csv", tmp_path / "imported")
    run = open_run(str(tmp_path / "imported"))
    df = steps_frame(run, run.names[0]).set_index("step")
    with Collector(tmp_path / "live", strict=True) as col:
        live = {r["step"]: col.record_step(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in rows}
    for step, e in expect.items():
        for name, v in e.items():
            assert df.loc[step, name] == pytest.approx(v, rel=1e-12), (step, name)
            assert live[step][name] == pytest.approx(v, rel=1e-12), (step, name)


# ------------------------------------------------------------------------------------------------ the detector
def test_mean_abs_difference_k3_equivalence():
    # the map mismatch_drift applies to a logged mean |d|: for Gaussian d, (pi/4) E|d|^2 = E[k3] to second order
    rng = np.random.default_rng(0)
    for s in (0.05, 0.1, 0.2):
        d = s * rng.standard_normal(200_000)
        k3 = float(np.mean(np.exp(d) - d - 1))
        assert float(abs_to_k3(np.array([np.abs(d).mean()]))[0]) == pytest.approx(k3, rel=0.03 + s / 4)


def _levels(tmp_path: Path, name: str, series: np.ndarray, interval: int = 5) -> list[int]:
    steps = interval * np.arange(1, len(series) + 1)
    rows = [{"step": int(s), "reward": 0.5, "sampling/sampling_logp_difference/mean": float(v)}
            for s, v in zip(steps, series)]
    write_csv(tmp_path / f"{name}.csv", rows)
    import_log(tmp_path / f"{name}.csv", tmp_path / name)
    lv = []
    evaluate_run(open_run(str(tmp_path / name)), name, names=["mismatch_drift"], levels_out=lv)
    return [x.get("mismatch_drift", 0) for x in lv]


def test_mismatch_drift_fires_on_growing_logged_mismatch(tmp_path):
    rng = np.random.default_rng(1)
    grow = np.concatenate([0.01 + 0.001 * rng.standard_normal(15), np.linspace(0.01, 0.3, 25)])
    lv = _levels(tmp_path, "grow", grow)
    assert max(lv[:15]) == 0 and lv[-1] == 3  # k3-equivalent 0.07 (> 0.05) and ~700x its early level


@pytest.mark.parametrize("level", [0.005, 0.03, 0.1])
def test_mismatch_drift_quiet_on_healthy_logged_mismatch(tmp_path, level):
    # a constant engine/trainer offset with 15 % noise (bf16 rollouts: TRL's development runs log 0.003-0.02)
    rng = np.random.default_rng(2)
    lv = _levels(tmp_path, f"flat{level}", level * (1 + 0.15 * rng.standard_normal(60)))
    assert max(lv) == 0


@needs_real
def test_mismatch_drift_quiet_on_stable_development_runs(tmp_path):
    labels = json.loads((REAL / "labels.json").read_text())
    stable = [n for n, lab in labels.items() if lab["collapse_step"] is None and not lab.get("ambiguous")]
    with_mismatch = 0
    for name in stable:
        import_log(REAL / f"{name}.csv", tmp_path / name)
        lv = []
        re_ = evaluate_run(open_run(str(tmp_path / name)), name, levels_out=lv)
        with_mismatch += bool(re_.frame.get("mismatch_log_abs_mean", np.array([np.nan])).notna().any())
        assert max((x.get("mismatch_drift", 0) for x in lv), default=0) == 0, name
    assert len(stable) == 9 and with_mismatch == 4  # 4 of the 9 stable runs log TRL's sampling/* metrics


def test_report_mismatch_section_reads_logged_metrics(tmp_path):
    from arldiag.report.build import build_report
    from arldiag.report.sections import mismatch

    rng = np.random.default_rng(3)
    _levels(tmp_path, "trl", 0.01 * (1 + 0.1 * rng.standard_normal(30)))
    rep = build_report(str(tmp_path / "trl"), progress=False)
    assert mismatch.missing(rep.main) is None and "mismatch_log_abs_mean" in rep.main.cols
    section = mismatch.build(rep)
    assert not any(getattr(b, "text", None) for b in section.blocks[:1])  # no "no mismatch data" note
