"""arldiag/evaluation/peer_rlwatch.py: rlwatch's default configuration fed the mapped step metrics, turned into a state."""

import pandas as pd
import pytest

pytest.importorskip("rlwatch")  # the `peer` extra (part of `test`)
from arldiag.evaluation import peer_rlwatch  # noqa: E402


def test_entropy_below_threshold_hand_worked():
    # rlwatch defaults: entropy threshold 1.0, warm-up 20 checks, warning after 25 consecutive steps below (half of
    # consecutive_steps 50), critical after 50. Entropy 0.5 from step 0: the first counted check is step 19, so the
    # warning is sent at step 43 and the critical at step 68; each holds the state for `hold` steps
    frame = pd.DataFrame({"step": range(100), "entropy": [0.5] * 100})
    tl = peer_rlwatch.rlwatch_timeline(frame, hold=10)
    states = {s: st for s, _, st, _ in tl}
    assert [s for s in range(100) if states[s] == "warning"] == list(range(43, 53))
    assert [s for s in range(100) if states[s] == "critical"] == list(range(68, 78))
    assert {top for s, _, st, top in tl if st != "ok"} == {"entropy_collapse"}


def test_compare_scores_both_tools_on_the_same_runs(synth_runs):
    from arldiag.store.reader import open_run

    res = peer_rlwatch.compare(open_run(str(synth_runs["collapse"][0])))
    assert [r["run"] for r in res["runs"]["arldiag"]] == [r["run"] for r in res["runs"]["rlwatch"]]
    a, b = res["runs"]["arldiag"][0], res["runs"]["rlwatch"][0]
    assert a["collapse_step"] == b["collapse_step"] is not None  # the same label for both tools
    assert "| recall@10 (warned >= 10 steps ahead) |" in peer_rlwatch.table(res)
