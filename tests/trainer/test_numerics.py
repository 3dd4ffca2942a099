"""Pinned numerics (arldiag/trainer/numerics.py): the settings override the machine's own, come before
torch loads (or the process re-executes / refuses), run.json records them with a fingerprint, and short training runs
show it: unpinned runs under two ATEN_CPU_CAPABILITY values differ in their bits, pinned runs are bit-identical
whatever ATEN_CPU_CAPABILITY the caller had."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arldiag.trainer import numerics
from arldiag.trainer.config import make_config

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
sys.path.insert(0, str(SAMPLES))
import suite  # noqa: E402


def test_pinned_env_overrides_the_callers_own_settings_and_keeps_the_rest() -> None:
    mine = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO", "PATH": "/bin"}
    env = numerics.pinned_env(mine)
    assert env == {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                   "ONEDNN_MAX_CPU_ISA": "SSE41", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert mine["ATEN_CPU_CAPABILITY"] == "avx512"  # the caller's mapping is not changed
    assert numerics.missing_settings(mine) == {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO",
                                               "ONEDNN_MAX_CPU_ISA": None, "OMP_NUM_THREADS": None,
                                               "MKL_NUM_THREADS": None}
    assert numerics.missing_settings(env) == {}


def test_activate_refuses_a_process_whose_torch_loaded_without_the_settings(monkeypatch) -> None:
    import torch  # noqa: F401  (this test process has torch loaded, as a notebook would)

    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(numerics.NumericsError, match=r"MKL_CBWR=\(unset\).*arldiag train --reproducible"):
        numerics.activate()


def test_activate_refuses_settings_written_after_torch_chose_its_kernels(monkeypatch) -> None:
    import torch

    if torch.backends.cpu.get_cpu_capability() == numerics.PINNED_CAPABILITY:
        pytest.skip("this process already runs torch's baseline kernels")
    for key, value in numerics.PINNED_ENV.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(numerics.NumericsError, match="before torch is imported"):
        numerics.activate()


def test_record_fingerprints_the_setting_it_records() -> None:
    import numpy
    import torch
    import transformers

    rec = numerics.record(False)
    rest = {k: v for k, v in rec.items() if k != "fingerprint"}
    assert rec["fingerprint"] == hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:16]
    assert rec["pinned"] is False and rec["torch"] == torch.__version__
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(rec["env"]) == set(numerics.PINNED_ENV)
    # what else decides the bits: the packages' own version strings, the C library's own answer, the CPU's vendor
    assert rec["versions"]["transformers"] == transformers.__version__
    assert rec["versions"]["numpy"] == numpy.__version__
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else ""
    assert rec["versions"]["glibc"] == (libc.split()[-1] if libc.startswith("glibc") else None)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "vendor_id" in cpuinfo.read_text():
        assert rec["cpu_vendor"] in cpuinfo.read_text() and rec["cpu_vendor"] in ("GenuineIntel", "AuthenticAMD",
                                                                                   "HygonGenuine", "CentaurHauls")


def test_another_cpu_vendor_or_version_is_another_fingerprint(monkeypatch) -> None:
    """An AMD EPYC retrain of a pinned Intel run differed at step 0: the vendor is part of what the fingerprint
    promises, as are the versions (another glibc's expf, another transformers' op sequence)."""
    mine = numerics.record(True)
    monkeypatch.setattr(numerics, "cpu_vendor", lambda: "AuthenticAMD" if mine["cpu_vendor"] != "AuthenticAMD"
                        else "GenuineIntel")
    assert numerics.record(True)["fingerprint"] != mine["fingerprint"]
    monkeypatch.undo()
    assert numerics.record(True)["fingerprint"] == mine["fingerprint"]
    monkeypatch.setattr(numerics, "_version", lambda name: "0.0")
    assert numerics.record(True)["fingerprint"] != mine["fingerprint"]


def test_reproducible_runs_on_one_cpu_thread() -> None:
    with pytest.raises(ValueError, match="reproducible.*threads=2"):
        make_config("cispo", reproducible=True, threads=2)
    with pytest.raises(ValueError, match="device='cuda'"):
        make_config("cispo", reproducible=True, device="cuda")
    assert make_config("cispo", reproducible=True, threads=1).reproducible


def test_suite_commands_are_pinned_unless_asked_otherwise(capsys) -> None:
    assert all(args[-1] == "--reproducible" for args in suite.set_runs((73,), "lag").values())
    assert all(args[-1] == "--reproducible" for args in suite.runs((0,)).values())
    assert not any("--reproducible" in args for args in suite.runs((0,), pinned=False).values())
    assert suite.main(["list", "--set", "lag", "--seeds", "73", "--unpinned"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(suite.LAG_RUNS) and not any("--reproducible" in line for line in listed)


def _python(code: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _caller_env(capability: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_ENV and k != numerics.REEXEC_FLAG}
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    return env


def test_a_process_that_imported_torch_first_is_re_executed_with_the_settings(tmp_path) -> None:
    code = ("import torch, os\nfrom arldiag.trainer.numerics import ensure_environment\nensure_environment()\n"
            "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'], "
            "os.environ.get('ARLDIAG_NUMERICS_REEXEC'))")
    assert _python(code, _caller_env("avx2"), tmp_path) == "DEFAULT COMPATIBLE 1"


# A short run of the lag setting (the tour's) from the shipped warm start: 4 tasks x 4 rollouts, 6 steps, no eval.
# It prints the capability torch used and a hash of every step metric at full precision (timings left out).
TRAIN = """
import hashlib, json, sys
if {pinned}:
    from arldiag.trainer.numerics import ensure_environment
    ensure_environment()
import torch
from arldiag.trainer.config import make_config
from arldiag.trainer.loop import NullCollector, train
cfg = make_config("cispo", env="sokoban", obs_layout="short", room_size=5, max_walls=1, max_turns=8, max_moves=6,
                  n_tasks=4, group_size=4, hidden_size=128, lr=1.75e-4, rollout_lag=1, bc_seed=0, steps=6,
                  eval_every=0, seed=73, threads=1, reproducible={pinned}, out="unused")
hist = train(cfg, collector=NullCollector(), log=lambda s: None)["history"]
kept = [{{k: v for k, v in h.items() if not k.endswith("_s")}} for h in hist]
print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest(),
      repr(hist[0]["loss"]))
"""


@pytest.mark.slow
def test_unpinned_runs_differ_by_kernel_level_and_pinned_runs_are_bit_identical(tmp_path) -> None:
    """Measured here (Xeon with AVX-512, torch 2.13): the unpinned default/AVX2 runs agree to ~1e-7 in their first
    loss and in every success rate of 6 steps, but not in their bits (the seed a longer chaotic run amplifies); the
    pinned runs agree in every bit of every step metric."""
    unpinned = {cap: _python(TRAIN.format(pinned=False), _caller_env(cap), tmp_path).split() for cap in ("default", "avx2")}
    if unpinned["avx2"][0] != "AVX2":
        pytest.skip("this CPU has no AVX2: torch ignores ATEN_CPU_CAPABILITY=avx2")
    assert unpinned["default"][0] == "DEFAULT"
    assert unpinned["default"][1] != unpinned["avx2"][1]  # the bits part ways
    assert float(unpinned["default"][2]) == pytest.approx(float(unpinned["avx2"][2]), abs=1e-5)  # by rounding only
    pinned = [_python(TRAIN.format(pinned=True), _caller_env(cap), tmp_path).split() for cap in ("avx2", None)]
    assert pinned[0][0] == pinned[1][0] == "DEFAULT"
    assert pinned[0] == pinned[1]


# What the other kernel levels reachable on one machine would change, pinned: MKL held to SSE4.2 (MKL_CBWR=COMPATIBLE
# ignores it), glibc's libm without FMA/AVX2 (GLIBC_TUNABLES, read at process start: this fresh process has it),
# numpy without its AVX2/AVX-512 loops. benchmarks/numerics_ops.py measures the same op by op.
OTHER_LEVELS = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
                "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-FMA4"}


@pytest.mark.slow
def test_pinned_runs_ignore_the_mkl_libm_and_numpy_levels_of_the_machine(tmp_path) -> None:
    plain = _python(TRAIN.format(pinned=True), _caller_env(None), tmp_path).split()
    other = _python(TRAIN.format(pinned=True), {**_caller_env(None), **OTHER_LEVELS}, tmp_path).split()
    assert plain[0] == other[0] == "DEFAULT"
    assert plain == other
