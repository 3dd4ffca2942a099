"""The collector's hot path on device tensors reads nothing back to the host while a step is recorded: a rollout
and deferred updates handed as device tensors queue their work and copies, and the step's end reads everything in
one copy (backends.HostCopy). On a CUDA device each read (``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``,
``bool(tensor)``) would make the host wait for the GPU; here CPU tensors take the device path (``_on_device``
patched) and the reads are counted, so CI guards the "one host wait per step" property without a GPU
(tests/gpu/test_cuda.py counts the CUDA synchronisations themselves)."""
from __future__ import annotations

import numpy as np
import pytest

import arldiag
from arldiag.backends import is_torch
from arldiag.collectors import collector
from gpu.device_inputs import feed, same_tables

torch = pytest.importorskip("torch")
READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero", "unique")
# indexing with a boolean tensor (x[mask], x[mask] = v) runs nonzero inside torch: on a GPU a host wait too
INDEXING = ("__getitem__", "__setitem__")


def _bool_index(idx) -> bool:
    parts = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


@pytest.fixture
def reads(monkeypatch):
    """Counts of the host-reading tensor methods, by name."""
    monkeypatch.setattr(collector, "_on_device", is_torch)
    counts = dict.fromkeys(READS + ("bool_index",), 0)
    for name in READS:
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, _name=name, **k):
            counts[_name] += 1
            return _orig(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    for name in INDEXING:
        orig = getattr(torch.Tensor, name)

        def indexed(self, idx, *a, _orig=orig):
            counts["bool_index"] += _bool_index(idx)
            return _orig(self, idx, *a)
        monkeypatch.setattr(torch.Tensor, name, indexed)
    return counts


def test_no_host_read_until_the_step_ends(reads, tmp_path):
    rng = np.random.default_rng(0)
    B, T = 16, 12
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x))  # noqa: E731
    mask = rng.random((B, T)) < 0.8
    lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
    ids = rng.integers(0, 40, (B, T))
    sid = np.arange(B) + 7
    with arldiag.Collector(tmp_path / "r", token_sample_rate=1.0, strict=True) as col:
        col.record_rollout(1, sample_ids=t(sid), group_ids=t(sid // 4), token_ids=t(ids), response_mask=t(mask),
                           logp_rollout=t(lpo), rewards=t(rng.random(B).astype(np.float32)))
        for u in range(2):
            r = slice(8 * u, 8 * u + 8)
            col.record_update(1, u, logp=t(lpo[r] + 0.1), logp_old=t(lpo[r]), advantages=t(rng.normal(size=8)),
                              response_mask=t(mask[r]), entropy=t(np.ones((8, T), np.float32)),
                              token_ids=t(ids[r]), sample_ids=t(sid[r]), defer=True)
        assert sum(reads.values()) == 0, reads   # nothing read back while the step is recorded
        col.record_step(1, {"loss": t(np.float32(0.5))})
        col.settle()   # the step's results land (with ``overlap`` they would during the next step)
        # the only reads are HostCopy's: its pinned buffers viewed as numpy, one per dtype, no per-tensor read
        assert reads["numpy"] > 0 and sum(reads.values()) == reads["numpy"], reads
    run = arldiag.open_run(tmp_path / "r")
    assert run.sql("select count(*) from tokens").fetchall()[0][0] == int(mask.sum())
    assert run.sql("select count(*) from tokens where token_id_rollout = token_id").fetchall()[0][0] == int(mask.sum())
    assert run.sql("select loss from steps").fetchall()[0][0] == pytest.approx(0.5)


@pytest.mark.parametrize("rate", [1.0, 0.3])
def test_device_path_stores_the_numpy_rows(monkeypatch, tmp_path, rate):
    """The device path (masked statistics, one copy, sample ids looked up on the device, deferred rollouts,
    overlap) stores the rows the numpy path stores; tests/gpu/test_cuda.py runs the same on CUDA."""
    kw = dict(clip=(0.2, 0.28), seq_clip=(0.05, 0.06), token_sample_rate=rate, strict=True)
    with arldiag.Collector(tmp_path / "np", **kw) as col:
        feed(col, lambda x: x, 5)
    monkeypatch.setattr(collector, "_on_device", is_torch)
    with arldiag.Collector(tmp_path / "dev", **kw) as col:
        feed(col, lambda x: torch.from_numpy(np.ascontiguousarray(x)), 5)
    same_tables(tmp_path / "np", tmp_path / "dev")


def test_device_path_with_samples_the_rollout_does_not_know(monkeypatch, tmp_path):
    """Sample ids on the device are looked up there, after the rollout's values were aligned: when none is in the
    rollout, the stored rows are still the host path's (no rollout log-prob or mismatch column, no retokenization
    aggregate)."""
    rng = np.random.default_rng(2)
    B, T = 8, 10
    mask = rng.random((B, T)) < 0.8
    lpo = rng.normal(-1, 0.5, (B, T)).astype(np.float32)
    ids = rng.integers(0, 40, (B, T))

    def record(col, conv):
        col.record_rollout(0, sample_ids=np.arange(B), token_ids=conv(ids), response_mask=conv(mask),
                           logp_rollout=conv(lpo))
        col.record_update(0, 0, logp=conv(lpo + 0.1), logp_old=conv(lpo), advantages=conv(np.ones(B, np.float32)),
                          response_mask=conv(mask), token_ids=conv(ids), sample_ids=conv(np.arange(B) + 100),
                          defer=True)
        col.record_step(0)

    with arldiag.Collector(tmp_path / "np", token_sample_rate=1.0, strict=True) as col:
        record(col, lambda x: x)
    monkeypatch.setattr(collector, "_on_device", is_torch)
    with arldiag.Collector(tmp_path / "dev", token_sample_rate=1.0, strict=True) as col:
        record(col, lambda x: torch.from_numpy(np.ascontiguousarray(x)))
    runs = [arldiag.open_run(tmp_path / n) for n in ("np", "dev")]
    for name, order in (("steps", "step"), ("sequences", "sample_id"), ("tokens", "sample_id, pos")):
        a, b = (r.sql(f"select * exclude (run{', time' if name == 'steps' else ''}) from {name} order by {order}").df()
                for r in runs)
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0, name
        for c in a.columns:
            np.testing.assert_allclose(b[c].astype(float), a[c].astype(float), rtol=1e-6, atol=1e-6, equal_nan=True,
                                       err_msg=f"{name}.{c}")
