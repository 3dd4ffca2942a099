import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the _detect_cases / _synth_runs helpers


@pytest.fixture(scope="session")
def synth_runs(tmp_path_factory):
    """{kind: (run_dir, online Monitor)} for a healthy and a collapsing synthetic run written by the Collector."""
    from _synth_runs import write_run

    import arldiag

    root = tmp_path_factory.mktemp("detect_runs")
    out = {}
    for kind in ("healthy", "collapse"):
        m = arldiag.Monitor(sinks=["store"])
        write_run(root / kind, kind, monitor=m, name=kind)
        out[kind] = (root / kind, m)
    return out
