"""The training loop: rollout -> rewards and advantages -> PPO-style updates, logged only through the Collector.

One step (CleanRL-style, top to bottom):
  0. every eval_every steps: episodes on the fixed evaluation set (eval_success, the same tasks every time);
  1. play n_tasks x group_size episodes with the sampler (the policy itself, or a copy in reduced precision and/or
     rollout_lag steps behind, as asynchronous trainers run);
  2. turn rewards r_t (env reward minus the format penalty of invalid turns, the same for every algorithm), episode
     returns R, advantages (GRPO group z-score, or GiGPO episode + omega * anchor-state step advantage), dynamic
     filtering of groups;
  3. logp_old (the sampler's log-probs, or the trainer's recompute before any update) and logp_ref (no gradient);
  4. ppo_epochs x n_minibatches AdamW updates of the policy loss (+ k3 KL), each recorded with record_update;
     a mini-batch without advantage is not stepped;
  5. step metrics with record_step; stop early when the Collector says so.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import time
from collections import deque
from typing import Any, Callable, Optional

import numpy as np
import torch

from arldiag.trainer import numerics
from arldiag.trainer.advantages import (discounted_returns, dynamic_filter_keep, gigpo_step_advantages,
                                        grpo_advantages)
import arldiag
from arldiag.settings import CONFIG_ENV, DEFAULT_FILE, load
from arldiag.stabilize import Limits, Stabilizer, limits_of
from arldiag.trainer.batch import Batch, build_batch
from arldiag.trainer.bc import load_or_train_bc, solver_texts
from arldiag.trainer.config import SEQUENCE_CLIP_ALGOS, TrainConfig
from arldiag.trainer.envs import make_env
from arldiag.trainer.losses import k3_kl, policy_loss
from arldiag.trainer.policy import TokenCodec, build_policy, load_pretrained, perturb_weights, window_logprobs
from arldiag.trainer.rollout import Episode, run_episodes, step_task_ids
from arldiag.trainer.stabilize import TrainerControls

# Environments whose replies come back inside the context (tool outputs) train one sample per trajectory.
TRAJECTORY_ENVS = ("calculator",)
MERGE_DEMO_EPISODES = 50
TOLERANT_ALGOS = ("cispo", "sapo")  # no hard lower clip bound: gradients flow for every token
REFERENCE_BAND = (0.2, 0.28)  # GRPO eps_low / DAPO clip-higher eps_high: the band tolerant losses are diagnosed against
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class NullCollector:
    """A collector that records nothing (same methods as arldiag.Collector): for benchmarks and dry runs."""
    should_stop = False

    def __enter__(self) -> "NullCollector":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def record_rollout(self, step: int, **kw: Any) -> None:
        return None

    def record_update(self, step: int, **kw: Any) -> None:
        return None

    def record_step(self, step: int, **kw: Any) -> None:
        return None


def make_env_factory(cfg: TrainConfig) -> Callable[[], Any]:
    """A factory of fresh environments with the config's env options (checked once here, with a clear error)."""
    kw = cfg.env_options()
    try:
        make_env(cfg.env, **kw)
    except TypeError as exc:  # an option this environment does not have
        raise ValueError(f"env={cfg.env!r} does not take the option(s) {', '.join(sorted(kw))}: {exc}") from None
    return lambda: make_env(cfg.env, **kw)


def resolve_layout(cfg: TrainConfig, env: Any) -> str:
    if cfg.context != "auto":
        return cfg.context
    return getattr(env, "context", None) or ("trajectory" if getattr(env, "name", cfg.env) in TRAJECTORY_ENVS else "turn")


def diagnostic_bands(cfg: TrainConfig) -> tuple[tuple[float, float], tuple[float, float]]:
    """(token band, sequence band) as (eps_low, eps_high) that the Collector diagnoses ratios against.

    A sequence-clip loss has its own sequence band; token losses have none, and tolerant losses (CISPO eps_low = 1,
    SAPO) have no lower bound at all, so "ratio below 1 - eps_low" would never hold and ARLArena's negative-advantage
    low-IS set would be unobservable exactly where it matters. Those are diagnosed against the standard GRPO/DAPO
    band (eps at most 0.2 / 0.28) instead; run.json says so (config.diagnostic_bands)."""
    reference = (min(cfg.clip_low, REFERENCE_BAND[0]), min(cfg.clip_high, REFERENCE_BAND[1]))
    token = reference if cfg.algo in TOLERANT_ALGOS else (cfg.clip_low, cfg.clip_high)
    sequence = (cfg.clip_low, cfg.clip_high) if cfg.algo in SEQUENCE_CLIP_ALGOS else reference
    return token, sequence


def open_collector(cfg: TrainConfig, logp_old_source: str = "recompute", warm_start: Any = None) -> Any:
    token_clip, seq_clip = diagnostic_bands(cfg)
    config = dataclasses.asdict(cfg)
    config["nalis_mask"] = cfg.resolved_nalis_mask()
    config["injected_faults"] = cfg.injected_faults()
    config["split"] = cfg.resolved_split()
    config["logp_old_source"] = logp_old_source
    # which behaviour-cloned weights the run started from (bc.WarmStart: fingerprint, shipped/cache/trained, sha256)
    config["warm_start"] = warm_start.record() if warm_start is not None else None
    # the floating point the run had (pinned or not, kernel level, threads) and its fingerprint
    config["numerics"] = numerics.record(cfg.reproducible)
    config["diagnostic_bands"] = {
        "token": list(token_clip), "sequence": list(seq_clip),
        "note": ("tolerant loss: ratios are diagnosed against the reference GRPO band, not the loss's own bounds"
                 if cfg.algo in TOLERANT_ALGOS else "the loss's own clip bounds")}
    monitor = None
    stabilize = stabilize_policy(cfg)
    if cfg.monitor != "off" or stabilize:  # the same detectors as `arldiag detect`, per step
        # the closed loop acts on the rule-based state whatever risk model calibrated.json ships: its policies
        # choose an action by the leading detector, and the stress set's stabilised twins were measured with it
        monitor = arldiag.Monitor(sinks=("console", "store"), stop_on="critical" if cfg.monitor == "stop" else None,
                                  risk_model="rules" if stabilize else None)
    return arldiag.Collector(cfg.out, config=config, clip=token_clip, seq_clip=seq_clip,
                             name=cfg.name or cfg.out.rstrip("/").split("/")[-1], algorithm=cfg.algo,
                             token_sample_rate=cfg.token_sample_rate, neg_adv_delta=cfg.nalis_delta,
                             monitor=monitor)


def stabilize_policy(cfg: TrainConfig) -> str | None:
    """The --auto-stabilize policy, else the [stabilize] policy of arldiag.toml when the flag is unset; None: off."""
    if cfg.auto_stabilize is not None:
        return None if cfg.auto_stabilize == "off" else cfg.auto_stabilize

    if not (os.environ.get(CONFIG_ENV) or os.path.isfile(DEFAULT_FILE)):
        return None
    return load().stabilize_policy()


def open_stabilizer(cfg: TrainConfig, col: Any, model: Any, optimizer: Any, sampler: Any,
                    log: Callable[[str], None]) -> Any:
    """The Stabilizer acting on this run (None when --auto-stabilize is off). It needs the collector's Monitor."""
    policy = stabilize_policy(cfg)
    if policy is None:
        return None
    if getattr(getattr(col, "monitor", None), "on_step", None) is None:
        log("auto-stabilize: the collector has no monitor, so no policy runs")
        return None

    limits = (limits_of(load()) if os.environ.get(CONFIG_ENV) or os.path.isfile(DEFAULT_FILE)
              else Limits())
    controls = TrainerControls(cfg, model, optimizer, sampler)
    return Stabilizer(policy, controls, record=getattr(col, "record_action", None), limits=limits, log_fn=log)


# --- rewards and advantages ------------------------------------------------------------------------------------------
def turn_rewards(ep: Episode, format_penalty: float) -> np.ndarray:
    """r_t = env reward - format_penalty for an invalid response (the env's own -0.1 is already inside)."""
    return np.array([t.reward - (format_penalty if not t.valid else 0.0) for t in ep.turns], dtype=np.float64)


def episode_advantages(episodes: list[Episode], cfg: TrainConfig) -> tuple[list[np.ndarray], np.ndarray]:
    """Per episode, the advantage of each turn; and the episode returns R."""
    rewards = [turn_rewards(ep, cfg.format_penalty) for ep in episodes]
    returns = np.array([r.sum() for r in rewards])
    groups = np.array([ep.group_index for ep in episodes])
    a_episode = grpo_advantages(returns, groups)  # [N]
    if cfg.adv_estimator == "grpo":
        return [np.full(len(ep.turns), a_episode[e]) for e, ep in enumerate(episodes)], returns
    # GiGPO: step-samples of a group clustered by anchor observation; discounted returns z-scored per cluster
    step_returns, step_groups, anchors, owner = [], [], [], []
    for e, ep in enumerate(episodes):
        g = discounted_returns(rewards[e], cfg.gamma)
        for k, t in enumerate(ep.turns):
            step_returns.append(g[k])
            step_groups.append(ep.group_index)
            anchors.append(t.anchor)
            owner.append((e, k))
    a_step = gigpo_step_advantages(np.array(step_returns), np.array(step_groups), anchors)
    out = [np.full(len(ep.turns), a_episode[e]) for e, ep in enumerate(episodes)]
    for (e, k), a in zip(owner, a_step):
        out[e][k] += cfg.omega * a
    return out, returns


def batch_advantages(batch: Batch, per_turn: list[np.ndarray]) -> torch.Tensor:
    """Token advantages [B, W]: each window token gets the advantage of its turn."""
    turns = batch.turn_ids.numpy()  # [B, W]
    adv = np.zeros(turns.shape, dtype=np.float32)
    for b, e in enumerate(batch.episode_index):
        a = per_turn[e]
        adv[b] = a[np.minimum(turns[b], len(a) - 1)]
    return torch.from_numpy(adv)


# --- model helpers ------------------------------------------------------------------------------------------------------
def _trim(batch: Batch, idx: np.ndarray) -> tuple[slice, slice, int]:
    """Columns of the sub-batch that hold any token: (input column slice, window column slice, start)."""
    attn = batch.attention_mask[idx]
    cols = torch.nonzero(attn.any(0)).squeeze(-1)
    c0 = min(int(cols[0]), batch.start - 1) if len(cols) else batch.start - 1
    c1 = max(int(cols[-1]) + 1, batch.start + 1) if len(cols) else batch.start + 1
    return slice(c0, c1), slice(0, c1 - batch.start), batch.start - c0


def recompute_logp(model: Any, batch: Batch, idx: np.ndarray, cfg: TrainConfig, chunk: int = 256) -> torch.Tensor:
    """Window log-probs [len(idx), W] of ``model`` without gradient, in chunks."""
    W = batch.token_ids.shape[1]
    out = torch.zeros((len(idx), W), dtype=torch.float32)
    with torch.no_grad():
        for s in range(0, len(idx), chunk):
            sub = idx[s:s + chunk]
            cols, wcols, start = _trim(batch, sub)
            ids = batch.input_ids[sub][:, cols].to(cfg.device)
            attn = batch.attention_mask[sub][:, cols].to(cfg.device)
            logp, _ = window_logprobs(model, ids, attn, start, cfg.temperature)
            out[s:s + len(sub), wcols] = logp.float().cpu()
    return out


def setup_policy(cfg: TrainConfig, env_factory: Callable[[], Any], layout: str, max_turns: int,
                 log: Callable[[str], None]) -> tuple[Any, TokenCodec, Any]:
    """The policy, its codec and its warm start (bc.WarmStart, or None when not behaviour-cloned)."""
    if cfg.init not in ("bc", "scratch"):
        model, codec = load_pretrained(cfg.init)  # a checkpoint folder (save_pretrained) with its tokenizer
        return model.to(device=cfg.device, dtype=torch.float32), codec, None

    probe = env_factory()
    vocabulary = list(probe.vocabulary())
    merge_corpus = [resp for ep in solver_texts(env_factory, MERGE_DEMO_EPISODES, 12345, max_turns) for _, resp, _, _ in ep]
    shared_bc = cfg.init == "bc" and cfg.bc_seed is not None
    if shared_bc:  # the warm start's initialisation follows the BC seed, not the run's (one warm start, many runs)
        torch.manual_seed(cfg.resolved_bc_seed())
    model, codec = build_policy(cfg, vocabulary, merge_corpus)
    warm_start = None
    if cfg.init == "bc":
        warm_start = load_or_train_bc(model, codec, cfg, env_factory, vocabulary, layout, max_turns, log=log)
    if shared_bc:
        torch.manual_seed(cfg.seed)  # the RL part is seeded by the run's seed
    return model, codec, warm_start


# --- sampler, evaluation --------------------------------------------------------------------------------------------
EVAL_SEED = 20_251_130  # the evaluation set's task seeds and sampling generator: the same for every run and seed


class LaggedSampler:
    """The model that plays the episodes: the policy itself, or a frozen copy in the sampler's precision and/or
    ``rollout_lag`` steps behind (what asynchronous trainers and reduced-precision inference engines do).

    ``sync(policy)`` is called at the start of every step: it remembers the policy's weights of the last lag+1 steps
    and loads the oldest of them into the copy, so at step s the sampler plays with the weights of step s - lag
    (of step 0 while s < lag)."""

    def __init__(self, policy: Any, rollout_dtype: str = "float32", rollout_lag: int = 0):
        self.lag = int(rollout_lag)
        self.is_policy = rollout_dtype == "float32" and self.lag == 0
        self.model = policy if self.is_policy else copy.deepcopy(policy).to(DTYPES[rollout_dtype]).requires_grad_(False)
        self.snapshots: deque = deque(maxlen=self.lag + 1)

    def sync(self, policy: Any) -> None:
        if self.is_policy:
            return
        self.snapshots.append({k: v.detach().clone() for k, v in policy.state_dict().items()})
        self.model.load_state_dict(self.snapshots[0])  # cast into the sampler's precision


def resolve_logp_old_source(cfg: TrainConfig, sampler_is_policy: bool) -> str:
    """auto: the sampler's own log-probs when the sampler is exactly the current float32 policy (they equal the
    trainer's recompute up to float rounding, so a forward pass is saved); otherwise the recompute."""
    if cfg.logp_old_source != "auto":
        return cfg.logp_old_source
    return "sampler" if sampler_is_policy and not cfg.retokenize else "recompute"


def evaluate(model: Any, envs: list[Any], codec: TokenCodec, cfg: TrainConfig, layout: str, max_turns: int
             ) -> dict[str, float]:
    """Success on the fixed evaluation set (``eval_tasks`` task seeds drawn from EVAL_SEED, sampled with a generator
    seeded by EVAL_SEED), so learning and collapse are measured on the same tasks at every step and for every run,
    without the batch's task noise."""
    tasks = np.random.default_rng(EVAL_SEED).integers(0, 2**31 - 1, size=len(envs))
    episodes = run_episodes(model, envs, tasks, np.arange(len(envs)), codec, layout=layout, max_turns=max_turns,
                            max_new_tokens=cfg.max_new_tokens, temperature=cfg.eval_temperature,
                            retokenize_between_turns=False, generator=torch.Generator().manual_seed(EVAL_SEED),
                            device=cfg.device)
    turns = [t for ep in episodes for t in ep.turns]
    return {"eval_success": float(np.mean([ep.success for ep in episodes])),
            "eval_valid_format": float(np.mean([t.valid for t in turns])) if turns else float("nan"),
            "eval_return": float(np.mean([turn_rewards(ep, cfg.format_penalty).sum() for ep in episodes])),
            "eval_episode_length": float(np.mean([len(ep.turns) for ep in episodes]))}


def is_eval_step(cfg: TrainConfig, step: int) -> bool:
    return cfg.eval_every > 0 and (step % cfg.eval_every == 0 or step == cfg.steps - 1)


def save_tokenizer(codec: TokenCodec, out: str) -> None:
    """``OUT/tokenizer.json`` (the tokenizers library's format) so that readers can decode token ids to text."""

    backend = getattr(codec.tokenizer, "backend_tokenizer", None)
    if backend is not None:
        os.makedirs(out, exist_ok=True)
        backend.save(os.path.join(out, "tokenizer.json"))


# --- the loop -------------------------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, env_factory: Optional[Callable[[], Any]] = None, collector: Any = None,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train with ``cfg``; returns {"history": [step metrics...], "wall_s": ...}. ``collector`` defaults to an
    arldiag.Collector writing to cfg.out (pass NullCollector() to record nothing)."""
    cfg = dataclasses.replace(cfg).validate()  # a copy: --auto-stabilize changes settings of this run only
    t_start = time.perf_counter()
    if cfg.reproducible:
        numerics.activate()  # one thread, deterministic; raises if torch loaded before the pinned settings
    elif cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    env_factory = env_factory or make_env_factory(cfg)
    probe = env_factory()
    layout = resolve_layout(cfg, probe)
    max_turns = min(int(probe.max_turns), cfg.max_turns or int(probe.max_turns))

    model, codec, warm_start = setup_policy(cfg, env_factory, layout, max_turns, log)
    perturb_weights(model, cfg.init_perturb, cfg.seed)  # a robustness test of the outcome (off by default)
    model.eval()  # no dropout: logp_old must equal the policy that sampled
    reference = copy.deepcopy(model).requires_grad_(False)
    sampler = LaggedSampler(model, cfg.rollout_dtype, cfg.rollout_lag)
    logp_old_source = resolve_logp_old_source(cfg, sampler.is_policy)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    envs = [env_factory() for _ in range(cfg.n_tasks * cfg.group_size)]
    eval_envs = [env_factory() for _ in range(cfg.eval_tasks)] if cfg.eval_every > 0 else []

    history: list[dict[str, float]] = []
    next_sample_id = 0
    if collector is None:
        collector = open_collector(cfg, logp_old_source, warm_start)
        save_tokenizer(codec, cfg.out)
    with collector as col:
        stabilizer = open_stabilizer(cfg, col, model, optimizer, sampler, log)
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            eval_metrics = evaluate(model, eval_envs, codec, cfg, layout, max_turns) if is_eval_step(cfg, step) else {}
            t_eval = time.perf_counter() - t0
            # 1. rollout ------------------------------------------------------------------------------------------
            sampler.sync(model)
            task_ids, group_index = step_task_ids(rng, cfg.n_tasks, cfg.group_size)
            episodes = run_episodes(sampler.model, envs, task_ids, group_index, codec, layout=layout, max_turns=max_turns,
                                    max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                    retokenize_between_turns=cfg.retokenize, generator=generator, device=cfg.device)
            t_rollout = time.perf_counter() - t0 - t_eval
            # 2. rewards, advantages, filtering --------------------------------------------------------------------
            per_turn_adv, returns = episode_advantages(episodes, cfg)
            groups = np.array([ep.group_index for ep in episodes])
            keep_episode = (dynamic_filter_keep(returns, groups, step, cfg.cold_start_steps) if cfg.dynamic_filter
                            else np.ones(len(episodes), dtype=bool))
            batch = build_batch(episodes, layout=layout, codec=codec)
            advantages = batch_advantages(batch, per_turn_adv)  # [B, W]
            B = batch.token_ids.shape[0]
            sample_ids = np.arange(next_sample_id, next_sample_id + B, dtype=np.int64)
            next_sample_id += B
            ep_of = batch.episode_index
            traj_ids = step * len(episodes) + ep_of
            group_ids = step * cfg.n_tasks + groups[ep_of]
            if layout == "turn":
                turn_ids_rec: Any = batch.sample_turn
                valid = np.array([episodes[e].turns[k].valid for e, k in zip(ep_of, batch.sample_turn)])
                truncated = np.array([episodes[e].turns[k].truncated for e, k in zip(ep_of, batch.sample_turn)])
            else:
                turn_ids_rec = batch.turn_ids
                valid = np.array([all(t.valid for t in episodes[e].turns) for e in ep_of])
                truncated = np.array([any(t.truncated for t in episodes[e].turns) for e in ep_of])
            success = np.array([episodes[e].success for e in ep_of])
            col.record_rollout(step, sample_ids=sample_ids, group_ids=group_ids, turn_ids=turn_ids_rec,
                               token_ids=batch.rollout_ids, response_mask=batch.response_mask,
                               logp_rollout=batch.logp_rollout, rewards=returns[ep_of].astype(np.float32),
                               format_valid=valid, truncated=truncated, success=success, trajectory_ids=traj_ids,
                               texts=None)
            # 3. logp_old / logp_ref -----------------------------------------------------------------------------
            t1 = time.perf_counter()
            train_idx = np.nonzero(keep_episode[ep_of])[0]
            update_stats: list[dict[str, float]] = []
            if len(train_idx):
                logp_old = (batch.logp_rollout[train_idx] if logp_old_source == "sampler"
                            else recompute_logp(model, batch, train_idx, cfg))  # [n, W]
                logp_ref = recompute_logp(reference, batch, train_idx, cfg)  # [n, W]
                pos = {int(b): i for i, b in enumerate(train_idx)}
                # 4. updates ---------------------------------------------------------------------------------------
                update = 0
                for epoch in range(cfg.ppo_epochs):
                    order = rng.permutation(train_idx)
                    for mb in np.array_split(order, min(cfg.n_minibatches, len(order))):
                        rows = np.array([pos[int(b)] for b in mb])
                        cols, wcols, start = _trim(batch, mb)
                        ids = batch.input_ids[mb][:, cols].to(cfg.device)
                        attn = batch.attention_mask[mb][:, cols].to(cfg.device)
                        logp, entropy = window_logprobs(model, ids, attn, start, cfg.temperature, with_entropy=True,
                                                        entropy_grad=cfg.ent_coef > 0)
                        mask = batch.response_mask[mb][:, wcols].to(cfg.device)  # [b, w]
                        lp_old = logp_old[rows][:, wcols].to(cfg.device)
                        lp_ref = logp_ref[rows][:, wcols].to(cfg.device)
                        adv = advantages[mb][:, wcols].to(cfg.device)
                        turn_tok = batch.turn_ids[mb][:, wcols].to(cfg.device)
                        lp_roll = batch.logp_rollout[mb][:, wcols].to(cfg.device)  # the sampler's (OPSM, TIS)
                        loss, stats = policy_loss(cfg, logp, lp_old, adv, mask, logp_ref=lp_ref, turn_ids=turn_tok,
                                                  logp_rollout=lp_roll, entropy=entropy,
                                                  truncated=torch.as_tensor(truncated[mb], device=cfg.device))
                        optimizer.zero_grad(set_to_none=True)
                        loss.backward()
                        grad_norm = torch.nn.utils.clip_grad_norm_(
                            params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
                        finite = bool(torch.isfinite(loss)) and bool(torch.isfinite(grad_norm))
                        # A mini-batch without advantage has only the KL term's (or no) gradient, which Adam's
                        # normalisation would blow up to a full-size step: skip it.
                        has_signal = bool((adv * mask).abs().sum() > 0)
                        if finite and has_signal:
                            optimizer.step()
                        elif not finite:  # never apply a NaN/Inf update; the Collector reports the non-finite tokens
                            log(f"step {step} update {update}: non-finite loss/grad, update skipped")
                        stats["nonfinite_update"] = 0.0 if finite else 1.0
                        stats["skipped_update"] = 0.0 if (finite and has_signal) else 1.0
                        with torch.no_grad():
                            m = mask.sum().clamp_min(1.0)
                            stats.update(loss=float(loss.detach()), grad_norm=float(grad_norm),
                                         ppo_kl=float(((lp_old - logp.detach()) * mask).sum() / m),
                                         kl_ref_k3=float((k3_kl(logp.detach(), lp_ref) * mask).sum() / m),
                                         entropy=float((entropy.detach() * mask).sum() / m))
                        update_stats.append(stats)
                        col.record_update(step, update=update, logp=logp.detach(), logp_old=lp_old,
                                          advantages=adv[:, 0] if layout == "turn" else adv, response_mask=mask,
                                          logp_ref=lp_ref, logp_rollout=lp_roll,
                                          entropy=entropy.detach(), sample_ids=sample_ids[mb],
                                          turn_ids=batch.sample_turn[mb] if layout == "turn" else turn_tok,
                                          token_ids=batch.token_ids[mb][:, wcols])
                        update += 1
            t_update = time.perf_counter() - t1
            # 5. step metrics -----------------------------------------------------------------------------------
            metrics = step_metrics(episodes, batch, keep_episode, groups, update_stats, cfg, cfg.resolved_nalis_mask())
            metrics.update(eval_metrics)
            metrics.update(eval_s=t_eval, rollout_s=t_rollout, update_s=t_update, step_s=time.perf_counter() - t0)
            col.record_step(step, metrics=metrics)
            history.append(metrics)
            log(f"step {step:4d} success {metrics['success_rate']:.3f} valid {metrics['valid_format_ratio']:.3f} "
                f"return {metrics['return_mean']:+.2f} len {metrics['episode_length']:.1f} "
                f"grad {metrics['grad_norm']:.3f} kl_ref {metrics['kl_ref_k3']:.4f} ent {metrics['entropy']:.3f} "
                f"nalis {metrics['nalis_masked_frac']:.3f} {metrics['step_s']:.1f}s"
                + (f" | eval success {eval_metrics['eval_success']:.3f} valid {eval_metrics['eval_valid_format']:.3f}"
                   if eval_metrics else ""))
            if stabilizer is not None:  # act on this step's alert state before the next rollout
                res = getattr(col.monitor, "last_result", None)
                if res is not None and res.step == step:
                    stabilizer.on_result(res)
                if stabilizer.stopped:
                    log(f"auto-stabilize stopped the run at step {step}: {stabilizer.target.stop_reason}")
                    break
            if getattr(col, "should_stop", False):
                log(f"collector asked to stop at step {step}")
                break
    if stabilizer is not None:
        log(stabilizer.summary())
    if cfg.save_model:

        folder = os.path.join(cfg.out, "model")
        model.save_pretrained(folder)
        codec.tokenizer.save_pretrained(folder)
    return {"history": history, "wall_s": time.perf_counter() - t_start, "layout": layout,
            "logp_old_source": logp_old_source,
            "actions": [] if stabilizer is None else [dict(step=t.step, action=t.action.kind, detector=t.action.detector,
                                                           params=dict(t.action.params)) for t in stabilizer.history]}


def step_metrics(episodes: list[Episode], batch: Batch, keep_episode: np.ndarray, groups: np.ndarray,
                 update_stats: list[dict[str, float]], cfg: TrainConfig, use_nalis: bool) -> dict[str, float]:
    turns = [t for ep in episodes for t in ep.turns]

    def mean_of(key: str) -> float:
        vals = [s[key] for s in update_stats if key in s]
        return float(np.mean(vals)) if vals else float("nan")

    n_groups = len(np.unique(groups))
    kept_groups = len(np.unique(groups[keep_episode])) if keep_episode.any() else 0
    resp_tokens = float(sum(len(t.sampled_ids) for t in turns))
    out = {
        "success_rate": float(np.mean([ep.success for ep in episodes])),
        "valid_format_ratio": float(np.mean([t.valid for t in turns])) if turns else float("nan"),
        "return_mean": float(np.mean([sum(turn_rewards(ep, cfg.format_penalty)) for ep in episodes])),
        "episode_length": float(np.mean([len(ep.turns) for ep in episodes])),
        "truncated_frac": float(np.mean([t.truncated for t in turns])) if turns else float("nan"),
        "response_length": resp_tokens / max(1, len(turns)),
        "gen_tokens": resp_tokens,
        "lr": cfg.lr,
        "loss": mean_of("loss"),
        "pg_loss": mean_of("pg_loss"),
        "grad_norm": mean_of("grad_norm"),
        "grad_norm_max": float(max((s["grad_norm"] for s in update_stats), default=float("nan"))),
        "ppo_kl": mean_of("ppo_kl"),
        "kl_ref_k3": mean_of("kl_ref_k3"),
        "entropy": mean_of("entropy"),
        "ratio_mean": mean_of("ratio_mean"),
        "clipfrac_low": mean_of("clipfrac_low"),
        "clipfrac_high": mean_of("clipfrac_high"),
        "nalis_masked_frac": mean_of("nalis_masked_frac") if use_nalis else 0.0,
        # the always-on corrections' own figures (losses.CORRECTIONS; 0 / weight 1 when off)
        "opsm_masked_frac": mean_of("opsm_masked_frac"),
        "tis_weight_mean": mean_of("tis_weight_mean"),
        "tis_truncated_frac": mean_of("tis_truncated_frac"),
        "truncated_masked_frac": mean_of("truncated_masked_frac"),
        "filtered_groups_frac": 1.0 - kept_groups / max(1, n_groups),
        "n_samples": float(batch.token_ids.shape[0]),
        "n_updates": float(len(update_stats)),
        "nonfinite_updates": float(sum(s.get("nonfinite_update", 0.0) for s in update_stats)),
        "skipped_updates": float(sum(s.get("skipped_update", 0.0) for s in update_stats)),
    }
    return out
