"""Many ranks: 4 processes with torch.distributed (gloo, CPU, 127.0.0.1), each with its own Collector on the same
run. Readers see one run whose step aggregates equal those of one process fed the same data, and with
``process_group`` the monitor on rank 0 sees the whole step (the reduced aggregates)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pytest

import arldiag

pytest.importorskip("torch")
WORLD, STEPS, B, T = 4, 3, 6, 10

WORKER = r"""
import json, sys
import numpy as np, torch, torch.distributed as dist
import arldiag
torch.set_num_threads(1)
rank, world, port, root, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
sys.path.insert(0, sys.argv[6])
from test_distributed import batches

class Seen:
    def __init__(self): self.steps = {}
    def bind(self, col): pass
    def on_step(self, step, metrics): self.steps[step] = metrics

seen = Seen()
with arldiag.Collector(root, rank=rank, world_size=world, clip=(0.2, 0.28), token_sample_rate=1.0, strict=True,
                       monitor=seen, process_group=True) as col:
    for step in range(%(steps)d):
        for u, b in enumerate(batches(step, rank)):
            col.record_update(step, u, **b)
        col.record_step(step, {"lr": 1e-3})
json.dump({str(k): v for k, v in seen.steps.items()}, open(out, "w"))
dist.destroy_process_group()
""" % {"steps": STEPS}


def batches(step: int, rank: int):
    """Two updates of rank ``rank`` at ``step`` (deterministic: the single-process reference replays them)."""
    rng = np.random.default_rng([step, rank])
    out = []
    for u in range(2):
        mask = rng.random((B, T)) < 0.8
        mask[:, 0] = True
        lpo = rng.normal(-1.0, 0.5, (B, T)).astype(np.float32)
        out.append(dict(logp=(lpo + rng.normal(0, 0.2, (B, T))).astype(np.float32), logp_old=lpo,
                        advantages=rng.normal(0, 1, B).astype(np.float32), response_mask=mask,
                        logp_ref=(lpo + rng.normal(0, 0.1, (B, T))).astype(np.float32),
                        sample_ids=1000 * step + 100 * rank + 10 * u + np.arange(B)))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_four_ranks_read_as_one_run(tmp_path):
    root, port = tmp_path / "dist", _free_port()
    here = str(__import__("pathlib").Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r), str(WORLD), str(port), str(root),
                               str(tmp_path / f"seen{r}.json"), here], stderr=subprocess.PIPE, text=True)
             for r in range(WORLD)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]

    # the same data through one process and one collector
    with arldiag.Collector(tmp_path / "one", clip=(0.2, 0.28), token_sample_rate=1.0, strict=True) as col:
        for step in range(STEPS):
            u = 0
            for rank in range(WORLD):
                for b in batches(step, rank):
                    col.record_update(step, u, **b)
                    u += 1
            col.record_step(step, {"lr": 1e-3})

    dist_run, one = arldiag.open_run(root), arldiag.open_run(tmp_path / "one")
    assert dist_run.sql("select count(distinct rank) from steps_raw").fetchall()[0][0] == WORLD
    a = dist_run.sql("select * exclude (run, time) from steps order by step").df()
    b = one.sql("select * exclude (run, time) from steps order by step").df()
    # n_updates is per rank (max over ranks); kl_top_share / kl_top1pct_share is each rank's top 1 % (max over
    # ranks): by definition not the single process's values
    skip = {"n_updates", "kl_top_share", "kl_top1pct_share"}
    cols = [c for c in b.columns if c not in skip]
    assert len(a) == STEPS and set(cols) <= set(a.columns)
    for c in cols:
        np.testing.assert_allclose(a[c].astype(float), b[c].astype(float), rtol=1e-9, atol=1e-12,
                                   equal_nan=True, err_msg=c)
    assert dist_run.count("tokens") == one.count("tokens")

    # the monitor ran on rank 0 only, with the whole step
    seen = [json.loads((tmp_path / f"seen{r}.json").read_text()) for r in range(WORLD)]
    assert all(s == {} for s in seen[1:]) and sorted(seen[0]) == [str(s) for s in range(STEPS)]
    for step in range(STEPS):
        m = seen[0][str(step)]
        for c in ("n_tokens", "ppo_kl", "pg_clipfrac", "neg_adv_low_is_frac", "kl_ref_k3", "ratio_mean"):
            assert m[c] == pytest.approx(float(b[c][step]), rel=1e-9, abs=1e-12, nan_ok=True), c
