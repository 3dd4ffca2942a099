"""benchmarks/peers_real.py: the peers' alerts turned into a state, the mapping, the tables, the generated doc."""
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import peers_real as pr  # noqa: E402


def _states(tl):
    return [st for _, _, st, _ in tl]


def test_hold_states_hand_worked():
    # warning at 3 holds steps 3-6 (until 3 + 4), critical at 8 holds 8-11, a warning at 20 runs to the end
    alerts = {3: [("warning", "a")], 8: [("critical", "b")], 20: [("warning", "c")]}
    tl = pr.hold_states(range(21), alerts, hold=4)
    assert _states(tl) == ["ok"] * 3 + ["warning"] * 4 + ["ok"] + ["critical"] * 4 + ["ok"] * 8 + ["warning"]
    assert [top for *_, top in tl][3:8] == ["a", "a", "a", "a", None]
    assert all(math.isnan(r) for _, r, _, _ in tl)


def test_hold_states_critical_is_kept_and_extended():
    # a warning while a critical is active keeps the critical and extends it: 0-5 critical (until 2 + 4), 6 ok;
    # of two alerts at one step the critical one wins
    tl = pr.hold_states(range(8), {0: [("critical", "x")], 2: [("warning", "y")]}, hold=4)
    assert _states(tl) == ["critical"] * 6 + ["ok"] * 2
    assert tl[2][3] == "y"
    tl = pr.hold_states([0, 1], {0: [("warning", "w"), ("critical", "c")]}, hold=1)
    assert tl[0][2:] == ("critical", "c") and tl[1][2] == "ok"


def test_hold_is_in_optimizer_steps_not_logged_points():
    # a log every 5 steps: an alert at step 10 held 10 steps covers the points 10 and 15 only
    tl = pr.hold_states([5, 10, 15, 20, 25], {10: [("warning", "d")]}, hold=10)
    assert _states(tl) == ["ok", "warning", "warning", "ok", "ok"]


def test_arldiag_columns_map_trl_and_verl_names():
    verl = pr.arldiag_columns(["actor/entropy", "critic/score/mean", "critic/rewards/mean", "actor/grad_norm",
                               "response_length/mean", "response_length/clip_ratio"])
    assert {k: verl.get(k) for k in ("entropy", "grad_norm", "reward_mean", "task_score", "response_length_mean",
                                     "truncated_frac")} == {
        "entropy": "actor/entropy", "grad_norm": "actor/grad_norm", "reward_mean": "critic/rewards/mean",
        "task_score": "critic/score/mean", "response_length_mean": "response_length/mean",
        "truncated_frac": "response_length/clip_ratio"}
    trl = pr.arldiag_columns(["entropy", "reward", "loss", "grad_norm", "completions/clipped_ratio",
                              "clip_ratio/region_mean", "rewards/mc_idx_reward/mean",
                              "rewards/think_format_reward/mean"])
    assert trl["reward_mean"] == "reward" and trl["truncated_frac"] == "completions/clipped_ratio"
    assert trl["task_score"] == "rewards/mc_idx_reward/mean"  # the accuracy-like reward function, not the format
    assert "entropy" not in trl  # already logged under arldiag's name: kept as it is


def test_rldoctor_columns_first_present_wins_and_components_pass():
    cols = ["step", "entropy", "reward_mean", "loss", "grad_norm", "truncated_frac", "clip_ratio_region_mean",
            "eval_success", "rewards/mc_idx_reward/mean", "rewards/mc_idx_reward/std"]
    assert pr.rldoctor_columns(cols) == {
        "entropy": "entropy", "reward_mean": "reward_mean", "policy_loss": "loss", "grad_norm": "grad_norm",
        "response_len_clip_ratio": "truncated_frac", "pg_clipfrac": "clip_ratio_region_mean",
        "eval_score": "eval_success", "rewards/mc_idx_reward/mean": "rewards/mc_idx_reward/mean"}
    assert pr.rldoctor_columns(["pg_clipfrac", "clip_ratio_region_mean"]) == {"pg_clipfrac": "pg_clipfrac"}


def test_rldoctor_reads_each_key_as_meant():
    aliases = pytest.importorskip("rl_doctor.aliases")
    assert {k: aliases.resolve(k) for k in pr.RLDOCTOR_MAPPING} == {k: k for k in pr.RLDOCTOR_MAPPING}
    assert aliases.resolve_reward_component("rewards/mc_idx_reward/mean") == "mc_idx_reward"


def test_rldoctor_timeline_warmup_and_one_announcement():
    pytest.importorskip("rl_doctor")
    # every grad norm exactly 0: rldoctor's gradient_pathology is CRITICAL (zero-step share >= 0.70), first checked
    # at the 60th record (LiveMonitor's min_steps), here step 59; announced once, held 10 steps: 59-68
    frame = pd.DataFrame({"step": range(100), "grad_norm": [0.0] * 100})
    tl = pr.rldoctor_timeline(frame, hold=10)
    assert [s for s, _, st, _ in tl if st != "ok"] == list(range(59, 69))
    assert {(st, top) for _, _, st, top in tl if st != "ok"} == {("critical", "gradient_pathology")}
    assert set(_states(pr.rldoctor_timeline(frame.iloc[:40], hold=10))) == {"ok"}  # 40 records: never checked


def test_rlprobe_timeline_min_steps_and_one_announcement():
    pytest.importorskip("rlprobe")
    # three grad-norm spikes 50x the median (rlprobe's GRAD_PATHOLOGY: >= 3 above 10x, critical): present from step
    # 9, but its watcher diagnoses nothing before 30 records, so the alert comes at the 30th (step 29), once
    g = [1.0] * 100
    for i in (3, 6, 9):
        g[i] = 50.0
    tl = pr.rlprobe_timeline(pd.DataFrame({"step": range(100), "grad_norm": g}), hold=10)
    assert [s for s, _, st, _ in tl if st != "ok"] == list(range(29, 39))
    assert {(st, top) for _, _, st, top in tl if st != "ok"} == {("critical", "GRAD_PATHOLOGY")}
    # the third spike after the minimum: announced at its own step
    g[9], g[40] = 1.0, 50.0
    tl = pr.rlprobe_timeline(pd.DataFrame({"step": range(100), "grad_norm": g}), hold=10)
    assert [s for s, _, st, _ in tl if st != "ok"] == list(range(40, 50))
    assert set(_states(pr.rlprobe_timeline(pd.DataFrame({"step": range(29), "grad_norm": [50.0] * 29})))) == {"ok"}


def test_rlprobe_mapping_names_step_record_fields():
    schemas = pytest.importorskip("rlprobe.schemas")
    assert set(pr.RLPROBE_MAPPING) <= set(schemas.StepRecord.model_fields)
    assert pr.first_present(pr.RLPROBE_MAPPING, ["pg_clipfrac", "clip_ratio_region_mean", "entropy"]) == {
        "clip_fraction": "pg_clipfrac", "entropy_mean": "entropy"}


def _set():
    """Four runs, states by hold_states, scored by the benchmark's own score(): hand-worked below."""
    tl = lambda steps, alerts, hold=10: (pr.hold_states(steps, alerts, hold), {})  # noqa: E731
    s200, s5 = list(range(200)), list(range(0, 200, 5))
    runs = [  # (name, label, {tool: timeline})
        ("c1", {"collapse_step": 100}, {"arldiag": tl(s200, {80: [("warning", "a")]}, 40),
                                         "rlwatch": tl(s200, {102: [("warning", "r")]}), "rldoctor": tl(s200, {}),
                                         "rlprobe": tl(s200, {95: [("warning", "p")]})}),
        ("c2", {"collapse_step": 50, "interval": 5}, {"arldiag": tl(s5, {45: [("warning", "a")]}),
                                                      "rlwatch": tl(s5, {70: [("critical", "r")]}),
                                                      "rldoctor": tl(s5, {}), "rlprobe": tl(s5, {})}),
        ("s1", {"collapse_step": None}, {"arldiag": tl(s200, {}), "rlwatch": tl(s200, {30: [("warning", "r")]}),
                                         "rldoctor": tl(s200, {}), "rlprobe": tl(s200, {})}),
        ("amb", {"collapse_step": None, "ambiguous": True},
         {"arldiag": tl(s200, {}), "rlwatch": tl(s200, {}), "rldoctor": tl(s200, {60: [("warning", "d")]}),
          "rlprobe": tl(s200, {})}),
    ]
    return {"runs": [{"run": n, "rows": pr.score(n, t, lab)} for n, lab, t in runs]}


def test_set_table_hand_worked():
    # c1 (collapse 100): arldiag's warning 80-119 is active at 100 (lead 20: caught); rlwatch's onset at 102 is
    # within 3 logged points after it (alarmed, no lead). c2 (collapse 50, every 5 steps): arldiag 45-54, lead 5
    # (alarmed, not 10 ahead); rlwatch's onset 70 is past 50 + 3 x 5. s1: rlwatch's warning at 30 is a false alarm.
    # amb: rldoctor's warning is on an ambiguous run, not counted. rlprobe's warning 95-104 is active at c1's
    # collapse (lead 5: alarmed, not 10 ahead)
    lines = pr.set_table(_set()).splitlines()
    assert lines[0].startswith("| tool | collapses warned >= 10 steps ahead | collapses alarmed before or within 3")
    assert lines[2:] == ["| arldiag | 1 of 2 | 2 of 2 | 1 of 1 | 0 |",
                         "| rlwatch 0.5.1 | 0 of 2 | 1 of 2 | 0 of 1 | 1 |",
                         "| rldoctor 0.2.0 | 0 of 2 | 0 of 2 | 1 of 1 | 0 |",
                         "| rlprobe 0.1.0 | 0 of 2 | 1 of 2 | 1 of 1 | 0 |"]


def test_runs_table_hand_worked():
    lines = pr.runs_table(_set()).splitlines()
    assert lines[0] == ("| run | label | arldiag: first warning / lead | rlwatch 0.5.1: first warning / lead | "
                        "rldoctor 0.2.0: first warning / lead | rlprobe 0.1.0: first warning / lead |")
    assert lines[2:] == ["| c1 | collapse 100 | 80 / 20 | 102 / - | - / - | 95 / 5 |",
                         "| c2 | collapse 50 | 45 / 5 | 70 / - | - / - | - / - |",
                         "| s1 | stable | - | 30 | - | - |",
                         "| amb | ambiguous | - | - | 60 | - |"]


def test_write_doc_inserts_before_catalog_then_replaces(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# T\n\nintro\n\n## Catalog\nx\n")
    pr.write_doc("S\n", doc)
    assert doc.read_text() == f"# T\n\nintro\n\n{pr.START}\nS\n{pr.END}\n\n## Catalog\nx\n"
    pr.write_doc("S2\nmore\n", doc)
    assert doc.read_text() == f"# T\n\nintro\n\n{pr.START}\nS2\nmore\n{pr.END}\n\n## Catalog\nx\n"


def test_missing_real_runs_exit_with_a_message(tmp_path):
    with pytest.raises(SystemExit, match="no real runs at"):
        pr.main(["--real", str(tmp_path / "nope")])


def test_generated_section_in_docs_names_all_four_tools():
    text = pr.DOC.read_text(encoding="utf-8")
    assert pr.START in text and pr.END in text
    a, b = text.index(pr.START), text.index(pr.END)
    assert a < b < text.index("\n## Catalog")
    body = text[a:b]
    for name in ("arldiag", "rlwatch 0.5.1", "rldoctor 0.2.0", "rlprobe 0.1.0", "Real development runs",
                 "sample runs"):
        assert name in body
