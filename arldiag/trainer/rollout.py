"""Batched multi-turn rollouts, token-in-token-out.

Each turn, the active episodes' contexts are left-padded into one batch and the sampler generates with a KV cache
until EOS or ``max_new_tokens``. The ids the sampler drew are the ids the trainer optimises, unless ``retokenize``
decodes them to text and encodes again (retokenization drift, AT^2PO). ``logp_rollout`` is the sampler's own
log-prob of each drawn token; a sampler in reduced precision (``rollout_dtype``) makes it differ from the trainer's.

Two sample layouts (``context``):
- ``turn``: one training sample per turn; its prompt is the environment's observation (which carries the history
  the environment chooses to show), its response the policy's reply (verl-agent / GiGPO step-wise training).
- ``trajectory``: one sample per episode; after each reply the environment's tool output (or, when it has none, its
  next observation) is appended as tokens with response_mask 0, and the policy continues from there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from arldiag.trainer.policy import TokenCodec, position_ids_from_mask


@dataclass
class Turn:
    prompt_ids: list[int]          # turn layout: the observation's ids (with bos); trajectory layout: unused
    sampled_ids: list[int]         # ids the sampler drew (eos included when drawn)
    trained_ids: list[int]         # ids the trainer optimises (== sampled_ids unless retokenize)
    logp_rollout: list[float]      # sampler log-probs aligned position-wise with trained_ids
    inserted_ids: list[int]        # env text appended after the reply (trajectory layout), masked out of the loss
    reward: float
    valid: bool
    truncated: bool                # the reply hit max_new_tokens without eos
    anchor: str


@dataclass
class Episode:
    task_id: int                   # environment seed of the task (the GRPO group)
    group_index: int               # index of the group within the step
    prompt_ids: list[int]          # first observation's ids (with bos)
    turns: list[Turn] = field(default_factory=list)
    success: bool = False

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def _cache_kwarg(model: Any) -> str:
    """The KV-cache argument name: ``cache`` in recent transformers, ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _output_cache(out: Any) -> Any:
    return out.cache if getattr(out, "cache", None) is not None else getattr(out, "past_key_values", None)


@torch.no_grad()
def sample_responses(model: Any, contexts: Sequence[Sequence[int]], codec: TokenCodec, max_new_tokens: int,
                     temperature: float, generator: torch.Generator, device: Any
                     ) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """Sample one reply per context with a KV cache. Returns (ids, log-probs, truncated) per context; ids end with
    eos when the sampler drew it."""
    ids, attn = _left_pad(contexts, codec.pad_id, device)
    n = len(contexts)
    out = model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn), use_cache=True,
                logits_to_keep=1)
    cache_kw = _cache_kwarg(model)
    past = _output_cache(out)
    logits = out.logits[:, -1, :]
    positions = attn.sum(-1, keepdim=True)  # [N, 1] next position of each row
    replies: list[list[int]] = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        if temperature > 0:
            logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)  # [N, V]
            token = torch.multinomial(logp_all.exp().cpu(), 1, generator=generator).to(device)  # [N, 1]
        else:  # greedy (evaluation): the log-probs are those of the untempered distribution
            logp_all = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
            token = logp_all.argmax(-1, keepdim=True)  # [N, 1]
        token_logp = torch.gather(logp_all, -1, token).squeeze(-1)  # [N]
        tok_list, lp_list = token.squeeze(-1).tolist(), token_logp.tolist()
        for i in range(n):
            if not finished[i]:
                replies[i].append(tok_list[i])
                logps[i].append(lp_list[i])
        finished |= token.squeeze(-1) == codec.eos_id
        if bool(finished.all()):
            break
        attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype, device=device)], dim=1)
        out = model(input_ids=token, attention_mask=attn, position_ids=positions, use_cache=True, **{cache_kw: past})
        past = _output_cache(out)
        logits = out.logits[:, -1, :]
        positions = positions + 1
    truncated = [not (r and r[-1] == codec.eos_id) for r in replies]
    return replies, logps, truncated


def retokenize(ids: Sequence[int], logps: Sequence[float], codec: TokenCodec) -> tuple[list[int], list[float]]:
    """Decode to text and encode again (what a text-based agent loop does between turns). The sampler's log-probs
    are carried over position-wise: when the ids changed, they no longer belong to the trained tokens, which is the
    drift signature (large |logp_rollout - logp_old| at isolated tokens)."""
    ended = bool(ids) and ids[-1] == codec.eos_id
    new_ids = codec.encode(codec.decode(ids)) + ([codec.eos_id] if ended else [])
    if not new_ids:
        new_ids = [codec.eos_id]
    lp = list(logps)[: len(new_ids)]
    lp += [lp[-1] if lp else 0.0] * (len(new_ids) - len(lp))
    return new_ids, lp


def reply_text(ids: Sequence[int], codec: TokenCodec) -> str:
    return codec.decode([i for i in ids if i != codec.eos_id])


def run_episodes(sampler: Any, envs: Sequence[Any], task_ids: Sequence[int], group_index: Sequence[int],
                 codec: TokenCodec, *, layout: str, max_turns: int, max_new_tokens: int, temperature: float,
                 retokenize_between_turns: bool, generator: torch.Generator, device: Any,
                 max_context: int = 4096) -> list[Episode]:
    """Play one episode in every env (env i reset to task_ids[i]) in lock-step batches of turns."""
    if layout not in ("turn", "trajectory"):
        raise ValueError(f"layout={layout!r}: choose turn or trajectory")
    bos = [codec.bos_id] if codec.bos_id is not None else []
    episodes: list[Episode] = []
    for env, task, g in zip(envs, task_ids, group_index):
        env.reset(int(task))
        episodes.append(Episode(task_id=int(task), group_index=int(g), prompt_ids=bos + codec.encode(env.observation())))
    contexts = [list(ep.prompt_ids) for ep in episodes]  # trajectory layout: the growing context
    active = list(range(len(envs)))
    for turn in range(max_turns):
        if not active:
            break
        if layout == "turn":
            prompts = [bos + codec.encode(envs[i].observation()) if turn > 0 else episodes[i].prompt_ids for i in active]
        else:
            prompts = [contexts[i][-max_context:] for i in active]
        anchors = [envs[i].anchor() for i in active]
        replies, logps, truncated = sample_responses(sampler, prompts, codec, max_new_tokens, temperature, generator, device)
        still: list[int] = []
        for k, i in enumerate(active):
            sampled = replies[k]
            trained, lp = (retokenize(sampled, logps[k], codec) if retokenize_between_turns else (sampled, logps[k]))
            result = envs[i].step(reply_text(sampled, codec))
            last = result.done or turn == max_turns - 1
            inserted: list[int] = []
            if layout == "trajectory" and not last:
                inserted = codec.encode(result.tool_output if result.tool_output else envs[i].observation())
                contexts[i] = contexts[i] + trained + inserted
            episodes[i].turns.append(Turn(prompt_ids=list(prompts[k]), sampled_ids=sampled, trained_ids=trained,
                                          logp_rollout=lp, inserted_ids=inserted, reward=float(result.reward),
                                          valid=bool(result.valid), truncated=truncated[k], anchor=anchors[k]))
            if result.done:
                episodes[i].success = bool(result.success)
            if not last:
                still.append(i)
        active = still
    return episodes


def step_task_ids(rng: np.random.Generator, n_tasks: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Task seeds for one step: n_tasks fresh seeds, each repeated group_size times, and the group index."""
    tasks = rng.integers(0, 2**31 - 1, size=n_tasks)
    return np.repeat(tasks, group_size), np.repeat(np.arange(n_tasks), group_size)

