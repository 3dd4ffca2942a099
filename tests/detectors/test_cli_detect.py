"""CLI: detect (JSON, --fail-on exit codes), eval-detect (label and lead time), watch (resumable)."""
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

import arldiag
from arldiag.cli import main
from arldiag.findings import findings_from_json
from arldiag.label import series_collapse_index


def test_detect_json_and_fail_on(synth_runs, capsys):
    healthy, collapse = synth_runs["healthy"][0], synth_runs["collapse"][0]
    assert main(["detect", str(healthy), "--fail-on", "warning"]) == 0
    capsys.readouterr()
    assert main(["detect", str(collapse), "--json", "--fail-on", "critical"]) == 1
    fs = findings_from_json(capsys.readouterr().out)
    assert {f.detector for f in fs if f.severity == "critical"} >= {"neg_adv_low_is"}
    assert main(["detect", str(collapse), "--detectors", "nonfinite", "--fail-on", "warning"]) == 0
    capsys.readouterr()
    assert main(["detect", str(collapse), "--all"]) == 0
    assert "quiet" in capsys.readouterr().out


def test_eval_detect(synth_runs, capsys, tmp_path):
    root = tmp_path / "runs"
    for k in ("healthy", "collapse"):
        shutil.copytree(synth_runs[k][0], root / k)
    assert main(["eval-detect", str(root), "--json", "--check"]) == 0
    res = json.loads(capsys.readouterr().out)
    rows = {r["run"]: r for r in res["runs"]}
    # the label, recomputed independently from the stored success rate with numpy
    sr = arldiag.open_run(root / "collapse").sql("select step, success_rate from steps order by step").df()
    m = np.array([sr.success_rate[max(0, i - 9):i + 1].mean() for i in range(len(sr))])
    peak = np.maximum.accumulate(np.where(np.arange(len(m)) >= 2, m, -np.inf))  # from the third step on
    below = m < 0.5 * peak
    t = len(below) - np.argmax(~below[::-1])  # start of the final all-below stretch
    y = sr.success_rate.to_numpy()
    while y[t - 1] < 0.5 * peak[t - 1]:  # back over raw values already below (the trailing mean lags)
        t -= 1
    assert rows["collapse"]["collapse_step"] == int(sr.step[t]) == int(sr.step[series_collapse_index(
        sr.success_rate.to_numpy())])
    r = rows["collapse"]
    assert r["lead_time"] == r["collapse_step"] - r["first_warning_step"] >= 10 and r["pass"]
    assert r["lead_episode"][0] == r["first_warning_step"] and r["lead_episode"][1] in (None, r["steps"])
    s = res["summary"]
    assert s["recall_at_10"] == 1.0 and s["false_alarm_episodes"] == 0 and s["healthy_warning_share"] == 0
    assert rows["healthy"]["collapse_step"] is None and rows["healthy"]["false_alarms"] == 0
    assert res["summary"]["all_pass"] and res["summary"]["collapsing_warned_in_time"] == 1
    assert main(["eval-detect", str(root)]) == 0
    assert "median lead" in capsys.readouterr().out


def _watch_alerts(path):
    run = arldiag.open_run(path)
    return run.sql("select step, detector, severity, state from alerts where source = 'watch' "
                   "order by step, detector, severity").fetchall()


def test_watch_resumes_without_duplicates(tmp_path, capsys):
    from _synth_runs import write_run

    full, part = tmp_path / "full", tmp_path / "part"
    write_run(full, "collapse")
    assert main(["watch", str(full), "--once"]) == 0
    expected = _watch_alerts(full)
    assert expected
    # the same run written in two phases, watched after each
    write_run(part, "collapse", only_steps=range(0, 60), name="full")
    assert main(["watch", str(part), "--once", "--interval", "0.1"]) == 0
    state = json.loads((part / ".arldiag-watch.json").read_text())
    assert state["last_step"] == 59
    write_run(part, "collapse", only_steps=range(60, 130), name="full")
    assert main(["watch", str(part), "--once"]) == 0
    assert "evaluated 70 new steps" in capsys.readouterr().out
    assert _watch_alerts(part) == expected
    # without the state file the position comes from the alerts table (last watch alert at step 118): steps
    # 119-129 are evaluated again, and since they raised nothing before they raise nothing now
    (part / ".arldiag-watch.json").unlink()
    assert main(["watch", str(part), "--once"]) == 0
    cap = capsys.readouterr()
    assert f"evaluated {129 - expected[-1][0]} new steps" in cap.out and "step" not in cap.err
    assert _watch_alerts(part) == expected


def test_watch_bounded_by_max_seconds(synth_runs, tmp_path, capsys):
    from _synth_runs import write_run

    p = tmp_path / "live"
    write_run(p, "healthy", n_steps=30)
    m = json.loads((p / "run.json").read_text())
    m["status"] = "running"  # pretend the trainer is still writing
    (p / "run.json").write_text(json.dumps(m))
    assert main(["watch", str(p), "--interval", "0.05", "--max-seconds", "0.3", "--no-store"]) == 0
    assert "evaluated 30 new steps" in capsys.readouterr().out
    assert not (p / ".arldiag-watch.json").exists()  # --no-store is read-only
    assert main(["watch", str(p), "--interval", "0"]) == 2  # a bad value: one line on stderr, no traceback
    assert capsys.readouterr().err == "arldiag watch: error: --interval must be > 0, got 0.0\n"


def _fake_eval(monkeypatch, states, collapse, levels=None, tops=None, dips=(), decline=None):
    """Patch the three batch functions evaluate() uses: a given alert-state series and label."""
    from types import SimpleNamespace

    import arldiag.evaluation.evaluate as ev  # evaluate() calls the detectors' functions it imported

    steps = list(range(len(states)))
    tops = tops or ["x"] * len(states)
    tracks = {d: SimpleNamespace(max_level=lv) for d, lv in (levels or {}).items()}
    fake = SimpleNamespace(timeline=list(zip(steps, [0.6] * len(states), states, tops)), name="r", steps=steps,
                           evaluator=SimpleNamespace(tracks=tracks, interval=1, findings=lambda name, steps: []),
                           frame=None)
    monkeypatch.setattr(ev, "evaluate_run", lambda run, name, risk_model=None: fake)
    monkeypatch.setattr(ev, "events_of", lambda frame: (collapse, list(dips)))
    monkeypatch.setattr(ev, "decline_of", lambda frame: decline)


class _FakeRun:  # evaluate() needs only the names and the manifests; the batch functions are patched
    def __init__(self, config=None, names=("r",), splits=None):
        self.names = list(names)
        self.manifests = {n: {"config": dict(config or {})} for n in self.names}
        for n, sp in (splits or {}).items():
            if sp[0] == "top":
                self.manifests[n]["split"] = sp[1]
            else:
                self.manifests[n]["config"]["split"] = sp[1]


def test_eval_episodes_and_lead(monkeypatch):
    from arldiag.commands import eval_detect

    states = ["ok", "warning", "warning", "ok", "watch", "critical", "ok", "ok", "warning", "critical", "critical",
              "critical"] + ["ok"] * 30 + ["warning"] * 12 + ["critical"] * 6
    assert eval_detect.episodes(list(range(12)), states[:12]) == [(1, 3), (5, 6), (8, None)]
    assert eval_detect.episodes(list(range(len(states))), states) == [(1, 3), (5, 6), (8, 12), (42, None)]
    # collapse at 60, window 10, alarm gap 6: the episodes that cleared at 3 and 6 (<= 60 - 10 - 6) are false
    # alarms, the one that cleared at 12 too; the lead counts from 42, the episode active at 60 -> 18
    _fake_eval(monkeypatch, states, 60)
    r = eval_detect.evaluate(_FakeRun(), min_lead=6, alarm_gap=6, window=10)["runs"][0]
    assert (r["kind"], r["false_alarms"], r["first_warning_step"], r["lead_time"], r["pass"]) == (
        "collapse", 3, 42, 18, True)
    assert r["elevated_from_step"] == 42
    # a warning that cleared before the collapse is no lead: collapse at 11 with the episode 8..11 active -> 3
    _fake_eval(monkeypatch, states[:12] + ["ok"] * 10, 11)
    r = eval_detect.evaluate(_FakeRun(), min_lead=2, alarm_gap=2, window=4)["runs"][0]
    assert (r["lead_time"], r["first_warning_step"], r["elevated_from_step"]) == (3, 8, 8)
    _fake_eval(monkeypatch, states[:12] + ["ok"] * 10, 13)  # cleared at 12, one step before the collapse
    r = eval_detect.evaluate(_FakeRun(), min_lead=2, alarm_gap=2, window=4)["runs"][0]
    assert r["lead_time"] is None and not r["pass"]
    _fake_eval(monkeypatch, states[:12], None)
    r = eval_detect.evaluate(_FakeRun())["runs"][0]
    assert (r["kind"], r["false_alarms"], r["first_warning_step"], r["pass"]) == ("stable", 3, 1, False)
    assert r["elevated_from_step"] == 1
    # the episode 8.. inside a recovered dip's window is a dip warning, not a false alarm
    _fake_eval(monkeypatch, states[:12], None, dips=[(9, 10)])
    r = eval_detect.evaluate(_FakeRun(), window=2)["runs"][0]
    assert (r["false_alarms"], r["dip_warnings"]) == (2, 1)
    # a run that declined at 9 (window 2: from step 7 on): the episode 8.. is a decline warning; 1..2 and 5 are
    # false alarms, so the run does not pass
    _fake_eval(monkeypatch, states[:12], None, decline=9)
    res = eval_detect.evaluate(_FakeRun(), window=2)
    r = res["runs"][0]
    assert (r["kind"], r["decline_step"], r["false_alarms"], r["decline_warnings"], r["pass"]) == (
        "decline", 9, 2, 1, False)
    assert (res["summary"]["stable"], res["summary"]["declines"], res["summary"]["declines_warned"]) == (0, 1, 1)


def test_eval_table_marks_a_decline(monkeypatch, capsys):
    from arldiag.commands import eval_detect

    _fake_eval(monkeypatch, ["ok"] * 20 + ["warning"] * 5, None, decline=22)
    monkeypatch.setattr(eval_detect, "open_run", lambda path: _FakeRun())
    assert eval_detect.main(SimpleNamespace(run=["r"], min_lead=10, alarm_gap=20, precursors=0, split=None,
                                            window=40, risk="rules", json=False, check=False)) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("r "))
    assert row.split()[1:3] == ["decline", "22d"]
    assert ("declining runs (never learned, then fell; d: the step, not scored as collapses): 1, 1 warned inside "
            "the 40 steps before their decline or after, 0 with a false alarm before that") in out


def test_eval_split_filter(monkeypatch, capsys):
    from arldiag.commands import eval_detect

    _fake_eval(monkeypatch, ["ok"] * 5, None)
    run = _FakeRun(names=("a", "b", "c"), splits={"a": ("config", "dev"), "b": ("top", "heldout")})
    assert [r["run"] for r in eval_detect.evaluate(run, split="dev")["runs"]] == ["a"]
    res = eval_detect.evaluate(run, split="heldout")
    assert [r["run"] for r in res["runs"]] == ["b"] and res["runs"][0]["split"] == "heldout"
    assert len(eval_detect.evaluate(run)["runs"]) == 3
    with pytest.raises(ValueError, match="--split"):
        eval_detect.evaluate(run, split="test")


def test_eval_fault_runs(monkeypatch):
    """A run with planted faults passes when those detectors reached warning; episodes led by others are false."""
    from arldiag.commands import eval_detect

    states = ["ok", "warning", "ok", "ok", "warning", "ok"]
    faults = {"injected_faults": {"mismatch_drift": "bf16 sampler"}}
    _fake_eval(monkeypatch, states, None, {"mismatch_drift": 2}, ["-", "mismatch_drift", "-", "-", "mismatch_drift",
                                                                  "-"])
    res = eval_detect.evaluate(_FakeRun(faults))
    r = res["runs"][0]
    assert (r["kind"], r["false_alarms"], r["first_warning_step"], r["pass"]) == ("fault", 0, 1, True)
    assert r["injected_faults_fired"] == {"mismatch_drift": True} and res["summary"]["faults_flagged"] == 1
    # an episode led by another detector is a false alarm; a planted fault that stayed at watch is not flagged
    _fake_eval(monkeypatch, states, None, {"mismatch_drift": 2}, ["-", "mismatch_drift", "-", "-", "kl_ref_drift",
                                                                  "-"])
    assert eval_detect.evaluate(_FakeRun(faults))["runs"][0]["false_alarms"] == 1
    _fake_eval(monkeypatch, ["ok"] * 6, None, {"mismatch_drift": 1})
    r = eval_detect.evaluate(_FakeRun(faults))["runs"][0]
    assert not r["pass"] and r["injected_faults_fired"] == {"mismatch_drift": False}
    # the same series without planted faults is a stable run that passes
    assert eval_detect.evaluate(_FakeRun())["runs"][0]["kind"] == "stable"


def test_trainer_records_injected_faults():
    from arldiag.trainer.config import TrainConfig

    assert TrainConfig().injected_faults() == {}
    f = TrainConfig(retokenize=True, rollout_dtype="bfloat16").injected_faults()
    assert set(f) == {"mismatch_drift", "retok_drift"} and "bfloat16" in f["mismatch_drift"]


def test_precursor_scan_matches_numpy():
    import pandas as pd

    from arldiag.evaluation.precursors import precursor_scan

    rng = np.random.default_rng(3)
    steps = np.arange(100)
    moved = rng.normal(1.0, 0.1, 100)
    moved[70:] += 0.5                       # shifts 20 steps before the collapse at 90
    flat = rng.normal(0.0, 1.0, 100)
    lr = np.full(100, 1e-4) * (1 + 1e-13 * rng.normal(size=100))  # constant up to float rounding
    frame = pd.DataFrame({"step": steps, "moved": moved, "flat": flat, "const": 1.0, "lr": lr, "name": "x",
                          "gappy": pd.array([None] * 95 + [1.0] * 5, dtype="Float64")})
    out = precursor_scan(frame, 90)
    pre, ref = (steps >= 70) & (steps <= 80), (steps >= 30) & (steps < 70)
    z = lambda x: (x[pre].mean() - x[ref].mean()) / (x[ref].std(ddof=1) / np.sqrt(pre.sum()))  # noqa: E731
    # const and lr have no spread (lr only float rounding), name is text, gappy has too few values
    assert [r["metric"] for r in out] == ["moved", "flat"]
    assert out[0]["z"] == pytest.approx(z(moved), abs=0.01) and out[0]["z"] > 10
    assert out[1]["z"] == pytest.approx(z(flat), abs=0.01) and abs(out[1]["z"]) < 4
    assert precursor_scan(frame, 15) == []  # no history before the lead window


def test_eval_detect_precursors_cli(synth_runs, capsys):
    assert main(["eval-detect", str(synth_runs["collapse"][0]), "--json", "--precursors", "3"]) == 0
    r = json.loads(capsys.readouterr().out)["runs"][0]
    assert r["collapsed"] and 1 <= len(r["precursors"]) <= 3
    assert all(abs(a["z"]) >= abs(b["z"]) for a, b in zip(r["precursors"], r["precursors"][1:]))


def test_eval_detect_ignores_step_offsets_and_the_log_format(tmp_path, capsys):
    """Another trainer's view of a real run: the committed collapsing sample run's step metrics exported to CSV and
    imported (`arldiag import`), once as they are and once resumed at step 1000. Both are scored exactly like the
    original run store, shifted by 1000 (the detectors and the label count rows, not step numbers)."""
    from pathlib import Path

    from arldiag.detectors.batch import steps_frame

    src = Path(__file__).resolve().parents[2] / "sample_runs" / "cispo_s0"
    f = steps_frame(arldiag.open_run(src), "cispo_s0")
    cols = [c for c in f.columns if c not in ("run", "time") and np.issubdtype(f[c].dtype, np.number)
            and f[c].notna().any()]
    out = {}
    for name, offset in (("csv", 0), ("resumed", 1000)):
        g = f[cols].copy()
        g["step"] += offset
        g.to_csv(tmp_path / f"{name}.csv", index=False)
        assert main(["import", str(tmp_path / f"{name}.csv"), "--out", str(tmp_path / name), "--keep-names"]) == 0
    capsys.readouterr()
    for name, path in (("store", src), ("csv", tmp_path / "csv"), ("resumed", tmp_path / "resumed")):
        main(["eval-detect", str(path), "--json"])
        out[name] = json.loads(capsys.readouterr().out)["runs"][0]
    base = out["store"]
    assert base["collapse_step"] is not None and base["episodes"]
    for name, offset in (("csv", 0), ("resumed", 1000)):
        r = out[name]
        assert r["collapse_step"] == base["collapse_step"] + offset
        shifted = [[a + offset, None if b is None else b + offset] for a, b in base["episodes"]]  # None: still on
        assert shifted == [list(e) for e in r["episodes"]]
        assert r["lead_time"] == base["lead_time"] and r["false_alarms"] == base["false_alarms"]
