"""Op by op: which of the reference trainer's floating-point results depend on the CPU's kernels.

One probe is a fresh Python process (kernel settings are read when torch, MKL, oneDNN and glibc's libm load, so two
settings cannot share a process) that runs, on one thread with deterministic algorithms:

  * the reference policy of the lag set (sample_runs/suite.py LAG: tiny Qwen3, hidden 128, 2 layers, the shipped warm
    start) forward and backward on a fixed batch (random token ids with left padding, the trainer's own
    ``window_logprobs`` with the entropy, CISPO's loss, one AdamW step), with every aten op it dispatches recorded
    (a TorchDispatchMode: matmul/linear, softmax/log_softmax, exp/log, RMS norm's rsqrt, SiLU, the SDPA attention
    kernel, the backward ops ...), every module's output (forward hooks), every gradient and every updated weight;
  * isolated ops on fixed random inputs: torch exp/log/tanh/sigmoid/silu/sin/cos/rsqrt/pow/softmax/log_softmax/
    logsumexp, float32 GEMMs of the policy's shapes, torch.multinomial (the sampler) and exponential_, an AdamW step;
    glibc's libm (expf/logf/tanhf/powf and the double exp/log/tanh/pow, called through ctypes; Python's own float
    math goes there too); numpy's exp/log/tanh.

The first probe (``pinned``, arldiag/trainer/numerics.py's PINNED_ENV) saves every result; each other setting's probe
compares with it in its own process: per op call, the hash of its inputs and of its output and the largest absolute
and relative difference. An op call whose inputs equal the baseline's bit for bit but whose output differs is where a
difference *starts* (an "origin"); the ops after it inherit it. The table lists, per op, the settings under which it
is an origin and by how much.

    python benchmarks/numerics_ops.py [--settings pinned,aten_avx2,...] [--json out.json] [--keep DIR]

Figures, not assertions (docs/reference-trainer.md, "What pinned numerics guarantee", quotes a run of it).
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sample_runs"))

from arldiag.trainer.numerics import PINNED_ENV  # noqa: E402  (no torch import: the settings come first)

NO_FMA = "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-FMA4"  # glibc >= 2.33 spelling
UNSET = None
BASE_PINS = {k: v for k, v in PINNED_ENV.items()}
# setting name -> the environment it changes against the pinned one (None: unset the variable)
SETTINGS: dict[str, dict[str, Any]] = {
    "pinned": {},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl_cbwr_unset": {"MKL_CBWR": UNSET},
    "mkl_cbwr_avx2": {"MKL_CBWR": "AVX2"},
    "mkl_cbwr_avx512": {"MKL_CBWR": "AVX512"},
    "mkl_instr_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "mkl_instr_sse42": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "mkl_cbwr_unset_instr_avx2": {"MKL_CBWR": UNSET, "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "onednn_unset": {"ONEDNN_MAX_CPU_ISA": UNSET},
    "glibc_no_fma": {"GLIBC_TUNABLES": NO_FMA},
    # numpy >= 2.4 names its dispatch levels X86_V3 (AVX2, FMA) and X86_V4 (AVX-512); older names are ignored
    "numpy_baseline": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
    "unpinned": {k: UNSET for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "GLIBC_TUNABLES")},
}
LIBM_FUNCS = ("expf", "logf", "tanhf", "powf", "exp", "log", "tanh", "pow")


# --- the probe (child process) ---------------------------------------------------------------------------------------
def _np(t: Any) -> Any:
    import torch

    t = t.detach()
    if t.dtype in (torch.bool, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return t.cpu().numpy().astype("float64")
    return t.float().cpu().contiguous().numpy().copy()  # a copy: the tensor's memory is reused or updated later


def _digest(arrays: list) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()[:12]


class Recorder:
    """{key: array} of every result, plus the hash of the inputs of every op call."""

    def __init__(self) -> None:
        self.out: dict[str, Any] = {}
        self.inputs: dict[str, str] = {}

    def add(self, key: str, value: Any, inputs: str = "") -> None:
        self.out[key] = value
        self.inputs[key] = inputs


def _tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _dispatch_mode(rec: Recorder) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        """Every aten op: its output (first tensor) under 'op NNNN name', and the hash of its tensor inputs."""

        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            ins = _digest([_np(t) for t in _tensors((args, kwargs)) if t.numel() and not t.is_sparse])
            result = func(*args, **kwargs)
            outs = [t for t in _tensors(result) if t.numel()]
            if outs:
                rec.add(f"op {self.n:04d} {func.overloadpacket.__name__}", _np(outs[0]), ins)
            self.n += 1
            return result

    return OpRecorder()


def _policy(seed: int = 78) -> tuple[Any, Any]:
    from suite import LAG  # sample_runs/suite.py: the tour's setting
    from arldiag.trainer.config import make_config
    from arldiag.trainer.loop import make_env_factory, resolve_layout, setup_policy

    cfg = make_config("cispo", **dict(LAG, out="unused", seed=seed))
    factory = make_env_factory(cfg)
    env = factory()
    max_turns = min(int(env.max_turns), cfg.max_turns or int(env.max_turns))
    model, _, _ = setup_policy(cfg, factory, resolve_layout(cfg, env), max_turns, log=lambda s: None)
    return model, cfg


def probe_policy(rec: Recorder) -> None:
    """Forward + backward + one AdamW step of the reference policy on a fixed batch, every op recorded."""
    import torch

    from arldiag.trainer.losses import policy_loss
    from arldiag.trainer.policy import window_logprobs

    model, cfg = _policy()
    gen = torch.Generator().manual_seed(1234)
    B, T, start = 8, 40, 24  # batch, tokens, first trained position
    vocab = model.config.vocab_size
    ids = torch.randint(4, vocab, (B, T), generator=gen)  # [B, T]
    pad = torch.randint(0, 12, (B,), generator=gen)  # left padding per row
    attn = (torch.arange(T)[None, :] >= pad[:, None]).long()  # [B, T]
    adv = torch.randn(B, T - start, generator=gen)  # [B, W]
    mask = torch.ones(B, T - start)
    for name, module in model.named_modules():
        module.register_forward_hook(
            lambda m, i, o, name=name: rec.add(f"module {name or 'model'}", _np(_tensors(o)[0])))
    with torch.no_grad():
        logp_old, _ = window_logprobs(model, ids, attn, start, cfg.temperature)  # [B, W]
    logp_old = logp_old - 0.01 * torch.rand(logp_old.shape, generator=gen)  # a ratio away from 1
    with _dispatch_mode(rec):
        logp, entropy = window_logprobs(model, ids, attn, start, cfg.temperature, with_entropy=True,
                                        entropy_grad=True)
        loss, _ = policy_loss(cfg, logp, logp_old, adv, mask, entropy=entropy)
        loss = loss - 0.01 * entropy.mean()
        loss.backward()
    rec.add("loss", _np(loss))
    for name, p in model.named_parameters():
        rec.add(f"grad {name}", _np(p.grad))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    opt.step()
    for name, p in model.named_parameters():
        rec.add(f"adamw {name}", _np(p))


def probe_isolated(rec: Recorder) -> None:
    """Single ops on fixed random inputs: each one's result depends only on its own kernel."""
    import numpy as np
    import torch

    # inputs from numpy's generator (integer arithmetic and tables): torch.randn's own kernel is CPU-dependent
    rng = np.random.default_rng(99)

    def randn(*shape: int) -> Any:
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))

    rec.add("torch randn (normal_ kernel)", _np(torch.randn(1 << 14, generator=torch.Generator().manual_seed(5))))
    rec.add("torch rand (uniform_ kernel)", _np(torch.rand(1 << 14, generator=torch.Generator().manual_seed(5))))
    x = randn(1 << 16) * 4  # [65536]
    pos = x.abs() + 1e-3
    logits = randn(256, 64) * 3  # [256, V]
    unary = {"exp": torch.exp(x), "log": torch.log(pos), "tanh": torch.tanh(x), "sigmoid": torch.sigmoid(x),
             "silu": torch.nn.functional.silu(x), "sin": torch.sin(x), "cos": torch.cos(x), "rsqrt": torch.rsqrt(pos),
             "sqrt": torch.sqrt(pos), "pow 0.37": torch.pow(pos, 0.37), "pow scalar base": torch.pow(1e4, x / 40),
             "softmax": torch.softmax(logits, -1), "log_softmax": torch.log_softmax(logits, -1),
             "logsumexp": torch.logsumexp(logits, -1), "exp(logsoftmax) sum": torch.log_softmax(logits, -1).exp().sum(-1)}
    for name, value in unary.items():
        rec.add(f"torch {name}", _np(value))
    # the policy's GEMM shapes (hidden 128, MLP 256, q 128, k/v 64, vocab ~64) on 320 rows, both layouts
    a = randn(320, 128)
    for n in (64, 128, 256):
        w = randn(n, 128) / 11
        rec.add(f"sgemm linear 320x128 -> {n}", _np(torch.nn.functional.linear(a, w)))
        rec.add(f"sgemm grad_w {n}x320 . 320x128", _np(randn(320, n).t() @ a))
    q, k = randn(8, 4, 40, 32), randn(8, 4, 40, 32)
    rec.add("bmm attention scores 8x4x40x32", _np(q @ k.transpose(-1, -2)))
    rec.add("sdpa causal 8x4x40x32", _np(torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)))
    probs = torch.softmax(randn(512, 64), -1)
    rec.add("multinomial (sampler)", _np(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5))))
    rec.add("exponential_", _np(torch.empty(4096).exponential_(generator=torch.Generator().manual_seed(5))))
    p = torch.nn.Parameter(randn(4096))
    p.grad = randn(4096) * 1e-3
    opt = torch.optim.AdamW([p], lr=1.75e-4)
    for _ in range(3):
        opt.step()
    rec.add("AdamW 3 steps", _np(p))
    libm = ctypes.CDLL("libm.so.6")
    xs = np.random.default_rng(0).uniform(-20, 20, 20000)
    for fname in LIBM_FUNCS:
        single = fname.endswith("f")
        ctype, dtype = (ctypes.c_float, np.float32) if single else (ctypes.c_double, np.float64)
        f = getattr(libm, fname)
        f.restype = ctype
        two = fname.startswith("pow")
        f.argtypes = [ctype, ctype] if two else [ctype]
        dom = np.abs(xs) + 1e-3 if fname.startswith(("log", "pow")) else xs
        vals = [f(v, 1.37) if two else f(v) for v in dom.astype(dtype).tolist()]
        rec.add(f"libm {fname}", np.array(vals, dtype=dtype))
    rec.add("python math.exp/log/pow", np.array([math.exp(v) + math.log(abs(v) + 1e-3) + abs(v) ** 0.37 for v in xs]))
    for name, fn in (("exp", np.exp), ("log", lambda v: np.log(np.abs(v) + 1e-3)), ("tanh", np.tanh)):
        rec.add(f"numpy {name} float64", fn(xs))
        rec.add(f"numpy {name} float32", fn(xs.astype(np.float32)))


def run_probe(save: str | None, against: str | None, out_json: str) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rec = Recorder()
    probe_isolated(rec)
    probe_policy(rec)
    meta = {"capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "env": {k: os.environ.get(k) for k in (*PINNED_ENV, "GLIBC_TUNABLES", "MKL_ENABLE_INSTRUCTIONS",
                                                   "NPY_DISABLE_CPU_FEATURES")}}
    rows = {}
    base = np.load(against) if against else None
    base_inputs = json.loads(str(base["__inputs__"])) if base is not None else {}
    for key, value in rec.out.items():
        row = {"hash": _digest([value]), "inputs": rec.inputs.get(key, "")}
        if base is not None and key in base.files:
            ref = base[key].astype("float64")
            cur = value.astype("float64")
            if ref.shape == cur.shape:
                diff = np.where(cur == ref, 0.0, np.abs(cur - ref))  # inf == inf is no difference
                row["max_abs"] = float(diff.max()) if diff.size else 0.0
                row["max_rel"] = float((diff / np.maximum(np.abs(ref), 1e-30)).max()) if diff.size else 0.0
                row["n_diff"] = int((diff > 0).sum())
            row["same_inputs"] = base_inputs.get(key) == row["inputs"]
        rows[key] = row
    if save or os.environ.get("NUMERICS_OPS_SAVE_ALL"):
        np.savez(save or out_json + ".npz", __inputs__=json.dumps(rec.inputs), **rec.out)
    Path(out_json).write_text(json.dumps({"meta": meta, "rows": rows}))


# --- the driver ------------------------------------------------------------------------------------------------------
def setting_env(name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ARLDIAG_NUMERICS_REEXEC", "GLIBC_TUNABLES",
                                                            "MKL_ENABLE_INSTRUCTIONS", "NPY_DISABLE_CPU_FEATURES")}
    env.update(BASE_PINS)
    for key, value in SETTINGS[name].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_setting(name: str, folder: str) -> dict:
    out_json = os.path.join(folder, f"{name}.json")
    args = [sys.executable, __file__, "--probe", "--json", out_json]
    args += ["--save", os.path.join(folder, "pinned.npz")] if name == "pinned" else \
        ["--against", os.path.join(folder, "pinned.npz")]
    subprocess.run(args, env=setting_env(name), cwd=ROOT, check=True)
    return json.loads(Path(out_json).read_text())


def op_name(key: str) -> str:
    """'op 0042 mm' -> 'aten mm'; 'module model.layers.0.mlp' -> 'module *.mlp'; others unchanged."""
    kind, _, rest = key.partition(" ")
    if kind == "op":
        return "aten " + rest.split(" ", 1)[1]
    if kind in ("module", "grad", "adamw"):
        return f"{kind} {rest.split('.')[-1]}" if "." in rest else key
    return key


def table(results: dict[str, dict]) -> tuple[str, dict]:
    """Markdown: per op (calls grouped by name), under each setting the largest relative difference of the calls
    that *start* a difference (inputs equal to the pinned probe's, output not), or '=' when none does; plus per
    setting how many recorded results differ at all."""
    names = [n for n in results if n != "pinned"]
    origin: dict[str, dict[str, float]] = defaultdict(dict)
    summary = {}
    for s in names:
        rows = results[s]["rows"]
        differ = [k for k, r in rows.items() if r.get("n_diff", 0) > 0 or ("max_abs" not in r and k != "loss")]
        summary[s] = {"differ": len(differ), "of": len(rows), "capability": results[s]["meta"]["capability"],
                      "loss_rel": rows.get("loss", {}).get("max_rel")}
        for k, r in rows.items():
            starts = r.get("n_diff", 0) > 0 and (not k.startswith("op ") or r.get("same_inputs"))
            if starts and not k.startswith(("module ", "grad ", "adamw ")):
                o = op_name(k)
                origin[o][s] = max(origin[o].get(s, 0.0), r.get("max_rel", 0.0))
                origin[o].setdefault("_abs_" + s, 0.0)
                origin[o]["_abs_" + s] = max(origin[o]["_abs_" + s], r.get("max_abs", 0.0))
    lines = ["| op (where a difference starts) | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for o in sorted(origin):
        cells = [f"{origin[o][s]:.1e} ({origin[o]['_abs_' + s]:.0e})" if s in origin[o] else "=" for s in names]
        lines.append(f"| {o} | " + " | ".join(cells) + " |")
    lines.append("| **results that differ at all** | " + " | ".join(
        f"{summary[s]['differ']} of {summary[s]['of']}" for s in names) + " |")
    lines.append("| loss, relative difference | " + " | ".join(
        "=" if not summary[s]["loss_rel"] else f"{summary[s]['loss_rel']:.1e}" for s in names) + " |")
    return "\n".join(lines), {"origins": origin, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated: " + ", ".join(SETTINGS))
    p.add_argument("--json", help="write the figures here (with --probe: the probe's own rows)")
    p.add_argument("--keep", help="folder for the probes' files (default: a temporary folder)")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save", help=argparse.SUPPRESS)
    p.add_argument("--against", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.probe:
        run_probe(a.save, a.against, a.json)
        return 0
    chosen = ["pinned"] + [s for s in a.settings.split(",") if s and s != "pinned"]
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown:
        p.error(f"--settings: unknown {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    folder = a.keep or tempfile.mkdtemp(prefix="numerics_ops_")
    os.makedirs(folder, exist_ok=True)
    results = {}
    for s in chosen:
        results[s] = run_setting(s, folder)
        print(f"{s}: capability {results[s]['meta']['capability']}", flush=True)
    text, figures = table(results)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": {s: SETTINGS[s] for s in chosen}, **figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
