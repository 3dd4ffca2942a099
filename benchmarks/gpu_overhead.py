"""The hooks on a GPU: the Collector's cost on the GRPO update step it rides on, as ratios measured in one process.

GRPO update step (what a trainer's actor update does once per step): a Qwen3 built from a config (random weights,
bf16) on the device; an old-log-prob pass (no grad, micro-batches of 8); then per micro-batch of 8 a forward pass
with per-token log-probs and entropy over the vocabulary, the PPO clip loss and backward; one AdamW step. The hooks
do what the verl and TRL hooks do: one ``record_rollout`` (token ids, mask and rewards as device tensors), one
``record_update(..., defer=True)`` per micro-batch (device tensors, sample ids on the device), one ``record_step``
with the loss as a device scalar. Arms: no hooks, Collector at the default token sample rate (0.05), Collector
keeping all token rows (1.0); they alternate step by step in one process (order rotated each round), after a warm-up
round; figures are medians. The step ends with ``torch.cuda.synchronize()`` (the trainer reading its loss).

Arms also measured (``--arms``): all token rows without ``overlap`` (the host waits for the step's results at
``record_step``) and with the statistics on the host (one copy of the inputs, then numpy).

Per arm: median step, ratio to no hooks, host time inside the hook calls per step (wall and thread CPU), host
synchronisations per step from the hooks (a counting round after the timed ones, not timed:
``torch.cuda.set_sync_debug_mode("warn")`` around each hook call, warnings captured, plus the collector's own
blocking waits, backends.HOST_WAITS), and the GPU memory the hooks add (median peak of the step, minus no hooks').

Also: the TRL drop-in (``ArldiagGRPOTrainer`` against ``GRPOTrainer``, the tiny Qwen3 of tests/integrations,
generation with ``generate``, on the device; rounds alternate) and the verl loss plugin's path (verl's
``get_policy_loss_fn("vanilla")`` against ``"arldiag_vanilla"`` on device tensors, 8 micro-batches a step, the step
finished by the recorder: that is the loss alone, so its added milliseconds are compared with the 0.6B step).

    python benchmarks/gpu_overhead.py [--shapes 0.6b,1.7b,small] [--steps 5] [--small-steps 12] [--out DIR]
    python benchmarks/gpu_overhead.py --device cpu --quick      # the script itself, tiny shapes, on CPU

Figures, not assertions. Results: printed, and written to DIR (default $OUT when set) as gpu_overhead.json/.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # integrations.trl_setup (TRL's tiny model)

import arldiag  # noqa: E402
from arldiag import backends  # noqa: E402

# Qwen3 shapes (the published configs' sizes; weights random): hidden, intermediate, layers, heads, kv heads
SHAPES = {
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, batch=64, prompt=256, response=1024),
    "1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, batch=64, prompt=256, response=1024),
    "small": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, vocab_size=151936, batch=256, prompt=64, response=1024),
    "quick": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, vocab_size=500, batch=16, prompt=8, response=24),
}
LABEL = {"0.6b": "Qwen3-0.6B shape", "1.7b": "Qwen3-1.7B shape", "small": "2 layers, 64 wide", "quick": "quick"}
ARMS = ("none", "default", "all", "all_sync", "all_host")
ARM_NAMES = {"default": "Collector, default sampling, overlap", "all": "Collector, all token rows, overlap",
             "all_sync": "all token rows, no overlap (host waits at record_step)",
             "all_host": "all token rows, statistics on the host (numpy)"}
WAITS = getattr(backends, "HOST_WAITS", [0])  # (absent before the one-copy design: then 0)
MICRO = 8


class Hooked:
    """One arm's collector and its counters: host time in hook calls, syncs when counting."""

    def __init__(self, root: str | None, rate: float, stats_on: str = "device", overlap: bool = True):
        kw = {"overlap": overlap}
        self.col = None if root is None else arldiag.Collector(root, token_sample_rate=rate, flush_every_s=5.0, **kw)
        if self.col is not None:
            self.col._steps.stats_on = stats_on
        self.wall = self.cpu = 0.0
        self.count = False
        self.syncs = 0

    def __call__(self, name: str, *args, **kw):
        if self.col is None:
            return None
        import torch

        t0, c0 = time.perf_counter(), time.thread_time()
        if self.count:
            w0 = WAITS[0]
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                out = getattr(self.col, name)(*args, **kw)
            torch.cuda.set_sync_debug_mode(0)
            self.syncs += sum("synchroniz" in str(x.message) for x in w) + WAITS[0] - w0
        else:
            out = getattr(self.col, name)(*args, **kw)
        self.wall += time.perf_counter() - t0
        self.cpu += time.thread_time() - c0
        return out


def build(shape: dict, device: str):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**{k: v for k, v in shape.items() if k not in ("batch", "prompt", "response")},
                      max_position_embeddings=shape["prompt"] + shape["response"], tie_word_embeddings=True)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    return model, opt


def token_logp_entropy(model, ids, P: int):
    """Per-token log-probs of the response tokens and the entropy over the vocabulary, float32 [b, R]."""
    import torch

    logits = model(input_ids=ids).logits[:, P - 1:-1].float()            # [b, R, V]
    lsm = torch.log_softmax(logits, -1)
    lp = lsm.gather(-1, ids[:, P:, None]).squeeze(-1)
    ent = -(lsm.exp() * lsm).sum(-1)
    return lp, ent


def grpo_step(model, opt, batch: dict, hook: Hooked, step: int, device: str) -> None:
    """One GRPO update step (module doc); ``hook`` records it (a no-op for the no-hooks arm)."""
    import torch

    ids, mask, adv, P = batch["ids"], batch["mask"], batch["adv"], batch["P"]
    B = ids.shape[0]
    hook("record_rollout", step, sample_ids=batch["sid_host"], group_ids=batch["sid_host"] // 8,
         token_ids=ids[:, P:], response_mask=mask, rewards=batch["rewards"])
    with torch.no_grad():
        old = torch.cat([token_logp_entropy(model, ids[i:i + MICRO], P)[0] for i in range(0, B, MICRO)])
    total = torch.zeros((), device=device)
    for u, i in enumerate(range(0, B, MICRO)):
        r = slice(i, i + MICRO)
        lp, ent = token_logp_entropy(model, ids[r], P)
        m = mask[r].float()
        ratio = torch.exp(lp - old[r])
        a = adv[r, None]
        pg = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2))
        loss = (pg * m).sum() / m.sum().clamp(min=1) / (B // MICRO)
        loss.backward()
        total += loss.detach()
        hook("record_update", step, u, logp=lp.detach(), logp_old=old[r], advantages=adv[r], response_mask=mask[r],
             entropy=ent.detach(), token_ids=ids[r, P:], sample_ids=batch["sid"][r], defer=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    hook("record_step", step, {"loss": total})


def make_batch(shape: dict, device: str, seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    B, P, R = shape["batch"], shape["prompt"], shape["response"]
    ids = torch.randint(0, shape["vocab_size"], (B, P + R), generator=g)
    lengths = torch.randint(R // 2, R + 1, (B,), generator=g)                  # responses end before R: padding
    mask = torch.arange(R)[None, :] < lengths[:, None]
    adv = torch.randn(B, generator=g)
    sid = np.arange(B, dtype=np.int64) + seed * 100_000
    return dict(ids=ids.to(device), mask=mask.to(device), adv=adv.to(device), P=P, sid_host=sid,
                sid=torch.from_numpy(sid).to(device), rewards=torch.rand(B, generator=g).to(device))


def bench_shape(name: str, args, tmp: str) -> dict:
    import torch

    shape = SHAPES[name]
    dev = args.device
    model, opt = build(shape, dev)
    make = {"none": lambda: Hooked(None, 0), "default": lambda: Hooked(f"{tmp}/{name}-default", 0.05),
            "all": lambda: Hooked(f"{tmp}/{name}-all", 1.0),
            "all_sync": lambda: Hooked(f"{tmp}/{name}-all-sync", 1.0, overlap=False),
            "all_host": lambda: Hooked(f"{tmp}/{name}-all-host", 1.0, "host", overlap=False)}
    wanted = args.arms.split(",") if name in args.more_arms.split(",") or args.quick else ["none", "default", "all"]
    arms = {a: make[a]() for a in ARMS if a in wanted or a == "none"}
    names = tuple(arms)
    steps = args.small_steps if name in ("small", "quick") else args.steps
    times: dict[str, list] = {a: [] for a in names}
    peaks: dict[str, list] = {a: [] for a in names}
    step = 0
    for rnd in range(steps + 1):  # round 0: warm-up
        k = rnd % len(names)
        order = names[k:] + names[:k]
        for arm in order:
            batch = make_batch(shape, dev, step)
            h = arms[arm]
            w0, c0 = h.wall, h.cpu
            if dev == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            grpo_step(model, opt, batch, h, step, dev)
            if dev == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            step += 1
            if rnd == 0:
                h.wall, h.cpu = w0, c0
                continue
            times[arm].append(dt)
            peaks[arm].append(torch.cuda.max_memory_allocated() if dev == "cuda" else 0)
    syncs = {}
    for arm in names[1:]:  # counting round: not timed
        h = arms[arm]
        if dev == "cuda":
            h.count, h.syncs = True, 0
            for _ in range(args.count_steps):
                grpo_step(model, opt, make_batch(shape, dev, step), h, step, dev)
                step += 1
            torch.cuda.synchronize()
            h.count = False
            syncs[arm] = h.syncs / args.count_steps
        else:
            syncs[arm] = float("nan")
    for h in arms.values():
        if h.col is not None:
            h.col.close()
    base = statistics.median(times["none"])
    peak0 = statistics.median(peaks["none"])
    out = {"shape": name, "label": LABEL[name], "tokens": shape["batch"] * (shape["prompt"] + shape["response"]),
           "batch": f'{shape["batch"]} x ({shape["prompt"]} + {shape["response"]})', "steps": steps,
           "peak_mb": peak0 / 2**20, "arms": {}}
    for arm in names:
        med = statistics.median(times[arm])
        n = len(times[arm])
        out["arms"][arm] = {"median_ms": med * 1e3, "ratio": med / base,
                            "hook_wall_ms": arms[arm].wall / n * 1e3, "hook_cpu_ms": arms[arm].cpu / n * 1e3,
                            "syncs_per_step": syncs.get(arm, 0.0),
                            "mem_added_mb": (statistics.median(peaks[arm]) - peak0) / 2**20,
                            "mem_added_share": (statistics.median(peaks[arm]) - peak0) / peak0 if peak0 else 0.0}
    del model, opt
    if dev == "cuda":
        torch.cuda.empty_cache()
    return out


def bench_trl(args, tmp: str) -> dict:
    """Median step of GRPOTrainer and of ArldiagGRPOTrainer (rounds alternate), the tiny model on the device."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer, collector_for
    from integrations.trl_setup import reward_yes, tiny_model_and_tokenizer

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], 0.0

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            if args.device == "cuda":
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.t0)

    model, tok = tiny_model_and_tokenizer()
    model_dir = f"{tmp}/tiny-qwen3"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    ds = Dataset.from_dict({"prompt": ["say yes", "say no", "say yes please", "say no now"] * 64})
    res: dict[str, list] = {"plain": [], "arldiag": []}
    waits: list[float] = []
    for rnd in range(args.trl_rounds):
        for arm in (("plain", "arldiag") if rnd % 2 == 0 else ("arldiag", "plain")):
            cfg = GRPOConfig(output_dir=f"{tmp}/trl-{arm}-{rnd}", per_device_train_batch_size=8, num_generations=4,
                             num_iterations=2, max_completion_length=16, max_steps=args.trl_steps,
                             learning_rate=1e-3, beta=0.04, logging_steps=1, report_to=[], save_strategy="no",
                             use_cpu=args.device == "cpu", seed=rnd, bf16=False, dataloader_num_workers=0,
                             disable_tqdm=True)
            clock = Clock()
            cls = ArldiagGRPOTrainer if arm == "arldiag" else GRPOTrainer
            tr = cls(model=model_dir, reward_funcs=reward_yes, args=cfg, train_dataset=ds, processing_class=tok,
                     callbacks=[clock])
            if arm == "arldiag":
                tr.arldiag_collector = collector_for(tr, f"{tmp}/trl-run-{rnd}")
            w0 = WAITS[0]
            tr.train()
            if arm == "arldiag":
                waits.append((WAITS[0] - w0) / args.trl_steps)
            res[arm].extend(clock.times[2:])  # the first steps warm up
    plain, arl = statistics.median(res["plain"]), statistics.median(res["arldiag"])
    return {"plain_ms": plain * 1e3, "arldiag_ms": arl * 1e3, "ratio": arl / plain, "steps": len(res["plain"]),
            "collector_waits_per_step": statistics.mean(waits) if waits else float("nan")}


def bench_verl(args, tmp: str) -> dict:
    """verl's vanilla loss against arldiag_vanilla on device tensors: 8 micro-batches of 8 x 1024 a step."""
    import torch
    from verl.trainer.ppo import core_algos
    from verl.workers.config import FSDPActorConfig

    from arldiag.collectors import verl_loss

    cfg = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=64, ppo_micro_batch_size_per_gpu=8, rollout_n=1,
                          clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    dev = args.device
    T = 64 if args.quick else 1024
    g = torch.Generator().manual_seed(0)
    mbs = []
    for _ in range(8):
        old = (-torch.rand(8, T, generator=g) * 3).to(dev)
        new = (old.cpu() + torch.randn(8, T, generator=g) * 0.3).to(dev).requires_grad_()
        adv = torch.randn(8, 1, generator=g).expand(8, T).contiguous().to(dev)
        mask = (torch.arange(T)[None] < torch.randint(T // 2, T + 1, (8, 1), generator=g)).float().to(dev)
        mbs.append((old, new, adv, mask))
    col = arldiag.Collector(f"{tmp}/verl", clip=verl_loss.band(cfg), dual_clip_c=3.0)
    rec = verl_loss.RECORDER
    rec.__init__(collector=col)
    times: dict[str, list] = {"vanilla": [], "arldiag_vanilla": []}
    syncs = []
    step = 0
    for rnd in range(args.verl_steps + 2):
        for mode in (("vanilla", "arldiag_vanilla") if rnd % 2 == 0 else ("arldiag_vanilla", "vanilla")):
            count = rnd == args.verl_steps + 1 and mode == "arldiag_vanilla" and dev == "cuda"
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if count:
                w0 = WAITS[0]
                torch.cuda.set_sync_debug_mode("warn")
                wctx = warnings.catch_warnings(record=True)
                w = wctx.__enter__()
                warnings.simplefilter("always")
            step += 1
            rec.set_step(step)
            for old, new, adv, mask in mbs:
                loss, _ = core_algos.get_policy_loss_fn(mode)(old_log_prob=old, log_prob=new, advantages=adv,
                                                             response_mask=mask, config=cfg)
                loss.backward()
            if mode == "arldiag_vanilla":
                rec.set_step(step + 100_000)
                with rec._lock:
                    rec._finish_step()   # what the next step's first call does: record_step of this one
                    rec.step = None
            if count:
                wctx.__exit__(None, None, None)
                torch.cuda.set_sync_debug_mode(0)
                syncs.append(sum("synchroniz" in str(x.message) for x in w) + WAITS[0] - w0)
            if dev == "cuda":
                torch.cuda.synchronize()
            if 0 < rnd <= args.verl_steps:
                times[mode].append(time.perf_counter() - t0)
    rec.close()
    a, b = statistics.median(times["vanilla"]), statistics.median(times["arldiag_vanilla"])
    return {"vanilla_ms": a * 1e3, "arldiag_ms": b * 1e3, "added_ms": (b - a) * 1e3,
            "syncs_per_step": statistics.mean(syncs) if syncs else float("nan"), "steps": len(times["vanilla"])}


def markdown(res: dict) -> str:
    lines = [f"Device: {res['device']}; host: {res['host']}; torch {res['torch']}; command: `{res['command']}`.", "",
             "| model, batch | tokens per step | arm | median step | ratio | hooks' host time per step (wall / "
             "CPU) | host syncs per step (hooks) | GPU memory added |",
             "|---|---|---|---|---|---|---|---|"]
    for s in res["shapes"]:
        for arm in s["arms"]:
            a = s["arms"][arm]
            if arm == "none":
                lines.append(f"| {s['label']}, {s['batch']} | {s['tokens']:,} | no hooks | {a['median_ms']:.1f} ms "
                             f"| 1 | - | - | - (peak {s['peak_mb']:.0f} MB) |")
                continue
            name = ARM_NAMES[arm]
            lines.append(f"| | | {name} | {a['median_ms']:.1f} ms | {a['ratio']:.4f}x | {a['hook_wall_ms']:.1f} / "
                         f"{a['hook_cpu_ms']:.1f} ms | {a['syncs_per_step']:.1f} | {a['mem_added_mb']:.1f} MB "
                         f"({100 * a['mem_added_share']:.2f} %) |")
    if res.get("trl"):
        t = res["trl"]
        lines += ["", f"TRL drop-in (tiny Qwen3, generate, {t['steps']} steps per arm): GRPOTrainer "
                      f"{t['plain_ms']:.1f} ms, ArldiagGRPOTrainer {t['arldiag_ms']:.1f} ms ({t['ratio']:.3f}x); "
                      f"collector host waits per step {t['collector_waits_per_step']:.2f}."]
    if res.get("verl"):
        v = res["verl"]
        lines += ["", f"verl loss plugin (8 micro-batches of 8 x 1024, loss + backward only): vanilla "
                      f"{v['vanilla_ms']:.2f} ms, arldiag_vanilla {v['arldiag_ms']:.2f} ms a step (+{v['added_ms']:.2f}"
                      f" ms); host syncs per step from the recorder {v['syncs_per_step']:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (the script itself, e.g. on CPU)")
    ap.add_argument("--shapes", default="0.6b,1.7b,small", help="comma-separated: 0.6b, 1.7b, small")
    ap.add_argument("--steps", type=int, default=5, help="timed rounds (one step per arm each) for 0.6b/1.7b")
    ap.add_argument("--small-steps", type=int, default=12, help="timed rounds for the small shape")
    ap.add_argument("--count-steps", type=int, default=2, help="untimed steps per arm counting host syncs")
    ap.add_argument("--more-arms", default="small,0.6b",
                    help="shapes that run all of --arms (the others: none, default, all)")
    ap.add_argument("--arms", default=",".join(ARMS), help="arms of the --more-arms shapes: " + ", ".join(ARMS))
    ap.add_argument("--trl-rounds", type=int, default=2)
    ap.add_argument("--trl-steps", type=int, default=8)
    ap.add_argument("--verl-steps", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma-separated: trl, verl")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_overhead.json/.md")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu --quick to try the script")
    shapes = ["quick"] if args.quick else [s.strip() for s in args.shapes.split(",") if s.strip()]
    if args.quick:
        args.small_steps, args.trl_steps, args.verl_steps, args.trl_rounds = 2, 3, 2, 2
    skip = set(args.skip.split(","))
    res = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "host": f"{os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}",
           "torch": torch.__version__, "command": "python benchmarks/gpu_overhead.py " + " ".join(sys.argv[1:]),
           "shapes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in shapes:
            s = bench_shape(name, args, tmp)
            res["shapes"].append(s)
            print(json.dumps(s), flush=True)
        if "trl" not in skip:
            try:
                res["trl"] = bench_trl(args, tmp)
                print(json.dumps(res["trl"]), flush=True)
            except ImportError as exc:
                print(f"TRL drop-in not measured: {exc}", flush=True)
        if "verl" not in skip:
            try:
                res["verl"] = bench_verl(args, tmp)
                print(json.dumps(res["verl"]), flush=True)
            except ImportError as exc:
                print(f"verl loss not measured: {exc}", flush=True)
    md = markdown(res)
    print(md)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "gpu_overhead.json").write_text(json.dumps(res, indent=1))
        Path(args.out, "gpu_overhead.md").write_text(md)
    return res


if __name__ == "__main__":
    main()
