"""Pinned numerics: the reference trainer's floating point held to one kernel path, so a rerun gives the same bits.

A chaotic RL run turns the last bit of a matrix product into a different outcome (the tour's lag run collapses on
one machine and not on another). What differs between machines is which vectorised kernels torch, MKL and oneDNN pick
for the CPU at hand, and how many threads split a reduction. Pinned numerics hold all of them to one path:

  ATEN_CPU_CAPABILITY=default   torch's own kernels (reductions, softmax, SDPA attention, elementwise): the baseline
                                build, no AVX
  MKL_CBWR=COMPATIBLE           MKL's conditional numerical reproducibility: its SGEMM and vector-math (exp, log,
                                tanh, sqrt) code path that ignores the CPU's instruction set
  ONEDNN_MAX_CPU_ISA=SSE41      oneDNN's kernels held to SSE4.1 (its lowest level; the policy's float32 ops do not
                                reach oneDNN, this guards those that would)
  OMP_NUM_THREADS=MKL_NUM_THREADS=1, torch.set_num_threads(1): one thread, so no reduction is split differently
  torch.use_deterministic_algorithms(True): an op without a deterministic implementation raises instead of varying

What this guarantees (measured op by op with benchmarks/numerics_ops.py; docs/reference-trainer.md, "What pinned
numerics guarantee"): on one machine, the same bits whatever kernel level the caller's environment or the CPU
would pick (torch's AVX2/AVX-512, MKL's AVX2/AVX-512/SSE4.2 branches, oneDNN's levels, glibc's FMA or SSE2 libm
variants, numpy's dispatch levels all leave every result of the policy's forward, backward and AdamW step
unchanged). What it does not: the same bits on another CPU vendor (a retrain on an AMD EPYC differed from the Intel
run at step 0 by 7e-7, and nothing reachable on an Intel machine reproduces that), or with another torch (which
bundles MKL), transformers (which writes the policy's op sequence), numpy or glibc (whose expf/logf torch's baseline
softmax, log_softmax and SiLU call). ``record()`` fingerprints all of these, so two runs with the same fingerprint
and the same config are expected to be bit-identical, and runs whose fingerprints differ are expected to agree only
in distribution (the collapse and the rescue over seeds, not one run's bits).

The three library settings are read once, when torch (MKL, oneDNN) first loads or dispatches, so they must be in the
environment *before* torch is imported: ``ensure_environment()`` sets them in a process that has not imported torch
and re-executes the command otherwise (the CLI's path); ``activate()`` checks them in a process where torch is
already loaded and refuses with a clear error if they came too late (the Python API's path). glibc's FMA/SSE2 libm
choice (GLIBC_TUNABLES, read only at process start) is deliberately not pinned: it changes the double-precision
exp/log/pow/tanh by one ulp (2e-16) and none of the trainer's float32 results.

``python -m arldiag.trainer.numerics`` prints the settings as ``export`` lines (``eval "$(python -m ...)"``).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any, Mapping, Optional

# Names and values: PyTorch's ATEN_CPU_CAPABILITY (default | avx2 | avx512 on x86), Intel MKL's MKL_CBWR (COMPATIBLE:
# the branch every Intel/AMD x86-64 CPU runs), oneDNN's ONEDNN_MAX_CPU_ISA (SSE41 is its lowest ISA level).
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# set by ensure_environment() on the re-executed process, so a second mismatch is an error rather than a loop
REEXEC_FLAG = "ARLDIAG_NUMERICS_REEXEC"
# torch.backends.cpu.get_cpu_capability() under ATEN_CPU_CAPABILITY=default
PINNED_CAPABILITY = "DEFAULT"


class NumericsError(RuntimeError):
    """Pinned numerics were asked for, but the process cannot have them (torch loaded before the settings)."""


def pinned_env(base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """A copy of ``base`` (default: os.environ) with the pinned settings applied (they override the caller's own)."""
    env = dict(os.environ if base is None else base)
    env.update(PINNED_ENV)
    return env


def missing_settings(env: Optional[Mapping[str, str]] = None) -> dict[str, Optional[str]]:
    """{name: the value found} for every pinned setting ``env`` (default: os.environ) does not hold."""
    env = os.environ if env is None else env
    return {k: env.get(k) for k, v in PINNED_ENV.items() if env.get(k) != v}


def _torch_loaded() -> bool:
    return "torch" in sys.modules


def ensure_environment(argv: Optional[list[str]] = None) -> None:
    """Make this process run with pinned numerics before it imports torch (the CLI calls this first).

    Torch not imported yet: the settings are written into os.environ (libraries read them when they load). Torch
    already imported without them: the process is re-executed with the same command line and the settings (once;
    a second failure raises NumericsError)."""
    if not _torch_loaded():
        os.environ.update(PINNED_ENV)
        return
    if not missing_settings():
        return
    if os.environ.get(REEXEC_FLAG):
        raise NumericsError(_too_late_message())
    args = list(argv if argv is not None else getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    env = pinned_env()
    env[REEXEC_FLAG] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, args, env)  # does not return


def _too_late_message() -> str:
    found = ", ".join(f"{k}={v if v is not None else '(unset)'}" for k, v in missing_settings().items())
    return ("reproducible numerics need their settings in the environment before torch is imported, and this "
            f"process imported torch without them ({found or 'torch chose its own kernels'}). Run the command line "
            "`arldiag train --reproducible ...` (it sets them), or start Python with them: "
            'eval "$(python -m arldiag.trainer.numerics)"')


def activate() -> None:
    """In a process that is to train with pinned numerics: check the settings took effect, then hold torch to one
    thread and deterministic algorithms. Raises NumericsError when the settings came too late or are missing."""
    import torch  # the trainer's own dependency; imported here so that this module loads without torch

    if missing_settings() or torch.backends.cpu.get_cpu_capability() != PINNED_CAPABILITY:
        raise NumericsError(_too_late_message())
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before the first inter-op work; the trainer starts none (no torch.jit.fork)
        pass
    torch.use_deterministic_algorithms(True)


def cpu_vendor() -> str:
    """The CPU's vendor string (GenuineIntel, AuthenticAMD, ...), else the machine type (ARM, or no /proc)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("vendor_id", "CPU implementer")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def record(pinned: bool) -> dict[str, Any]:
    """What run.json stores as config.numerics: whether the run was pinned, the settings it ran with, what torch
    actually used (kernel level, threads, deterministic algorithms), what else decides the bits (the CPU vendor, the
    versions of torch, transformers, numpy and glibc), and a fingerprint of all of it: the same fingerprint and the
    same config, the same bits. (Runs recorded before the vendor and versions were added have another fingerprint
    for the same numerics.)"""
    import torch

    out: dict[str, Any] = {
        "pinned": bool(pinned),
        "env": {k: os.environ.get(k) for k in PINNED_ENV},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch": torch.__version__,
        "cpu_vendor": cpu_vendor(),
        "versions": {"transformers": _version("transformers"), "numpy": _version("numpy"),
                     "glibc": platform.libc_ver()[1] or None},
    }
    out["fingerprint"] = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16]
    return out


def main() -> int:
    for key, value in PINNED_ENV.items():
        print(f"export {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
