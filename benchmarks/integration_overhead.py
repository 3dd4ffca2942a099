"""Overhead of the TRL and verl hooks on the step time of the same tiny training, as ratios measured in one process.

TRL: the tiny GRPO training of the integration tests (tests/integrations/trl_setup.py: a Qwen3 built from a config,
a local word-level tokenizer, 8 completions per step, 2 iterations per generation batch, beta > 0, CPU) with TRL's
``GRPOTrainer`` and with arldiag's drop-in ``ArldiagGRPOTrainer`` (rollout + update + step hooks, run store written).

verl: a PPO step (``--verl-mode full``) or the actor update alone (``update``), ``both`` by default. The update is
one call of ``update_actor(data)``: micro-batches of a tiny Qwen3 forward (per-token log-probs and entropy, laid out
as verl's engines hand them to the loss), verl's own ``ppo_loss`` (verl.workers.utils.losses: policy loss from the
registry, entropy and low-var-KL terms), backward, then an AdamW step; each call gets a new batch object, as in
verl; ``policy_loss.loss_mode`` is ``vanilla`` without the hook and ``arldiag_vanilla`` with it (the run opened from
``$ARLDIAG_RUN`` as on a verl worker, the step found from ``update_actor`` on the stack, entropy and ref log-probs
read from ``ppo_loss``'s frame). The PPO step first does what the rest of a verl step does, which the hook does not
touch (VerlTiny.rollout): generation with sampling (HF ``generate`` in place of vLLM/SGLang), the old- and
reference-log-prob passes, GRPO advantages. verl's FSDP engine and Ray are not started.

Method: runs with and without the hook alternate in the same process (``--repeat`` pairs after a warm-up pair), so
drifts of a shared machine hit both; each figure is the median over the runs, for wall-clock time and for the
process's CPU time (all threads; ``torch.set_num_threads(1)``, so a busy neighbour slows the process without
changing its CPU time much). The ratio with/without is the overhead; "inside the hooks" is the training thread's CPU
time in arldiag's calls as a share of the step's CPU time, the Arrow conversion of held rows at the store's close
included, spread over the steps (the store's writer thread is not in it but is in the process's CPU time); "writer
thread" is that thread's CPU time in publishing Parquet parts, per step, the final
flush at the store's close included.

    python benchmarks/integration_overhead.py [--repeat 7] [--trl-steps 6] [--verl-steps 6] [--verl-mode both]
        [--verl-phases 16] [--json out.json]

Figures, not assertions.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Clock:
    """Wall-clock and process CPU seconds of a block."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def _timed(obj, name: str, acc: list[float]) -> None:
    """Add the CPU time of the training thread spent in ``obj.name`` to ``acc`` (CPU time: a busy machine's waits
    would otherwise count as the hook's)."""
    fn = getattr(obj, name)

    def wrapper(*a, **k):
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            acc[0] += time.thread_time() - t
    setattr(obj, name, wrapper)


WRITER = [0.0]  # CPU seconds of the store's writer thread in StoreWriter._publish (Parquet encoding and writing)


def _time_writer() -> None:
    """Count the writer thread's CPU time: it runs beside the training thread, so "inside the hooks" misses it,
    and the runs here are too short for its periodic flushes (every 50 steps or 5 s) to fall inside the timed
    steps: the final flush at close is where most of it happens. Reported per step, close included."""
    from arldiag.store.writer import StoreWriter

    if getattr(StoreWriter._publish, "_timed", False):
        return
    publish = StoreWriter._publish

    def timed(self, table):
        t = time.thread_time()
        try:
            return publish(self, table)
        finally:
            WRITER[0] += time.thread_time() - t
    timed._timed = True
    StoreWriter._publish = timed


CLOSE_RELEASE = [0.0]  # training-thread CPU seconds inside Collector.close computing and converting rows


def _time_close_release() -> None:
    """Count the work for the steps that runs inside ``Collector.close``: the statistics of steps still pending
    (``batch_s``, the TRL drop-in) and the Arrow conversion of held rows, which the collector does once per publish
    (every ``flush_every`` steps or ``flush_every_s`` s) and, in these short runs, only at close, which is left out
    of the steps. Added to "inside the hooks" per step, so that the figure includes what a long run pays per
    batch and per publish."""
    from arldiag.collectors.collector import Collector

    if getattr(Collector.close, "_timed", False):
        return
    state = {"closing": False, "depth": 0}
    close = Collector.close

    def timed_close(self, *a, **k):
        state["closing"] = True
        try:
            return close(self, *a, **k)
        finally:
            state["closing"] = False

    def counted(fn):
        def wrapper(self, *a, **k):
            if not state["closing"] or state["depth"]:  # outside close, or inside a counted call already
                return fn(self, *a, **k)
            state["depth"] += 1
            t = time.thread_time()
            try:
                return fn(self, *a, **k)
            finally:
                CLOSE_RELEASE[0] += time.thread_time() - t
                state["depth"] -= 1
        return wrapper
    timed_close._timed = True
    Collector.close = timed_close
    for name in ("_settle", "_release_held", "_release_steps"):
        setattr(Collector, name, counted(getattr(Collector, name)))


# ---------------------------------------------------------------------------------------------------- TRL
def _excluded(obj, name: str, clock: "Clock") -> None:
    """Time ``obj.name`` (a one-off at the end of training) on ``clock`` so that it can be left out of the steps."""
    fn = getattr(obj, name)

    def wrapper(*a, **k):
        with Clock() as c:
            res = fn(*a, **k)
        clock.wall += c.wall
        clock.cpu += c.cpu
        return res
    setattr(obj, name, wrapper)


def trl_run(instrumented: bool, steps: int) -> tuple[float, float, float, float, float]:
    """(wall, cpu, CPU seconds inside the hooks) per step of ``steps`` TRL GRPO steps, the wall seconds of the
    run store's close at the end of training (left out of the steps: a one-off per run, not per step), and the
    writer thread's CPU seconds per step (close included)."""
    from integrations.trl_setup import grpo_trainer

    from arldiag.collectors.trl_grpo import ArldiagGRPOTrainer

    with tempfile.TemporaryDirectory() as tmp:
        kw = {"arldiag_run": f"{tmp}/run"} if instrumented else None
        tr = grpo_trainer(f"{tmp}/out", cls=ArldiagGRPOTrainer if instrumented else None, max_steps=steps,
                          trainer_kwargs=kw, disable_tqdm=True)
        spent = [0.0]
        if instrumented:  # arldiag's work: the mixin's recording methods and the step hook
            for name in ("_arldiag_record_rollout", "_arldiag_record_update"):
                _timed(tr, name, spent)
            _timed(tr.arldiag_collector, "record_step", spent)
        closing = Clock()
        closing.wall = closing.cpu = 0.0
        if instrumented:
            _excluded(tr.arldiag_collector, "close", closing)
        WRITER[0] = CLOSE_RELEASE[0] = 0.0
        with Clock() as c:
            tr.train()
    return ((c.wall - closing.wall) / steps, (c.cpu - closing.cpu) / steps, (spent[0] + CLOSE_RELEASE[0]) / steps,
            closing.wall, WRITER[0] / steps)


# ---------------------------------------------------------------------------------------------------- verl
class _StepBatch:
    """A step's batch as verl's worker receives it (a new object per ``update_actor`` call): the config and, in a
    full step, the micro-batches built from this step's rollout (None: the fixed ones)."""

    def __init__(self, config, micro=None):
        self.config = config
        self.micro = micro


class VerlTiny:
    """A tiny actor trained with verl's ppo_loss; ``batch`` sequences of ``prompt`` + ``response`` tokens per step,
    ``micro`` sequences per micro-batch."""

    def __init__(self, batch: int = 16, micro: int = 4, prompt: int = 8, response: int = 48, seed: int = 0):
        import torch

        from integrations.trl_setup import tiny_model_and_tokenizer

        import copy

        self.model, self.tok = tiny_model_and_tokenizer(seed)
        self.ref = copy.deepcopy(self.model).eval()  # the reference policy of the KL term
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.g = g = torch.Generator().manual_seed(seed)
        self.B, self.P, self.R, self.mb = B, P, R, mb = batch, prompt, response, micro
        ids = torch.randint(4, len(self.tok), (B, P + R), generator=g)
        # responses end at an EOS at different lengths: the loss mask covers the tokens before it
        self.mask = mask = (torch.arange(R)[None, :] < torch.randint(R // 2, R + 1, (B, 1), generator=g)).float()
        self.prompts = ids[:, :P]
        self.micro = self._micro_batches(ids, -torch.rand(B, R, generator=g) * 2, -torch.rand(B, R, generator=g) * 2,
                                         torch.randn(B, 1, generator=g))

    def _micro_batches(self, ids, old_log_probs, ref_log_prob, adv):
        """verl's micro-batches (TensorDicts laid out as its engines hand them to ppo_loss) of a [B, P + R] batch."""
        import torch
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu

        B, P, R, mb = self.B, self.P, self.R, self.mb
        out = []
        for i in range(0, B, mb):
            sl = slice(i, i + mb)
            d = TensorDict({"prompts": ids[sl, :P], "responses": ids[sl, P:],
                            "attention_mask": torch.ones(mb, P + R, dtype=torch.long), "response_mask": self.mask[sl],
                            "old_log_probs": old_log_probs[sl], "ref_log_prob": ref_log_prob[sl],
                            "advantages": adv[sl].expand(mb, R).contiguous()}, batch_size=[mb])
            tu.assign_non_tensor(d, dp_size=1, batch_num_tokens=int(self.mask.sum()), global_batch_size=B)
            out.append((ids[sl], d))
        return out

    def rollout(self, group: int = 4):
        """The rest of a verl step, which the hook does not touch: generate ``R`` tokens per prompt (sampling,
        KV cache: HF ``generate`` in place of verl's vLLM/SGLang engine), the old- and reference-log-prob passes
        (no grad, micro-batched), and GRPO advantages (reward z-scored within groups of ``group``). Returns the
        step's micro-batches."""
        import torch

        with torch.no_grad():
            ids = self.model.generate(self.prompts, attention_mask=torch.ones_like(self.prompts), do_sample=True,
                                      top_k=0, top_p=1.0, max_new_tokens=self.R, min_new_tokens=self.R,
                                      pad_token_id=self.tok.pad_token_id)
            old = torch.cat([self.response_log_probs(self.model, ids[i:i + self.mb]) for i in range(0, self.B, self.mb)])
            ref = torch.cat([self.response_log_probs(self.ref, ids[i:i + self.mb]) for i in range(0, self.B, self.mb)])
        reward = torch.rand(self.B // group, group, generator=self.g)
        adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).reshape(self.B, 1)
        return self._micro_batches(ids, old, ref, adv)

    def response_log_probs(self, model, ids):
        """[b, R] log-probs of the response tokens of ``ids`` [b, P + R] under ``model``."""
        import torch

        logits = model(input_ids=ids).logits[:, self.P - 1:-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, self.P:, None]).squeeze(-1)

    @staticmethod
    def config(mode: str):
        from verl.workers.config import FSDPActorConfig, PolicyLossConfig

        return FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=16, ppo_micro_batch_size_per_gpu=4,
                               rollout_n=1, clip_ratio_low=0.2, clip_ratio_high=0.28, entropy_coeff=0.001,
                               use_kl_loss=True, kl_loss_type="low_var_kl", policy_loss=PolicyLossConfig(loss_mode=mode))

    def forward(self, ids):
        """Per-token log-probs of the next token and entropies, flattened over the (unpadded) sequences, as verl's
        engines return them (``no_padding_2_padding`` cuts the response part out)."""
        import torch

        logits = self.model(input_ids=ids).logits[:, :-1].float()
        lsm = torch.log_softmax(logits, -1)
        logp = lsm.gather(-1, ids[:, 1:, None]).squeeze(-1)
        ent = -(lsm.exp() * lsm).sum(-1)
        pad = torch.zeros(ids.shape[0], 1)
        return {"log_probs": torch.cat([logp, pad], 1).reshape(-1), "entropy": torch.cat([ent, pad], 1).reshape(-1)}

    def update_actor(self, data):
        """One step, under the name verl's workers use; ``data`` is a new _StepBatch per call. The recorder counts a
        step per call from the identity of ``data``: verl hands every step a new batch object (passing the same
        config object on every call, as this benchmark first did, recorded all steps as one step and left the
        per-step work to the store's close, outside the timed steps)."""
        from verl.workers.utils.losses import ppo_loss

        config = data.config
        self.opt.zero_grad()
        for ids, d in data.micro or self.micro:
            loss, _ = ppo_loss(config, self.forward(ids), d)
            loss.backward()
        self.opt.step()


def verl_run(tiny: VerlTiny, instrumented: bool, steps: int, run_dir: str,
             full: bool = False) -> tuple[float, float, float, float]:
    """(wall, cpu, CPU seconds inside the hook) per step of ``steps`` steps, after one step that is not timed (with
    the hook it opens the run store), and the wall seconds of the store's close (not in the steps). A step is one
    actor update (``update_actor``) on fixed micro-batches, or with ``full`` a whole PPO step: the rollout
    (generation, log-prob passes, advantages: VerlTiny.rollout) and then the update on its micro-batches."""
    from arldiag.collectors import verl_loss as vl

    cfg = tiny.config("arldiag_vanilla" if instrumented else "vanilla")
    spent = [0.0]
    if instrumented:
        os.environ[vl.RUN_ENV] = run_dir
        vl.RECORDER.__init__()  # opens the run on its first call, as on a verl worker
        vl.RECORDER.__dict__.pop("_record", None)  # the previous run's timer
        _timed(vl.RECORDER, "_record", spent)
    def step():
        tiny.update_actor(_StepBatch(cfg, tiny.rollout() if full else None))

    step()
    spent[0] = WRITER[0] = CLOSE_RELEASE[0] = 0.0
    with Clock() as c:
        for _ in range(steps):
            step()
    with Clock() as closing:
        if instrumented:
            vl.RECORDER.close()
    return c.wall / steps, c.cpu / steps, (spent[0] + CLOSE_RELEASE[0]) / steps, closing.wall, WRITER[0] / steps


def verl_phases(tiny: VerlTiny, runs: int, steps: int, tmp: str) -> dict:
    """Median wall ms per step of the rollout and of the update, without and with the hook, over ``runs``
    alternating runs of ``steps`` PPO steps (the first step of each run not timed): which phase the difference is in
    (the rollout's run-to-run spread dominates the whole step's ratio)."""
    from arldiag.collectors import verl_loss as vl

    res: dict[bool, list] = {False: [], True: []}
    for k in range(runs):
        inst = (k % 2 == 0) ^ (k % 4 >= 2)
        cfg = tiny.config("arldiag_vanilla" if inst else "vanilla")
        if inst:
            os.environ[vl.RUN_ENV] = f"{tmp}/phases{k}"
            vl.RECORDER.__init__()
        ro = up = 0.0
        for s in range(steps + 1):
            t0 = time.perf_counter()
            micro = tiny.rollout()
            t1 = time.perf_counter()
            tiny.update_actor(_StepBatch(cfg, micro))
            if s:
                ro, up = ro + t1 - t0, up + time.perf_counter() - t1
        if inst:
            vl.RECORDER.close()
        res[inst].append((ro / steps * 1e3, up / steps * 1e3))
    return {("with" if inst else "without"): {ph: round(statistics.median(r[i] for r in res[inst]), 2)
                                             for i, ph in enumerate(("rollout_ms", "update_ms"))}
            for inst in (False, True)}


# ---------------------------------------------------------------------------------------------------- main
def _bootstrap_ratio(without: list[float], with_: list[float], n: int = 4000, seed: int = 0) -> list[float]:
    """90 % bootstrap interval of the ratio of medians (runs resampled within each arm): how far the measured ratio
    can move on this host by chance alone."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = np.asarray(without), np.asarray(with_)
    ra = np.median(a[rng.integers(0, a.size, (n, a.size))], axis=1)
    rb = np.median(b[rng.integers(0, b.size, (n, b.size))], axis=1)
    lo, hi = np.quantile(rb / ra, [0.05, 0.95])
    return [round(float(lo), 4), round(float(hi), 4)]


def summarise(name: str, base: list[tuple], inst: list[tuple]) -> dict:
    med = {k: statistics.median(v) for k, v in
           (("wall_without", [b[0] for b in base]), ("wall_with", [i[0] for i in inst]),
            ("cpu_without", [b[1] for b in base]), ("cpu_with", [i[1] for i in inst]))}
    out = {"name": name, **{k: round(v * 1e3, 2) for k, v in med.items()},
           "ratio_wall": round(med["wall_with"] / med["wall_without"], 4),
           "ratio_cpu": round(med["cpu_with"] / med["cpu_without"], 4),
           "paired_ratio_wall": round(statistics.median(i[0] / b[0] for b, i in zip(base, inst)), 4)}
    out["ratio_wall_ci90"] = _bootstrap_ratio([b[0] for b in base], [i[0] for i in inst])
    out["ratio_cpu_ci90"] = _bootstrap_ratio([b[1] for b in base], [i[1] for i in inst])
    out["hooks_ms"] = round(statistics.median(i[2] for i in inst) * 1e3, 2)
    out["hooks_share_of_cpu"] = round(statistics.median(i[2] / i[1] for i in inst), 4)
    out["close_ms_per_run"] = round(statistics.median(i[3] for i in inst) * 1e3, 1)
    out["writer_ms"] = round(statistics.median(i[4] for i in inst) * 1e3, 2)
    out["writer_share_of_cpu"] = round(statistics.median(i[4] / i[1] for i in inst), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="pairs of runs (with, without) after a warm-up pair")
    ap.add_argument("--trl-steps", type=int, default=6)
    ap.add_argument("--verl-steps", type=int, default=6)
    ap.add_argument("--only", choices=("trl", "verl"))
    ap.add_argument("--verl-mode", choices=("full", "update", "both"), default="both",
                    help="verl step measured: a whole PPO step (rollout + update), the actor update alone, or both")
    ap.add_argument("--verl-phases", type=int, default=0, metavar="RUNS",
                    help="also time the verl PPO step's rollout and update separately over RUNS alternating runs")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    _time_writer()
    _time_close_release()
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start",
               "torch": torch.__version__, "repeat": args.repeat}
    rows = []
    if args.only != "verl":
        import transformers
        import trl

        results["trl"] = trl.__version__
        results["transformers"] = transformers.__version__
        trl_run(False, 1), trl_run(True, 1)  # warm-up: imports, first-call costs
        base, inst = [], []
        for k in range(args.repeat):
            for instrumented in ((False, True) if k % 2 == 0 else (True, False)):  # alternate the order too
                (inst if instrumented else base).append(trl_run(instrumented, args.trl_steps))
        rows.append(summarise(f"TRL GRPOTrainer, tiny Qwen3, {args.trl_steps} steps x 8 completions", base, inst))
    if args.only != "trl":
        import verl

        results["verl"] = verl.__version__
        tiny = VerlTiny()
        modes = {"update": [False], "full": [True], "both": [True, False]}[args.verl_mode]
        for full in modes:
            with tempfile.TemporaryDirectory() as tmp:
                verl_run(tiny, False, 1, "", full), verl_run(tiny, True, 1, f"{tmp}/warm", full)
                base, inst = [], []
                for k in range(args.repeat):
                    for instrumented in ((False, True) if k % 2 == 0 else (True, False)):
                        (inst if instrumented else base).append(verl_run(tiny, instrumented, args.verl_steps,
                                                                         f"{tmp}/run{k}", full))
            what = ("verl PPO step (generate 48 tokens, old and ref log-prob passes, update)" if full
                    else "verl actor update only (update_actor: ppo_loss)")
            rows.append(summarise(f"{what}, tiny Qwen3, 16 x (8 + 48) tokens, 4 micro-batches, "
                                  f"{args.verl_steps} steps", base, inst))
    if args.verl_phases and args.only != "trl":
        with tempfile.TemporaryDirectory() as tmp:
            results["verl_phases"] = ph = verl_phases(tiny, args.verl_phases, args.verl_steps, tmp)
        w, o = ph["with"], ph["without"]
        print(f"verl PPO step by phase ({args.verl_phases} alternating runs): rollout {o['rollout_ms']:.1f} -> "
              f"{w['rollout_ms']:.1f} ms, update {o['update_ms']:.1f} -> {w['update_ms']:.1f} ms; the update's "
              f"difference is {100 * (w['update_ms'] - o['update_ms']) / (o['rollout_ms'] + o['update_ms']):.2f} % "
              f"of the step", flush=True)
    results["results"] = rows
    for r in rows:
        lo, hi = r["ratio_wall_ci90"]
        clo, chi = r["ratio_cpu_ci90"]
        line = (f"{r['name']}: wall {r['wall_without']:.1f} -> {r['wall_with']:.1f} ms/step (ratio {r['ratio_wall']:.3f},"
                f" 90 % interval {lo:.3f}-{hi:.3f}, paired {r['paired_ratio_wall']:.3f}); CPU {r['cpu_without']:.1f} -> "
                f"{r['cpu_with']:.1f} ms/step (ratio {r['ratio_cpu']:.3f}, {clo:.3f}-{chi:.3f})")
        line += (f"; inside the hooks {r['hooks_ms']:.1f} ms CPU/step = {100 * r['hooks_share_of_cpu']:.2f} % of "
                 f"the step's CPU time; closing the store {r['close_ms_per_run']:.0f} ms once per run; writer "
                 f"thread {r['writer_ms']:.1f} ms CPU/step = {100 * r['writer_share_of_cpu']:.2f} % (close included)")
        print(line, flush=True)
    print(f"machine: {results['machine']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
