"""The glossary is complete: every column of every table and every step metric is documented in docs/schema.md."""
from pathlib import Path

import arldiag
from arldiag.schema import STEP_AGG_NAMES, STEP_METRIC_NAMES, TABLE_COLUMNS
from arldiag.schema_doc import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "schema.md"


def test_schema_md_is_up_to_date():
    assert DOC.read_text() == render(), "docs/schema.md is stale: run `python -m arldiag.schema_doc > docs/schema.md`"


def test_every_stored_and_view_column_is_documented(tmp_path):
    text = DOC.read_text()
    names = set(STEP_AGG_NAMES) | set(STEP_METRIC_NAMES)
    for cols in TABLE_COLUMNS.values():
        names |= {c.name for c in cols}
    # and every column the reader actually exposes on a real run
    import numpy as np

    with arldiag.Collector(tmp_path / "r") as col:
        col.record_rollout(0, sample_ids=[1, 2], group_ids=[0, 0], rewards=[1.0, 0.0],
                           response_mask=np.ones((2, 3), bool))
        col.record_update(0, logp=np.zeros((2, 3)), logp_old=np.zeros((2, 3)), advantages=[1.0, -1.0],
                          response_mask=np.ones((2, 3), bool), sample_ids=[1, 2])
        col.record_step(0)
    run = arldiag.open_run(tmp_path / "r")
    for view in ("tokens", "sequences", "turns", "groups", "steps", "steps_raw", "alerts"):
        names |= set(run.columns(view))
    missing = sorted(n for n in names if f"`{n}`" not in text)
    assert not missing, f"undocumented columns: {missing}"
