"""`arldiag import FORMAT PATH --out RUN`: inputs written by the producing libraries (verl's file logger,
transformers' TrainerState, TensorBoard's writer through torch), read back through the steps view, with detect and
report working on the result; malformed inputs give one-line errors naming the file and the line."""
import json

import numpy as np
import pytest

from integrations.need import need

import arldiag  # noqa: E402
from arldiag.cli import main as cli  # noqa: E402

METRICS = [{"actor/entropy": 1.5 - 0.1 * s, "actor/ppo_kl": 0.01 * s, "actor/pg_clipfrac": 0.02 * s,
            "critic/score/mean": 0.1 * s, "response_length/mean": 20.0 + s} for s in range(1, 6)]


def steps(run_dir, cols):
    return arldiag.open_run(run_dir).sql(f"select step, {', '.join(cols)} from steps order by step").fetchall()


def test_verl_file_logger(tmp_path, monkeypatch, capsys):
    need("verl")
    from verl.utils.tracking import FileLogger

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl.jsonl"))
    logger = FileLogger("proj", "exp")
    for s, m in enumerate(METRICS, start=1):
        logger.log(m, step=s)
    logger.finish()
    assert cli(["import", "verl-jsonl", str(tmp_path / "verl.jsonl"), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "missing tables tokens, sequences, turns, groups" in err and "entropy" in err
    got = steps(tmp_path / "run", ["entropy", "ppo_kl", "pg_clipfrac", "response_length_mean", '"critic/score/mean"'])
    want = [(s, m["actor/entropy"], m["actor/ppo_kl"], m["actor/pg_clipfrac"], m["response_length/mean"],
             m["critic/score/mean"]) for s, m in enumerate(METRICS, start=1)]
    assert np.allclose(np.array(got, float), np.array(want, float))
    assert cli(["detect", str(tmp_path / "run"), "--json"]) == 0
    assert cli(["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.md"), "--format", "md"]) == 0
    # malformed: a record that is not the file logger's shape, and broken JSON, named by file and line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "a": 1}\n')
    assert cli(["import", "verl-jsonl", str(bad), "--out", str(tmp_path / "b1")]) == 2
    assert f"line 2 of {bad} is not a verl file-logger record" in capsys.readouterr().err
    bad.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": \n')
    assert cli(["import", "verl-jsonl", str(bad), "--out", str(tmp_path / "b2")]) == 2
    assert f"line 2 of {bad} is not valid JSON" in capsys.readouterr().err


def test_trainer_state_json(tmp_path, capsys):
    need("transformers")
    from transformers import TrainerState

    hist = [{"step": s, "loss": 1.0 / s, "clip_ratio/low_mean": 0.01 * s, "entropy": 2.0 - 0.1 * s,
             "frac_reward_zero_std": 0.25, "epoch": 0.1 * s, "reward": 0.2 * s, "kl": 0.003 * s,
             "completions/mean_length": 10.0 + s} for s in range(1, 5)]
    hist.append({"step": 4, "train_runtime": 9.0, "train_loss": 0.5, "epoch": 0.4})
    state = TrainerState(global_step=4, log_history=hist)
    state.save_to_json(str(tmp_path / "trainer_state.json"))
    assert cli(["import", str(tmp_path / "trainer_state.json"), "--out", str(tmp_path / "run")]) == 0  # guessed
    got = steps(tmp_path / "run", ["loss", "clip_ratio_low_mean", "entropy", "zero_std_group_frac"])
    assert np.allclose(np.array(got, float), [[h["step"], h["loss"], h["clip_ratio/low_mean"], h["entropy"],
                                               h["frac_reward_zero_std"]] for h in hist[:4]])
    got = steps(tmp_path / "run", ["reward_mean", "kl_ref_k3", "response_length_mean"])  # TRL's own names
    assert np.allclose(np.array(got, float), [[h["step"], h["reward"], h["kl"], h["completions/mean_length"]]
                                              for h in hist[:4]])
    cols = arldiag.open_run(tmp_path / "run").sql("select * from steps limit 0").df().columns
    assert "train_runtime" not in cols  # the end-of-training summary is not a step
    bad = tmp_path / "trainer_state_bad.json"
    bad.write_text('{"log_history": [\n  {"step": 1},\n  {"step": 2,,}\n]}')
    assert cli(["import", "trl-state", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert f"{bad} is not valid JSON (line 3" in capsys.readouterr().err


def test_tensorboard_events(tmp_path, capsys):
    need("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "tb" / "run1"))
    for s, m in enumerate(METRICS, start=1):
        for k, v in m.items():
            w.add_scalar(k, v, s)
        w.add_text("note", "text is skipped", s)
    w.close()
    assert cli(["import", "tensorboard", str(tmp_path / "tb"), "--out", str(tmp_path / "run")]) == 0
    got = steps(tmp_path / "run", ["entropy", "ppo_kl"])
    assert np.allclose(np.array(got, float), [[s, m["actor/entropy"], m["actor/ppo_kl"]]
                                              for s, m in enumerate(METRICS, start=1)], rtol=1e-6)
    ev = next((tmp_path / "tb" / "run1").iterdir())
    data = ev.read_bytes()
    bad = tmp_path / "events.out.tfevents.bad"
    bad.write_bytes(data[: len(data) // 2] + b"\x00garbage" * 4)  # corrupt after the first records
    assert cli(["import", "tensorboard", str(bad), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"file: {bad}, record" in err and ("truncated" in err or "checksum" in err)


def test_wandb_history_export_csv_and_parquet(tmp_path, capsys):
    pa = need("pyarrow")
    import pyarrow.parquet as pq

    # the layout of wandb's run.history() export: _step, _runtime, _timestamp, then the logged keys
    rows = [{"_step": s, "_runtime": 1.5 * s, "_timestamp": 1.7e9 + s, "actor/entropy": m["actor/entropy"],
             "train/reward": m["critic/score/mean"]} for s, m in enumerate(METRICS)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "history.parquet")
    (tmp_path / "history.csv").write_text("_step,_runtime,actor/entropy,train/reward\n" + "".join(
        f"{r['_step']},{r['_runtime']},{r['actor/entropy']},{r['train/reward']}\n" for r in rows))
    for name in ("history.parquet", "history.csv"):
        out = tmp_path / name.replace(".", "_")
        assert cli(["import", "wandb", str(tmp_path / name), "--out", str(out)]) == 0
        # train/reward resolves to reward_mean (the alias table strips a leading train/) and is the task score
        got = steps(out, ["entropy", "reward_mean", "task_score"])
        assert np.allclose(np.array(got, float), [[r["_step"], r["actor/entropy"], r["train/reward"],
                                                   r["train/reward"]] for r in rows])
        cols = arldiag.open_run(out).sql("select * from steps limit 0").df().columns
        assert "_runtime" not in cols
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    assert cli(["import", "wandb", str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "b")]) == 2
    assert "bad.parquet is not a readable Parquet file" in capsys.readouterr().err


def test_format_argument_errors(tmp_path, capsys):
    f = tmp_path / "m.txt"
    f.write_text("x")
    assert cli(["import", "nosuch", str(f), "--out", str(tmp_path / "r")]) == 2
    assert "'nosuch' is not a format" in capsys.readouterr().err
    assert cli(["import", str(f), "--out", str(tmp_path / "r")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err


def test_imported_verl_log_gets_a_collapse_label(tmp_path, capsys):
    """verl's step log carries no success flag: the label reads the mean reward (critic/rewards/mean, in [0, 1]),
    or the validation score once it is renamed to eval_success. Hand-worked: reward 0.7 on steps 1-60, then 0.05:
    the 10-step trailing mean first falls under 0.35 at step 66, then the label moves back over the raw values under
    0.35 to step 61. Validation 0.6 at steps 10-60, 0 from 70: the 3-evaluation mean is first under 0.3 at step 80
    (0.2), then back to step 70."""
    log = tmp_path / "verl.jsonl"
    with open(log, "w") as fh:
        for s in range(1, 101):
            data = {"critic/rewards/mean": 0.7 if s <= 60 else 0.05, "actor/entropy": 1.0}
            if s % 10 == 0:
                data["val-core/gsm8k/reward/mean@1"] = 0.6 if s <= 60 else 0.0
            fh.write(json.dumps({"step": s, "data": data}) + "\n")
    runs = {}
    for name, extra in (("plain", []), ("val", ["--rename", "val-core/gsm8k/reward/mean@1=eval_success"])):
        assert cli(["import", "verl-jsonl", str(log), "--out", str(tmp_path / name), *extra]) == 0
        capsys.readouterr()
        assert cli(["eval-detect", str(tmp_path / name), "--json"]) in (0, 1)
        runs[name] = json.loads(capsys.readouterr().out)["runs"][0]
    assert runs["plain"]["collapse_step"] == 61 and runs["val"]["collapse_step"] == 70


def test_rows_without_a_step_are_skipped_and_counted(tmp_path, capsys):
    # a summary row with an empty step cell (wandb's run summary, TRL's closing train_runtime entry) is left out
    # and said once; a step that is text stays an error naming the column
    f = tmp_path / "log.csv"
    f.write_text("step,reward,entropy\n1,0.5,0.3\n2,0.6,0.31\n,,\n3,0.7,0.29\n")
    assert cli(["import", str(f), "--out", str(tmp_path / "r")]) == 0
    assert "skipped 1 row(s) without a 'step' value" in capsys.readouterr().err
    assert steps(tmp_path / "r", ["task_score"]) == [(1, 0.5), (2, 0.6), (3, 0.7)]
    g = tmp_path / "bad.csv"
    g.write_text("step,reward\n1,0.5\nlast,0.6\n")
    assert cli(["import", str(g), "--out", str(tmp_path / "b")]) == 2
    assert "step_column" in capsys.readouterr().err


def test_ms_swift_step_written_as_a_fraction(tmp_path):
    # ms-swift's logging.jsonl writes the step as "12/500" (step / max steps)
    f = tmp_path / "logging.jsonl"
    f.write_text("".join(json.dumps({"global_step/max_steps": f"{s}/3", "reward": 0.1 * s, "entropy/mean": 0.5})
                         + "\n" for s in (1, 2, 3)))
    assert cli(["import", str(f), "--out", str(tmp_path / "r")]) == 0  # the step column is found by its name
    assert steps(tmp_path / "r", ["task_score", "entropy"]) == [(1, 0.1, 0.5), (2, 0.2, 0.5),
                                                                (3, pytest.approx(0.3), 0.5)]


def test_wandb_export_reads_the_optimizer_step(tmp_path, capsys):
    # HF's WandbCallback logs train/global_step with every row; wandb's _step counts log calls (here one per
    # logging_steps=5 optimizer steps), so the optimizer step is train/global_step and the interval 5
    f = tmp_path / "history.csv"
    f.write_text("_step,train/global_step,train/reward\n" + "".join(f"{i},{5 * (i + 1)},{0.5}\n" for i in range(12)))
    assert cli(["import", "wandb", str(f), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "step column = train/global_step" in err and "one every 5 optimizer step(s)" in err
    assert [s for s, _ in steps(tmp_path / "r", ["task_score"])] == list(range(5, 65, 5))
