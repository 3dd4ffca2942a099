"""Behaviour-cloning warm start from solver trajectories (ARLArena's first step), cached on disk.

Demonstrations are played with ``env.solver_response()`` and laid out exactly like RL samples (``batch.py``), so
BC maximises the log-likelihood of the same response tokens the RL loss later trains. The cache key (the warm
start's *fingerprint*) covers everything that changes the result (env, vocabulary, model shape, BC settings, BC
seed, layout); a hit loads the state dict instead of training.

Where a warm start comes from, first match wins: the package's own ``warm_starts/`` folder (shipped, so every
machine starts from the same weights: behaviour cloning itself is not bit-stable across CPUs, whose BLAS kernels
round differently, and 200 RL steps amplify a last-bit difference), then the user's cache, then training. run.json
records which (``config.warm_start``: fingerprint, source, sha256 of the weights).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from arldiag.trainer.batch import build_batch
from arldiag.trainer.policy import TokenCodec, window_logprobs
from arldiag.trainer.rollout import Episode, Turn

CACHE_VERSION = 2
SHIPPED_DIR = Path(__file__).resolve().parent / "warm_starts"  # package data (pyproject: arldiag.trainer)


@dataclass(frozen=True)
class WarmStart:
    """Which behaviour-cloned weights a run started from (written to run.json as ``config.warm_start``)."""
    fingerprint: str  # cache_key(): the BC configuration's hash
    source: str  # shipped (package data) | cache (~/.cache/arldiag/bc) | trained (cloned now, then cached)
    sha256: str  # of the state-dict file: two machines with the same fingerprint and a different sha differ
    path: str

    def record(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if k != "path"}


def solver_texts(env_factory: Callable[[], Any], n_episodes: int, seed: int, max_turns: int, noise: float = 0.0
                 ) -> list[list[tuple[str, str, Any, str]]]:
    """Play ``n_episodes`` solver episodes; per episode a list of (observation, response, StepResult, anchor).

    With ``noise`` > 0, that share of the turns takes ``env.random_response`` instead of the solver's move (when the
    environment has one): cloning such demonstrations gives a weak policy that RL has room to improve."""
    env = env_factory()
    rng = np.random.default_rng(seed)
    noisy = noise > 0 and hasattr(env, "random_response")
    out = []
    for task in rng.integers(0, 2**31 - 1, size=n_episodes):
        env.reset(int(task))
        turns = []
        for _ in range(max_turns):
            obs, anchor = env.observation(), env.anchor()
            response = (env.random_response(rng) if noisy and rng.random() < noise else env.solver_response())
            result = env.step(response)
            turns.append((obs, response, result, anchor))
            if result.done:
                break
        out.append(turns)
    return out


def demo_episodes(demos: Sequence[Sequence[tuple[str, str, Any, str]]], codec: TokenCodec) -> list[Episode]:
    """Solver episodes as trainer Episodes (canonical token ids, eos appended, tool outputs inserted)."""
    bos = [codec.bos_id] if codec.bos_id is not None else []
    episodes = []
    for k, turns in enumerate(demos):
        ep = Episode(task_id=k, group_index=k, prompt_ids=bos + codec.encode(turns[0][0]))
        for obs, response, result, anchor in turns:
            ids = codec.encode(response) + [codec.eos_id]
            inserted = codec.encode(result.tool_output) if result.tool_output else []
            ep.turns.append(Turn(prompt_ids=bos + codec.encode(obs), sampled_ids=ids, trained_ids=ids,
                                 logp_rollout=[0.0] * len(ids), inserted_ids=inserted, reward=result.reward,
                                 valid=result.valid, truncated=False, anchor=anchor))
            ep.success = bool(result.success)
        episodes.append(ep)
    return episodes


def cache_key(cfg: Any, vocabulary: Sequence[str], layout: str, max_turns: int) -> str:
    """The warm start's fingerprint: a hash of every setting behaviour cloning depends on (not of the RL ones)."""
    seed = cfg.resolved_bc_seed() if hasattr(cfg, "resolved_bc_seed") else cfg.seed
    parts = dict(v=CACHE_VERSION, env=cfg.env, vocab=list(vocabulary), model=cfg.model, hidden=cfg.hidden_size,
                 layers=cfg.n_layers, episodes=cfg.bc_episodes, steps=cfg.bc_steps, lr=cfg.bc_lr, seed=seed,
                 layout=layout, max_turns=max_turns, noise=cfg.bc_noise, env_options=cfg.env_options())
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def behaviour_clone(model: Any, codec: TokenCodec, episodes: Sequence[Episode], *, layout: str, steps: int, lr: float,
                    batch_size: int = 64, seed: int = 0, device: Any = "cpu", log: Callable[[str], None] = print
                    ) -> list[float]:
    """Maximise the log-likelihood of the demonstration responses (masked tokens only). Returns the loss curve."""
    batch = build_batch(episodes, layout=layout, codec=codec)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    n = batch.input_ids.shape[0]
    losses = []
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        idx = torch.randperm(n, generator=gen)[:batch_size]
        ids = batch.input_ids[idx].to(device)
        attn = batch.attention_mask[idx].to(device)
        mask = batch.response_mask[idx].to(device).float()
        logp, _ = window_logprobs(model, ids, attn, batch.start)
        loss = -(logp * mask).sum() / mask.sum().clamp_min(1.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 25 == 0 or step == steps - 1:
            log(progress_line("bc", step + 1, steps, time.perf_counter() - t0, f"nll {losses[-1]:.4f}"))
    model.eval()
    return losses


def progress_line(what: str, done: int, total: int, elapsed_s: float, extra: str = "") -> str:
    """``bc [#####.....] 120/300 40% 12s elapsed, ~18s left nll 0.41`` (plain text: works in logs and terminals)."""
    width = 20
    filled = int(width * done / max(1, total))
    left = elapsed_s / max(1, done) * (total - done)
    return (f"{what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {100 * done / max(1, total):.0f}% "
            f"{elapsed_s:.0f}s elapsed, ~{left:.0f}s left {extra}").rstrip()


def shipped_fingerprints() -> list[str]:
    """Fingerprints of the warm starts the package ships (file names ``ENV-FINGERPRINT.pt``)."""
    return sorted(p.stem.split("-", 1)[1] for p in SHIPPED_DIR.glob("*-*.pt"))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_or_train_bc(model: Any, codec: TokenCodec, cfg: Any, env_factory: Callable[[], Any], vocabulary: Sequence[str],
                     layout: str, max_turns: int, log: Callable[[str], None] = print) -> WarmStart:
    """Warm-start ``model`` in place from the package's shipped warm starts, else the cache, else train it by BC and
    cache it. Returns which warm start it is."""
    key = cache_key(cfg, vocabulary, layout, max_turns)
    file = f"{cfg.env}-{key}.pt"
    folder = os.path.expanduser(cfg.bc_cache)
    for source, path in (("shipped", str(SHIPPED_DIR / file)), ("cache", os.path.join(folder, file))):
        if os.path.exists(path):
            model.load_state_dict(torch.load(path, map_location=cfg.device))
            log(f"bc: loaded the {source} warm start {path}")
            return WarmStart(key, source, _sha256(path), path)
    path = os.path.join(folder, file)
    seed = cfg.resolved_bc_seed() if hasattr(cfg, "resolved_bc_seed") else cfg.seed
    log(f"bc: no shipped or cached warm start {key}; cloning {cfg.bc_episodes} demonstration episodes "
        f"({cfg.bc_noise:.0%} random actions) for {cfg.bc_steps} steps, cached for the next run in {folder}")
    demos = solver_texts(env_factory, cfg.bc_episodes, seed=10_000 + seed, max_turns=max_turns, noise=cfg.bc_noise)
    behaviour_clone(model, codec, demo_episodes(demos, codec), layout=layout, steps=cfg.bc_steps, lr=cfg.bc_lr,
                    seed=seed, device=cfg.device, log=log)
    os.makedirs(folder, exist_ok=True)
    tmp = path + f".tmp{os.getpid()}"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)  # atomic: parallel runs may race on the same key
    log(f"bc: cached warm start {path}")
    return WarmStart(key, "trained", _sha256(path), path)
