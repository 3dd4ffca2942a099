"""verl's driver scalars, live, measured with verl itself: the plugin's hook on ``verl.utils.tracking.Tracking.log``
records every logged step into ``$ARLDIAG_RUN`` (rank verl_tracking.DRIVER_RANK) with verl's names resolved, runs
the Monitor of arldiag.toml on them as they are logged, leaves verl's own logging as it was, merges with the workers'
per-token rows in the ``steps`` view, and never breaks ``Tracking.log`` when arldiag's side fails."""
import json
import warnings

import numpy as np
import pytest

from integrations.need import need

need("verl")
torch = need("torch")

import arldiag  # noqa: E402
from arldiag.collectors import verl_loss, verl_tracking  # noqa: E402

VAL = "val-core/openai/gsm8k/acc/mean@1"
COLLAPSE = 30  # critic/score/mean falls from ~0.8 to 0.0 here


@pytest.fixture
def Tracking():
    import verl  # noqa: F401 - loads the plugin (verl.plugins entry point), which wraps Tracking.log
    from verl.utils.tracking import Tracking

    assert getattr(Tracking.log, "__arldiag_wrapped__", False), "the verl plugin did not wrap Tracking.log"
    return Tracking


@pytest.fixture(autouse=True)
def driver(tmp_path, monkeypatch):
    """A fresh driver recorder; cwd in tmp (no arldiag.toml of the caller's; verl's file logger writes here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARLDIAG_CONFIG", raising=False)
    monkeypatch.delenv(verl_tracking.OFF_ENV, raising=False)
    monkeypatch.delenv(verl_tracking.RUN_ENV, raising=False)
    verl_tracking.DRIVER.close()
    verl_tracking.DRIVER.__init__()
    yield verl_tracking.DRIVER
    verl_tracking.DRIVER.close()


def verl_metrics(step: int, rng) -> dict:
    """One step of RayPPOTrainer.fit's ``metrics`` under verl's own names (numpy floats, as reduce_metrics gives)."""
    score = float(np.clip(0.8 + 0.03 * rng.standard_normal(), 0, 1)) if step < COLLAPSE else 0.0
    m = {"critic/score/mean": np.float64(score), "critic/score/max": 1.0, "critic/score/min": 0.0,
         "critic/rewards/mean": np.float64(score), "actor/entropy": np.float64(0.6 - 0.004 * step),
         "actor/pg_loss": np.float32(-0.01), "actor/grad_norm": np.float64(0.5 + 0.01 * rng.standard_normal()),
         "actor/lr": 1e-6, "response_length/mean": np.float64(300.0 + step), "response_length/max": 1024,
         "response_length/clip_ratio": np.float64(0.02), "timing_s/step": 12.5 + 0.1 * step,
         "timing_s/gen": 7.0, "training/global_step": step, "training/epoch": 0,
         "perf/note": "not a number"}  # non-numeric: dropped by arldiag, skipped by verl's console
    if step % 10 == 0:
        m[VAL] = 0.6 if step < COLLAPSE else 0.05
    return m


def test_tracking_log_records_the_run_and_alerts_live(Tracking, tmp_path, monkeypatch, capsys):
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    run_dir = tmp_path / "runs" / "gsm8k"
    monkeypatch.setenv("ARLDIAG_RUN", str(run_dir))
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl.jsonl"))
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console", "file"])
    rng = np.random.default_rng(0)
    logged, printed, first_alert = {}, [], None
    assert t.log(data={VAL: 0.55}, step=0) is None  # val_before_train, as fit() logs it
    printed.append(concat_dict_to_str({VAL: 0.55}, step=0))
    for step in range(1, 41):
        data = verl_metrics(step, rng)
        logged[step] = {k: float(v) for k, v in data.items() if not isinstance(v, str)}
        assert t.log(data=data, step=step) is None  # verl's return value
        printed.append(concat_dict_to_str(data, step=step))
        out = capsys.readouterr()
        assert out.out.strip().splitlines()[-1] == printed[-1]  # verl's console line, unchanged
        if first_alert is None and "score_collapse" in out.err:  # the Monitor's console sink, as the step is logged
            first_alert = step
    assert verl_tracking.DRIVER.collector is not None
    assert first_alert is not None and COLLAPSE <= first_alert <= COLLAPSE + 2
    t.finish()
    assert verl_tracking.DRIVER.collector is None  # Tracking.finish closed the driver's collector

    # verl's file logger wrote every step, as without arldiag
    lines = [json.loads(x) for x in (tmp_path / "verl.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(41))
    assert lines[5]["data"]["critic/score/mean"] == pytest.approx(logged[5]["critic/score/mean"])

    run = arldiag.open_run(run_dir)
    assert run.manifest["status"] == "finished"
    assert [r[0] for r in run.sql("select distinct rank from steps_raw").fetchall()] == [verl_tracking.DRIVER_RANK]
    rows = run.sql('select step, task_score, entropy, truncated_frac, response_length_mean, grad_norm, val_score, '
                   '"timing_s/step" from steps where step > 0 order by step').fetchall()
    assert [r[0] for r in rows] == list(range(1, 41))
    for step, score, ent, trunc, length, gnorm, val, timing in rows:
        m = logged[step]
        assert score == pytest.approx(m["critic/score/mean"])  # the task score, resolved from verl's name
        assert ent == pytest.approx(m["actor/entropy"])
        assert trunc == pytest.approx(m["response_length/clip_ratio"])
        assert length == pytest.approx(m["response_length/mean"])
        assert gnorm == pytest.approx(m["actor/grad_norm"])
        assert timing == pytest.approx(m["timing_s/step"])
        assert (val is None) == (VAL not in m) and (val is None or val == pytest.approx(m[VAL]))
    assert "perf/note" not in run.columns("steps")

    # the Monitor's store sink: the collapse alerted within 2 steps, and not before it
    alerts = run.sql("select step, severity from alerts where detector = 'score_collapse' order by step").fetchall()
    assert alerts and COLLAPSE <= alerts[0][0] <= COLLAPSE + 2, alerts
    assert any(sev == "critical" for _, sev in alerts)


def test_arldiag_toml_sinks_apply_on_the_driver(Tracking, tmp_path, monkeypatch, capsys):
    """The driver's Monitor is arldiag.toml's (monitor_of(settings.active())): here the store sink only."""
    (tmp_path / "arldiag.toml").write_text('[monitor]\nsinks = ["store"]\n')
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "run"))
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    rng = np.random.default_rng(1)
    for step in range(1, 36):
        t.log(data=verl_metrics(step, rng), step=step)
    t.finish()
    assert "[arldiag]" not in capsys.readouterr().err  # no console sink
    run = arldiag.open_run(tmp_path / "run")
    assert run.sql("select count(*) from alerts where detector = 'score_collapse'").fetchall()[0][0] >= 1


def test_driver_and_worker_rows_merge_per_step(Tracking, tmp_path, monkeypatch):
    """The workers' loss recorder (rank 0, per-token statistics) and the driver (rank DRIVER_RANK, verl's logged
    scalars) write the same run; the steps view has both for each step."""
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    run_dir = tmp_path / "run"
    monkeypatch.setenv("ARLDIAG_RUN", str(run_dir))
    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                          clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    rec = verl_loss.RECORDER
    rec.__init__()  # opens its collector at $ARLDIAG_RUN, rank 0, on the first loss call
    g = torch.Generator().manual_seed(0)
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    scores = {}
    for step in (1, 2, 3):
        rec.set_step(step)
        for _ in range(2):  # two micro-batches on the worker
            old = -torch.rand(8, 10, generator=g) * 3
            new = old + torch.randn(8, 10, generator=g) * 0.3
            adv = torch.randn(8, 1, generator=g).expand(8, 10).contiguous()
            mask = torch.ones(8, 10)
            core_algos.get_policy_loss_fn("arldiag_vanilla")(old_log_prob=old, log_prob=new, advantages=adv,
                                                             response_mask=mask, config=cfg)
        if step == 1:
            assert verl_tracking.DRIVER.collector is None  # the loss side (the workers) opens no driver collector
        scores[step] = 0.25 * step
        t.log(data={"critic/score/mean": scores[step], "response_length/mean": 10.0, "actor/ppo_kl": 0.001},
              step=step)
    rec.close()
    t.finish()
    rec.__init__()
    run = arldiag.open_run(run_dir)
    assert sorted(r[0] for r in run.sql("select distinct rank from steps_raw").fetchall()) == [
        0, verl_tracking.DRIVER_RANK]
    assert run.manifest["algorithm"] == "vanilla" and run.manifest["status"] == "finished"
    rows = run.sql("select step, task_score, response_length_mean, pg_clipfrac, ppo_kl, n_updates "
                   "from steps order by step").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]  # one row per step: the ranks' rows merged
    for step, score, length, clipfrac, kl, n_updates in rows:
        assert score == pytest.approx(scores[step]) and length == 10.0  # the driver's
        assert clipfrac is not None and kl is not None and n_updates == 2  # the worker's token statistics


def test_no_run_dir_no_collector_and_hook_is_idempotent(Tracking, capsys):
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    assert t.log(data={"critic/score/mean": 0.5}, step=1) is None
    assert "critic/score/mean:0.5" in capsys.readouterr().out
    assert verl_tracking.DRIVER.collector is None  # no $ARLDIAG_RUN: nothing opened
    wrapped = Tracking.log
    assert verl_tracking.install(Tracking) is False and Tracking.log is wrapped  # wrapped once
    assert not getattr(wrapped.__wrapped_by_arldiag__, "__arldiag_wrapped__", False)


def test_another_trackings_finish_does_not_end_the_run(Tracking, tmp_path, monkeypatch):
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "run"))
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    t.log(data={"critic/score/mean": 0.5}, step=1)
    other = Tracking(project_name="p", experiment_name="other", default_backend=["console"])
    other.finish()  # never logged: not its run to close
    assert verl_tracking.DRIVER.collector is not None
    t.log(data={"critic/score/mean": 0.6}, step=2)
    t.log(data={"val-aux/extra": 1.0}, step=2)  # a second call for a logged step: stored, not re-evaluated
    t.finish()
    run = arldiag.open_run(tmp_path / "run")
    assert run.sql("select step, task_score from steps order by step").fetchall() == [(1, 0.5), (2, 0.6)]


def test_unwritable_run_dir_does_not_break_tracking_log(Tracking, tmp_path, monkeypatch, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "a_file" / "run"))
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    with pytest.warns(RuntimeWarning, match="arldiag"):
        assert t.log(data={"critic/score/mean": 0.5}, step=1) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not per step
        assert t.log(data={"critic/score/mean": 0.6}, step=2) is None
    t.finish()
    out = capsys.readouterr().out
    assert "step:1 - critic/score/mean:0.5" in out and "step:2 - critic/score/mean:0.6" in out


def test_a_failing_arldiag_side_warns_once_and_verl_goes_on(Tracking, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "run"))

    def boom(self, *a, **k):
        raise RuntimeError("arldiag is broken")

    record = verl_tracking.DriverRecorder.record
    monkeypatch.setattr(verl_tracking.DriverRecorder, "record", boom)
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    with pytest.warns(RuntimeWarning, match="arldiag is broken"):
        assert t.log(data={"critic/score/mean": 0.5}, step=1) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert t.log({"critic/score/mean": 0.6}, 2) is None  # positional, as verl's signature allows
    assert "step:2 - critic/score/mean:0.6" in capsys.readouterr().out

    # and verl's own failure is verl's: raised unchanged, arldiag still records the step
    monkeypatch.setattr(verl_tracking.DriverRecorder, "record", record)
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "run2"))

    class Broken:
        def log(self, data, step):
            raise OSError("backend down")

    t.logger["broken"] = Broken()
    with pytest.raises(OSError, match="backend down"):
        t.log(data={"critic/score/mean": 0.7}, step=3)
    t.finish()
    run = arldiag.open_run(tmp_path / "run2")
    assert run.sql("select step, task_score from steps").fetchall() == [(3, 0.7)]


def test_off_switch(Tracking, tmp_path, monkeypatch):
    monkeypatch.setenv("ARLDIAG_RUN", str(tmp_path / "run"))
    monkeypatch.setenv(verl_tracking.OFF_ENV, "0")
    t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    t.log(data={"critic/score/mean": 0.5}, step=1)
    assert verl_tracking.DRIVER.collector is None and not (tmp_path / "run").exists()


def test_scalars_keeps_numbers_only():
    got = verl_tracking.scalars({"a": 1, "b": np.float32(0.5), "c": torch.tensor(2.0), "d": np.array([3.0]),
                                 "e": "text", "f": [1.0, 2.0], "g": np.zeros(3), "h": True, "i": None})
    assert got == {"a": 1.0, "b": 0.5, "c": 2.0, "d": 3.0}
