"""arldiag/evaluation/results.py: the markdown tables and the generated sections between markers."""
from pathlib import Path

import pytest

from arldiag.evaluation import results as dr  # noqa: E402

S = {"recall_at_10": 0.5, "recall_at_20": 0.25, "median_lead": 12.5, "false_alarm_episodes": 3,
     "false_alarms_per_100_healthy_steps": 0.1234, "healthy_warning_share": 0.0049, "stable_runs_with_warning": 2,
     "nab_score": 41.26, "runs": 10, "collapsing": 4, "early_collapses": 1, "stable": 5, "fault": 0,
     "declines": 1, "declines_warned": 1}
NONE = dict(S, recall_at_10=None, recall_at_20=None, median_lead=None, nab_score=None, collapsing=0,
            early_collapses=0, runs=6)


def test_figures_table_cells():
    t = dr.figures_table([("A", S), ("B", NONE)]).splitlines()
    assert t[0] == "| figure | A | B |" and t[1] == "|---|---|---|"
    row = {line.split(" | ")[0][2:]: line for line in t[2:]}
    assert row["recall@10 (warned >= 10 steps ahead)"].endswith("| 2/4 (50 %) | n/a (no collapse) |")
    assert row["median lead (steps)"].endswith("| 12.50 | - |")
    assert row["false-alarm episodes / 100 healthy steps"].endswith("| 0.12 | 0.12 |")
    assert row["healthy steps in warning"].endswith("| 0.5 % | 0.5 % |")
    assert row["stable runs with a false alarm"].endswith("| 2 of 5 | 2 of 5 |")
    assert row["declining runs warned near their decline (not scored)"].endswith("| 1 of 1 | 1 of 1 |")
    assert row["NAB score"].endswith("| 41.3 | - |")
    assert t[-1] == ("| runs (collapsing / early / stable / declining / fault) | 10 (4 / 1 / 5 / 1 / 0) "
                     "| 6 (0 / 0 / 5 / 1 / 0) |")
    assert len(t) == 2 + len(dr.FIGURES) + 1


def test_per_run_table():
    a = {"lead_time": 12, "false_alarms": 0, "false_alarm_episodes": [], "warning_share": 0.25}
    b = {"lead_time": None, "false_alarms": 2, "false_alarm_episodes": [[3, 6], [90, None]], "warning_share": 0.1}
    t = dr.per_run_table([{"run": "x", "split": "dev", "kind": "collapse", "collapse": 50, "dips": [(10, 20)],
                           "tools": {"p": a, "q": b}}]).splitlines()
    assert t[0].count("|") == 12 and t[1] == "|---" * 11 + "|"
    assert t[2] == "| x | dev | collapse | 50 | 10-19 | 12 | 0 | 25 % | - | 2 (3-5, 90-end) | 10 % |"
    # a declining run shows its decline step with a d
    t = dr.per_run_table([{"run": "y", "split": "dev", "kind": "decline", "collapse": None, "decline": 80,
                           "dips": [], "tools": {"p": a, "q": b}}]).splitlines()
    assert t[2].startswith("| y | dev | decline | 80d | - |")


def test_replace_between_keeps_the_rest():
    text = f"head\n{dr.begin('t')}\nold\nlines\n{dr.end('t')}\ntail\n"
    new = dr.replace_between(text, "t", "new body\n")
    assert new == f"head\n{dr.begin('t')}\nnew body\n{dr.end('t')}\ntail\n"
    assert dr.replace_between(new, "t", "new body") == new  # idempotent
    with pytest.raises(ValueError, match="markers for 'other'"):
        dr.replace_between(text, "other", "x")


def test_targets_lines():
    lines = dr.targets(NONE)
    assert lines[0].endswith("-> n/a") and "2 of 5 stable runs" in lines[2] and lines[2].endswith("**not met**")
    assert "(1 declining run(s) not counted)" in lines[2]
    assert lines[3].endswith("0.5 % -> met")


def test_docs_and_readme_have_the_markers():
    root = Path(__file__).resolve().parents[2]
    for f, tag in (("docs/detectors.md", "detection-results"), ("docs/toy-detection.md", "detection-headline")):
        text = (root / f).read_text()
        assert dr.begin(tag) in text and dr.end(tag) in text


def test_regenerate_explains_exactly_the_placeholders_it_uses():
    only_suite = dr.regenerate("'SUITE/*_s[0-9]'")
    assert "`sample_runs/suite.py all --out SUITE`" in only_suite and "STRESS" not in only_suite
    both = dr.regenerate("'SUITE/*_s[0-9]' 'LAG/cispo_lag1_s[0-9]'")
    assert both.index("SUITE") < both.index("--set lag") and "--set stress" not in both
    assert dr.regenerate("runs/x") == "`python benchmarks/calibrate.py runs/x --write`"
