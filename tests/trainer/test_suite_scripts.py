"""The suite's scripts (sample_runs/suite.py, summarize.py): every listed command is a valid `arldiag train` command
whose resolved config carries the shared setting, the seed's split and only the run's own differences; the tables'
per-algorithm counts follow their definitions on hand-made rows."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
sys.path.insert(0, str(SAMPLES))
import suite  # noqa: E402
import summarize  # noqa: E402


def _config(args: list[str]):
    from arldiag.trainer.cli import add_arguments
    from arldiag.trainer.config import config_from_args

    assert args[:2] == ["arldiag", "train"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(args[2:]))


@pytest.mark.parametrize("name,args", list(suite.runs().items()) + list(suite.set_runs().items())
                         + list(suite.set_runs(which="lag").items()) + list(suite.set_runs(which="levers").items()))
def test_every_command_resolves_to_the_shared_setting(name, args) -> None:
    setting = (suite.STRESS if name in suite.set_runs() else suite.LAG if name in suite.set_runs(which="lag")
               else suite.LEVERS if name in suite.set_runs(which="levers") else suite.SETTING)
    base = name.rsplit("_s", 1)[0]
    extra = {**suite.ALGORITHM_RUNS, **suite.STRESS_RUNS, **suite.LAG_RUNS, **suite.LEVER_RUNS,
             **suite.EXTRA_RUNS}.get(base, (None, {}))[1]
    cfg = _config(args)
    assert cfg.name == name and cfg.out == f"sample_runs/{name}"
    if name in suite.EXTRA_RUNS:
        return
    seed = int(name.rsplit("_s", 1)[1])
    assert cfg.seed == seed and cfg.resolved_split() == ("dev" if seed < 3 else "heldout")
    for key, value in {**setting, **extra}.items():
        assert getattr(cfg, key) == value, (name, key)


def test_runs_differ_only_in_algorithm_seed_and_their_extras() -> None:
    seen = {}
    for name, args in suite.runs().items():
        if name in suite.EXTRA_RUNS:
            continue
        opts = [a for a in args[2:]]
        for flag in ("--algo", "--out", "--name", "--seed"):
            i = opts.index(flag)
            del opts[i:i + 2]
        base = name.rsplit("_s", 1)[0]
        seen.setdefault(base, set()).add(tuple(opts))
    assert all(len(v) == 1 for v in seen.values())  # the same options for every seed


def test_the_lag_set_differs_from_the_suite_setting_only_in_lr_rollout_lag_and_its_shared_warm_start() -> None:
    cfg = _config(suite.set_runs((7,), which="lag")["cispo_lag1_s7"])
    base = _config(suite.runs((7,))["cispo_s7"])
    differ = {k for k in vars(cfg) if getattr(cfg, k) != getattr(base, k)}
    assert differ == {"lr", "rollout_lag", "bc_seed", "name", "out"}, differ
    assert cfg.bc_seed == 0  # every lag run starts from the shipped warm start (tests/trainer/test_warm_start.py)
    assert (cfg.lr, cfg.rollout_lag, cfg.resolved_split()) == (1.75e-4, 1, "dev")  # seed 7: 7 % 5 = 2, dev


def test_the_levers_set_is_grpo_with_an_entropy_bonus_and_the_loops_two_policies() -> None:
    runs = suite.set_runs((3,), which="levers")
    assert list(runs) == ["grpo_ent10_s3", "grpo_ent10_auto_s3", "grpo_ent10_levers_s3"]
    cfg = _config(runs["grpo_ent10_levers_s3"])
    base = _config(suite.runs((3,))["grpo_s3"])
    differ = {k for k in vars(cfg) if getattr(cfg, k) != getattr(base, k)}
    assert differ == {"ent_coef", "steps", "auto_stabilize", "name", "out"}, differ
    assert (cfg.ent_coef, cfg.steps, cfg.auto_stabilize) == (0.1, 100, "levers")
    assert _config(runs["grpo_ent10_auto_s3"]).auto_stabilize == "default"


def _row(algo, start, peak, collapse, mask=False, final=0.3, gain150=0.0, name=None, actions=(), auto=None):
    return dict(gain150=gain150, actions=list(actions), auto=auto, name=name or algo, algo=algo, seed=0, split="dev", nalis_mask=mask, steps=200, start=start, peak=peak,
                peak_step=50, final=final, collapse=collapse, valid_end=1.0, kl_max=0.1, nalis_peak=0.0,
                share_peak=0.0, nalis_lead=None, wall_min=1.0)


def test_table_counts_follow_their_definitions() -> None:
    rows = [_row("cispo", 0.20, 0.36, 60, gain150=0.26), _row("cispo", 0.20, 0.34, None, gain150=0.24),  # +16; +14
            _row("cispo", 0.20, 0.50, 40), _row("cispo", 0.20, 0.50, None, mask=True)]  # 40 is not "after 40"
    text = summarize.tables(rows)
    by = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in text.splitlines() if line.startswith("| cispo")}
    # runs, learned (+15 points), +25 within 150 steps, collapsed after step 40, collapsed at all, median peak, final
    assert by["cispo"][:5] == ["3", "2", "1", "1", "2"] and by["cispo"][5] == "0.36 [0.34, 0.50]"
    assert by["cispo + mask"][:5] == ["1", "1", "0", "0", "0"]


def test_stress_pairs_put_each_seed_beside_its_stabilised_twin() -> None:
    rows = [_row("cispo", 0.2, 0.45, 180, final=0.09, name="x_s4"),
            _row("cispo", 0.2, 0.84, None, final=0.67, name="x_auto_s4", actions=[(20, "nalis_mask")], auto="default"),
            _row("cispo", 0.2, 0.45, None, final=0.43, name="x_s1")]  # no twin: no row
    lines = [ln for ln in summarize.stress_pairs(rows).splitlines()[2:]]
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].split("|")[1:-1]]
    assert cells[1:] == ["0.45 / 0.09 / 180", "0.84 / 0.67 / none", "+0.58", "20: nalis_mask"]
    groups = [ln.split("|")[1].strip() for ln in summarize.tables(rows).splitlines() if ln.startswith("| cispo")]
    assert groups == ["cispo", "cispo + auto-stabilize default"]


def test_run_names_may_follow_the_options(monkeypatch, tmp_path) -> None:
    """`suite.py run --set stress --seeds 25-29 NAME ...` (names after the options) trains exactly those runs, with
    the seeds' split; run_one is replaced by a recorder, so nothing is trained."""
    seen = []
    monkeypatch.setattr(suite, "run_one", lambda name, args, out: seen.append((name, args)) or (name, 0, 0.0))
    assert suite.main(["run", "--set", "stress", "--seeds", "25-29", "--out", str(tmp_path),
                       "cispo_lr25_s28", "cispo_lr25_s25"]) == 0
    assert [n for n, _ in seen] == ["cispo_lr25_s28", "cispo_lr25_s25"]
    assert [_config(a).resolved_split() for _, a in seen] == ["heldout", "dev"]
    assert suite.main(["run", "--seeds", "25-29", "cispo_lr25_s30"]) == 2  # not among these seeds: a clear refusal


def _curve_row(name, seed, curve, collapse=None, decline=None, actions=(), **kw):
    steps = [10 * i for i in range(len(curve))]
    row = _row("cispo", curve[0], max(curve), collapse, final=curve[-1], name=f"{name}_s{seed}", actions=actions, **kw)
    return dict(row, seed=seed, split="heldout", eval_steps=steps, eval_success=list(curve), decline=decline,
                warm_start={"fingerprint": "f" * 16, "source": "shipped", "sha256": "0"})


def test_mitigation_table_follows_its_definitions() -> None:
    rows = [_curve_row("cispo_lag1", 3, [0.2, 0.4, 0.1], collapse=20),  # plain peak 0.4
            _curve_row("cispo_tis_lag1", 3, [0.2, 0.3, 0.5, 0.6]),  # reaches 0.4 at step 20
            _curve_row("cispo_lag1", 8, [0.2, 0.3, 0.3]),  # plain peak 0.3
            _curve_row("cispo_tis_lag1", 8, [0.2, 0.25, 0.05], decline=20),  # never reaches 0.3
            _curve_row("cispo_lag1_auto", 3, [0.2, 0.4, 0.45], actions=[(15, "rollback"), (15, "nalis_mask")]),
            dict(_curve_row("cispo_lag1", 13, [0.2, 0.9]), split="dev"),  # dev seeds stay out
            dict(_curve_row("cispo_tis_lag1", 13, [0.2, 0.9]), legacy=True)]  # so do earlier warm starts
    lines = summarize.mitigation_table(rows).splitlines()
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines if ln.startswith("| ")}
    # seeds, collapsed, declined, median peak, median final, final - plain's final, reach (never), actions
    # medians with [the order-statistic interval]: with 2 seeds, both of them
    assert cells["plain CISPO"][:7] == ["2", "1", "0", "0.35 [0.30, 0.40]", "0.20 [0.10, 0.30]", "+0.00 [+0.00, +0.00]",
                                        "10 (0)"]
    assert cells["+ truncated IS, C = 2"][:7] == ["2", "0", "1", "0.42 [0.25, 0.60]", "0.33 [0.05, 0.60]",
                                                  "+0.12 [-0.25, +0.50]", "20 (1)"]
    assert cells["+ --auto-stabilize default"][:7] == ["1", "0", "0", "0.45", "0.45", "+0.35", "10 (0)"]
    assert cells["+ --auto-stabilize default"][7] == "3: 15 rollback, 15 nalis_mask"
    assert cells["3"] == ["0.40 / 0.10 (collapse 20)", "0.60 / 0.60", "0.45 / 0.45"]
    assert cells["8"][1] == "0.25 / 0.05 (decline 20)" and "13" not in cells
    # the reading: each always-on arm against the loop on the seeds both have (seed 3 only: 0.60 against 0.45)
    assert lines[-1] == ("- + truncated IS, C = 2: median final 0.60 against the loop's 0.45 on the same 1 seed(s); "
                         "the loop ends lower on 1 of them.")


def test_committed_rows_round_trip_through_summaries(tmp_path, monkeypatch) -> None:
    """A generated table's rows re-read as summaries give the same rows; `table --set lag --write` rebuilds the
    README blocks from the summaries alone (replacing a row by name), and without --write writes nothing."""
    rows = [dict(_row("cispo", 0.2, 0.45, 150, final=0.05, name="cispo_lag1_s3"), split="heldout", seed=3),
            dict(_row("cispo", 0.26, 0.5, None, final=0.4, name="cispo_nalis_lag1_s3", mask=True), seed=3)]
    text = summarize.tables(rows)
    back = summarize.rows_from_table(text)
    assert [ln for ln in summarize.tables(back).splitlines()[:4]] == text.splitlines()[:4]
    assert back[0]["legacy"] and back[0]["gain150"] == pytest.approx(0.25)  # peak at step 50: known
    monkeypatch.setattr(summarize, "SUMMARIES", tmp_path / "summaries")
    monkeypatch.setattr(summarize, "HERE", tmp_path)
    (tmp_path / "README.md").write_text("top\n<!-- lag-table:start -->\nold\n<!-- lag-table:end -->\nbottom\n")
    summarize.save_summaries(back, "lag")
    fresh = _curve_row("cispo_lag1", 3, [0.24, 0.5, 0.3])
    summarize.save_summaries([fresh], "lag")  # a retraining replaces the row of its name
    assert suite.lag_table(str(suite.HERE), suite.set_runs((3,), "lag"), write=False) == 0
    assert "old" in (tmp_path / "README.md").read_text()
    assert suite.lag_table(str(suite.HERE), suite.set_runs((3,), "lag"), write=True) == 0
    body = (tmp_path / "README.md").read_text()
    assert body.startswith("top\n") and "bottom" in body and "\nold\n" not in body
    new, old = body.split("Trained from the earlier")
    assert "| cispo_lag1_s3 | heldout | 0.24 | 0.50 (50) | 0.30 |" in new and "cispo_lag1_s3" not in old
    assert "| cispo_nalis_lag1_s3 |" in old
    assert "<!-- mitigations-table:start -->" in body and "| plain CISPO | 1 |" in body


def test_reach_step_reads_the_rounded_curve_of_a_summary() -> None:
    # eval success 89/128 = 0.6953125 is kept as 0.695312 in a summary; the run still reached its own peak
    r = dict(eval_steps=[0, 10, 20], eval_success=[0.2, round(89 / 128, 6), 0.5])
    assert summarize.reach_step(r, 89 / 128) == 10 and summarize.reach_step(r, 0.7) is None


def test_levers_table_follows_its_definitions(tmp_path, monkeypatch) -> None:
    """The levers set's block: every seed of the plain arm (dev or held out), the loop's actions per seed; `table
    --set levers --write` writes it from the summaries."""
    rows = [dict(_curve_row("grpo_ent10", 3, [0.2, 0.4, 0.0], collapse=20), split="dev"),
            _curve_row("grpo_ent10_auto", 3, [0.2, 0.4, 0.5], actions=[(12, "entropy_coef")], auto="default"),
            _curve_row("grpo_ent10_levers", 3, [0.2, 0.3, 0.3], auto="levers")]
    lines = summarize.arm_table(rows, summarize.LEVER_ARMS, split=None).splitlines()
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines if ln.startswith("| ")}
    assert cells["plain GRPO, entropy bonus 0.1"][:6] == ["1", "1", "0", "0.40", "0.00", "+0.00"]
    assert cells["+ --auto-stabilize default"][5:] == ["+0.50", "10 (0)", "3: 12 entropy_coef"]
    assert cells["+ --auto-stabilize levers"][6:] == ["- (1)", "none"]  # never reached 0.4; a loop that did nothing
    assert cells["3"] == ["0.40 / 0.00 (collapse 20)", "0.50 / 0.50", "0.30 / 0.30"]
    monkeypatch.setattr(summarize, "SUMMARIES", tmp_path / "summaries")
    monkeypatch.setattr(summarize, "HERE", tmp_path)
    (tmp_path / "README.md").write_text("top\n")
    summarize.save_summaries(rows, "levers")
    assert suite.lag_table(str(suite.HERE), suite.set_runs((3,), "levers"), write=True, which="levers") == 0
    body = (tmp_path / "README.md").read_text()
    assert "<!-- levers-table:start -->" in body and "| plain GRPO, entropy bonus 0.1 | 1 |" in body
    assert "mitigations-table" not in body


def test_median_interval_is_the_order_statistic_pair_that_covers_the_median() -> None:
    """P(x_(k) <= median <= x_(n+1-k)) is the chance that between k and n-k of n draws fall below the median: counted
    here over every below/above pattern of the draws (each has probability 2^-n), not from the binomial formula."""
    import itertools

    def covered(n: int, k: int) -> float:
        return sum(k <= sum(p) <= n - k for p in itertools.product((0, 1), repeat=n)) / 2 ** n

    values = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.0]  # 10 seeds: 0.0 ... 0.9
    lo, hi, cov = summarize.median_interval(values)
    assert (lo, hi) == (0.1, 0.8) and cov == pytest.approx(covered(10, 2))  # k = 2: 97.9 %; k = 3 would be 89.1 %
    assert covered(10, 3) < 0.9 <= covered(10, 2)
    assert summarize.median_interval([0.3, 0.1, 0.2, 0.5, 0.4])[:2] == (0.1, 0.5)  # 5 seeds: only the full range
    assert summarize.fmt_median([0.1, 0.5, 0.2]) == "0.20 [0.10, 0.50]" and summarize.fmt_median([0.4]) == "0.40"
    assert "10 seeds: the 2nd smallest and 2nd largest, 97.9 %" in summarize.interval_note([10, 10])


def test_each_table_says_how_many_of_its_rows_are_pinned() -> None:
    rows = [dict(_row("cispo", 0.2, 0.4, None, name="cispo_lag1_s73"), pinned=True),
            _row("cispo", 0.2, 0.4, None, name="cispo_lag1_s74")]
    assert summarize.tables(rows).splitlines()[0].startswith("Rows pinned: 1 of 2 (cispo_lag1_s73:")
    assert summarize.tables(rows[1:]).splitlines()[0].startswith("Rows pinned: none of 1 ")
    assert summarize.tables(rows[:1]).splitlines()[0].startswith("Rows pinned: all 1 ")
