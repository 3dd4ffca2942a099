"""own_loop: a small multi-turn GRPO trainer in plain torch, written the way an outside user would write one, that
records its run through arldiag's public Collector API (README "Use it in your trainer").

    python sample_runs/own_loop/own_loop.py --seed 0 --steps 200 --out /tmp/own_loop/s0
    python sample_runs/own_loop/own_loop.py --seed 0 --failure lr_spike --out /tmp/own_loop/lr_s0

The game ("higher / lower"): a hidden number h in 1..16; each turn the agent must answer "<a> k </a>" (three tokens:
OPEN, a number token, CLOSE) and the game answers HIGHER (h > k), LOWER (h < k), CORRECT (episode over) or INVALID
(the reply was malformed: anything but exactly OPEN NUM CLOSE; a turn without CLOSE is cut after
``max_turn_tokens`` tokens, "truncated"). At most ``max_turns`` turns; binary search needs at most 5.

One sample = one whole episode: the token row holds the policy's replies and the game's answers one after the other;
the loss mask keeps the policy's tokens only, and every token carries its turn index (the layout of multi-turn
trainers that train on whole trajectories). A tiny GRU policy is behaviour-cloned for a few steps on a scripted
binary-search expert, then trained with GRPO: G episodes per hidden number, advantages (R - mean) / (std + eps)
within the group (Shao et al. 2024, DeepSeekMath), the PPO clipped surrogate (Schulman et al. 2017) over several
mini-batch updates per step, a k3 KL penalty to the frozen warm start (Schulman 2020, "Approximating KL
divergence"), an optional entropy bonus, Adam and gradient clipping.

Failure knobs (``--failure``), each a realistic cause of a broken run:
  lr_spike       from step 100 the learning rate is 50x the healthy one (a resumed job whose scheduler lost its
                 state, with a typo'd peak)
  stale_noclip   rollouts from a sampler 2 steps behind, 4 epochs x 4 mini-batches per batch, no ratio clipping
                 and no KL penalty
  entropy_bonus  an entropy-bonus weight that grows from 0 to 0.3 over the run (a decay schedule written the wrong
                 way round): entropy runs away, replies turn to noise
  format_exploit the reward parser is lenient: a reply scores if the hidden number appears anywhere in it, so
                 spamming numbers pays while the strict format (and the true success) is lost

This script deliberately does not import anything from arldiag's own reference trainer; it only uses
``arldiag.Collector``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import arldiag


def doc(text: str, default):
    """A dataclass field whose help text lives next to its default (printed by --help)."""
    return field(default=default, metadata={"help": text})


@dataclass
class Config:
    seed: int = doc("random seed (hidden numbers, sampling, initial weights)", 0)
    steps: int = doc("GRPO steps (one rollout batch and its updates each)", 200)
    out: str = doc("run store folder written through arldiag.Collector", "runs/own_loop")
    failure: str = doc("failure knob: none | lr_spike | stale_noclip | entropy_bonus | format_exploit", "none")
    # game
    n_numbers: int = doc("hidden numbers are 1..n_numbers", 16)
    max_turns: int = doc("turns per episode", 6)
    max_turn_tokens: int = doc("tokens the policy may emit per turn before the turn is cut (truncated)", 6)
    format_penalty: float = doc("reward subtracted per malformed turn", 0.1)
    # policy
    d_embed: int = doc("token embedding width", 32)
    d_hidden: int = doc("GRU hidden width", 64)
    # warm start
    bc_steps: int = doc("behaviour-cloning steps on the scripted expert before RL", 40)
    bc_lr: float = doc("learning rate of the behaviour cloning", 3e-3)
    bc_batch: int = doc("expert episodes per behaviour-cloning step", 64)
    bc_noise: float = doc("probability that the expert guesses a random number in its interval, not the middle", 0.5)
    # GRPO
    n_tasks: int = doc("hidden numbers (groups) per step", 16)
    group_size: int = doc("episodes per hidden number (G)", 8)
    lr: float = doc("Adam learning rate of the RL phase", 3e-3)
    lr_jump_step: int = doc("from this step on the learning rate is lr x lr_jump_factor (< 0: never)", -1)
    lr_jump_factor: float = doc("the factor of that jump", 1.0)
    ppo_epochs: int = doc("passes over each rollout batch", 2)
    n_minibatches: int = doc("mini-batches per pass", 4)
    clip_eps: float = doc("PPO ratio clip epsilon; <= 0 turns clipping off", 0.2)
    kl_coef: float = doc("weight of the k3 KL penalty to the warm-start reference policy", 0.02)
    ent_coef: float = doc("weight of the entropy bonus at step 0 (0 = none)", 0.0)
    ent_coef_end: float = doc("weight of the entropy bonus at the last step, linear in between (< 0: = ent_coef)",
                              -1.0)
    max_grad_norm: float = doc("gradient-norm clip", 1.0)
    rollout_lag: int = doc("the sampler's weights are this many steps behind the learner (0 = on-policy)", 0)
    lenient_reward: bool = doc("reward parser counts any number between the tags (the format exploit)", False)
    temperature: float = doc("sampling temperature of the rollout", 1.0)
    # recording
    token_sample_rate: float = doc("fraction of samples whose token rows the run store keeps", 0.05)
    log_every: int = doc("print a line every this many steps (0 = quiet)", 20)


# what each failure knob changes, on top of the healthy defaults
FAILURES: dict[str, dict] = {
    "none": {},
    # the job resumes from its step-100 checkpoint with a scheduler that lost its state and a peak lr 50x too high
    # (0.15 for 3e-3): the run has learned by then, and Adam's first steps at that size wreck the policy
    "lr_spike": {"lr_jump_step": 100, "lr_jump_factor": 50.0},
    # an asynchronous pipeline run without its safeguards: rollouts from a sampler 2 steps behind, 4 epochs x 4
    # mini-batches on each batch, the sampler's log-probs as logp_old, no ratio clipping and no KL anchor
    "stale_noclip": {"clip_eps": 0.0, "ppo_epochs": 4, "n_minibatches": 4, "rollout_lag": 2, "kl_coef": 0.0},
    # an entropy-bonus schedule annealed the wrong way (meant to decay to 0, written to grow): the bonus keeps
    # growing until it outweighs the reward, entropy runs away and the replies turn to noise
    "entropy_bonus": {"ent_coef": 0.0, "ent_coef_end": 0.3},
    # a lenient reward parser (and so no format penalty): any number in a reply counts as a guess, so replies that
    # list many numbers pay more than one well-formed guess while the game itself rejects them
    "format_exploit": {"lenient_reward": True, "format_penalty": 0.0},
}

# ---------------------------------------------------------------------------------------------------- vocabulary
PAD, BOS, OPEN, CLOSE = 0, 1, 2, 3
NUM0 = 4  # token of number k is NUM0 + k - 1


def vocab(cfg: Config) -> dict[str, int]:
    """Game answer tokens follow the number tokens."""
    first = NUM0 + cfg.n_numbers
    return {"HIGHER": first, "LOWER": first + 1, "CORRECT": first + 2, "INVALID": first + 3, "size": first + 4}


def parse_turn(tokens: list[int], cfg: Config) -> int | None:
    """The guessed number of a well-formed reply (exactly OPEN NUM CLOSE), else None."""
    if len(tokens) == 3 and tokens[0] == OPEN and tokens[2] == CLOSE and NUM0 <= tokens[1] < NUM0 + cfg.n_numbers:
        return tokens[1] - NUM0 + 1
    return None


def lenient_numbers(tokens: list[int], cfg: Config) -> set[int]:
    """What a lenient regex-style reward parser reads from a reply: every number in it, well-formed or not."""
    return {t - NUM0 + 1 for t in tokens if NUM0 <= t < NUM0 + cfg.n_numbers}


def answer(guess: int | None, hidden: int, v: dict[str, int]) -> int:
    if guess is None:
        return v["INVALID"]
    return v["CORRECT"] if guess == hidden else (v["HIGHER"] if hidden > guess else v["LOWER"])


# ---------------------------------------------------------------------------------------------------- policy
class Policy(nn.Module):
    """Next-token GRU over the episode's token stream (policy replies and game answers alike)."""

    def __init__(self, n_vocab: int, d_embed: int, d_hidden: int):
        super().__init__()
        self.embed = nn.Embedding(n_vocab, d_embed)
        self.gru = nn.GRU(d_embed, d_hidden, batch_first=True)
        self.head = nn.Linear(d_hidden, n_vocab)

    def forward(self, tokens: torch.Tensor, h: torch.Tensor | None = None):
        out, h = self.gru(self.embed(tokens), h)  # tokens [B, L] -> out [B, L, H]
        return self.head(out), h                  # logits [B, L, V], h [1, B, H]


def token_logp(policy: Policy, seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each token seq[:, t+1] given seq[:, :t+1], and the entropy of that next-token distribution.
    seq [B, L] (BOS first) -> logp [B, L-1], entropy [B, L-1]."""
    logits, _ = policy(seq[:, :-1])
    logq = F.log_softmax(logits.float(), dim=-1)                     # [B, L-1, V]
    logp = logq.gather(-1, seq[:, 1:, None]).squeeze(-1)
    entropy = -(logq.exp() * logq).sum(-1)
    return logp, entropy


# ---------------------------------------------------------------------------------------------------- rollout
@dataclass
class Batch:
    seq: torch.Tensor       # [B, L] BOS + the episode's tokens, PAD after the end
    mask: torch.Tensor      # [B, L-1] the predicted token seq[:, t+1] is the policy's (not the game's, not PAD)
    turn: torch.Tensor      # [B, L-1] turn index of each predicted token
    logp: torch.Tensor      # [B, L-1] the sampler's log-probs of the tokens it emitted (0 elsewhere)
    reward: np.ndarray      # [B]
    success: np.ndarray     # [B] the game answered CORRECT
    valid: np.ndarray       # [B] every reply of the episode well-formed
    truncated: np.ndarray   # [B] some reply hit max_turn_tokens without CLOSE
    n_turns: np.ndarray     # [B]
    n_reply_tokens: np.ndarray  # [B] tokens the policy emitted
    valid_turn_frac: float  # well-formed replies / all replies


def advance(sampler: Policy, tok: torch.Tensor, logits: torch.Tensor, h: torch.Tensor, active: np.ndarray):
    """Feed tok [B, 1] to the rows in ``active`` [B]; the other rows (their turn or episode over) keep their state,
    so the whole batch steps in lockstep without the padding leaking into anyone's history."""
    new_logits, new_h = sampler(tok, h)                          # [B, 1, V], [1, B, H]
    a = torch.from_numpy(active)
    return torch.where(a[:, None, None], new_logits, logits), torch.where(a[None, :, None], new_h, h)


@torch.no_grad()
def rollout(sampler: Policy, hidden: np.ndarray, cfg: Config, gen: torch.Generator) -> Batch:
    """Play one episode per entry of ``hidden`` [B], all in lockstep, token by token."""
    v = vocab(cfg)
    B = len(hidden)
    rows = [[BOS] for _ in range(B)]
    owner = [[] for _ in range(B)]   # per predicted token: (is the policy's, turn) ...
    lps = [[] for _ in range(B)]
    done = np.zeros(B, bool)
    success, valid, trunc = np.zeros(B, bool), np.ones(B, bool), np.zeros(B, bool)
    n_turns, n_invalid, lenient_hit = np.zeros(B, int), np.zeros(B, int), np.zeros(B, bool)
    logits, h = sampler(torch.full((B, 1), BOS, dtype=torch.long))
    for turn in range(cfg.max_turns):
        reply = [[] for _ in range(B)]
        open_ = ~done
        for _ in range(cfg.max_turn_tokens):
            logq = F.log_softmax(logits[:, -1].float() / cfg.temperature, dim=-1)   # [B, V]
            tok = torch.multinomial(logq.exp(), 1, generator=gen)                  # [B, 1]
            lp = logq.gather(-1, tok).squeeze(-1)
            active = open_.copy()
            for i in np.flatnonzero(active):
                t = int(tok[i])
                reply[i].append(t)
                rows[i].append(t)
                owner[i].append((True, turn))
                lps[i].append(float(lp[i]))
                if t == CLOSE:
                    open_[i] = False
            logits, h = advance(sampler, tok, logits, h, active)
            if not open_.any():
                break
        feedback = torch.full((B, 1), PAD, dtype=torch.long)
        active = ~done
        for i in np.flatnonzero(active):
            guess = parse_turn(reply[i], cfg)
            trunc[i] |= reply[i][-1] != CLOSE
            valid[i] &= guess is not None
            n_invalid[i] += guess is None
            n_turns[i] += 1
            lenient_hit[i] |= hidden[i] in lenient_numbers(reply[i], cfg)
            a = answer(guess, int(hidden[i]), v)
            feedback[i, 0] = a
            rows[i].append(a)
            owner[i].append((False, turn))
            lps[i].append(0.0)
            if a == v["CORRECT"]:
                success[i] = done[i] = True
        logits, h = advance(sampler, feedback, logits, h, active)
        if done.all():
            break
    return _pack(rows, owner, lps, success, valid, trunc, n_turns, n_invalid, lenient_hit, cfg)


def _pack(rows, owner, lps, success, valid, trunc, n_turns, n_invalid, lenient_hit, cfg: Config) -> Batch:
    """Pad the episodes into [B, L] tensors and score them."""
    B, L = len(rows), max(len(r) for r in rows)
    seq = torch.full((B, L), PAD, dtype=torch.long)
    mask = torch.zeros(B, L - 1, dtype=torch.bool)
    turn = torch.zeros(B, L - 1, dtype=torch.long)
    logp = torch.zeros(B, L - 1)
    for i in range(B):
        n = len(owner[i])
        seq[i, :n + 1] = torch.tensor(rows[i])
        mask[i, :n] = torch.tensor([o[0] for o in owner[i]])
        turn[i, :n] = torch.tensor([o[1] for o in owner[i]])
        logp[i, :n] = torch.tensor(lps[i])
    solved = lenient_hit if cfg.lenient_reward else success
    reward = solved.astype(np.float64) - cfg.format_penalty * n_invalid
    return Batch(seq, mask, turn, logp, reward, success, valid, trunc, n_turns,
                 mask.sum(1).numpy(), float(1.0 - n_invalid.sum() / max(n_turns.sum(), 1)))


# ---------------------------------------------------------------------------------------------------- warm start
def expert_episodes(hidden: np.ndarray, cfg: Config, rng: np.random.Generator) -> torch.Tensor:
    """Token rows [B, L] of a scripted searcher: guess the middle of the interval still possible (or, with
    probability bc_noise, a random number in it), until CORRECT."""
    v = vocab(cfg)
    rows = []
    for h in hidden:
        lo, hi, row = 1, cfg.n_numbers, [BOS]
        for _ in range(cfg.max_turns):
            g = int(rng.integers(lo, hi + 1)) if rng.random() < cfg.bc_noise else (lo + hi) // 2
            a = answer(g, int(h), v)
            row += [OPEN, NUM0 + g - 1, CLOSE, a]
            if a == v["CORRECT"]:
                break
            lo, hi = (g + 1, hi) if a == v["HIGHER"] else (lo, g - 1)
        rows.append(row)
    seq = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        seq[i, :len(r)] = torch.tensor(r)
    return seq


def behaviour_clone(policy: Policy, cfg: Config, rng: np.random.Generator) -> None:
    """A few steps of cross-entropy on the expert's replies (the game's answers are not the policy's to learn)."""
    v = vocab(cfg)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.bc_lr)
    for _ in range(cfg.bc_steps):
        seq = expert_episodes(rng.integers(1, cfg.n_numbers + 1, cfg.bc_batch), cfg, rng)
        target = seq[:, 1:]
        mine = (target != PAD) & (target < v["HIGHER"])                  # [B, L-1] the expert's reply tokens
        logp, _ = token_logp(policy, seq)
        loss = -(logp * mine).sum() / mine.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


# ---------------------------------------------------------------------------------------------------- GRPO
def group_advantages(reward: np.ndarray, group_size: int) -> np.ndarray:
    """(R - mean) / (std + 1e-6) within each group of ``group_size`` consecutive episodes (GRPO)."""
    r = reward.reshape(-1, group_size)
    return ((r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)).reshape(-1)


def grpo_loss(logp, logp_old, logp_ref, entropy, adv, mask, cfg: Config):
    """Token-mean PPO clipped surrogate + kl_coef * k3(ref) - ent_coef * entropy over the mask. All [b, T]; adv [b]."""
    m = mask.float()
    n = m.sum().clamp(min=1.0)
    ratio = torch.exp(logp - logp_old)
    a = adv[:, None]
    surr = ratio * a
    if cfg.clip_eps > 0:
        surr = torch.min(surr, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * a)
    x = logp_ref - logp
    k3 = torch.exp(x) - x - 1.0                                # k3 estimator of KL(pi || ref), >= 0
    pg = -(surr * m).sum() / n
    kl = (k3 * m).sum() / n
    ent = (entropy * m).sum() / n
    return pg + cfg.kl_coef * kl - cfg.ent_coef * ent, {"pg_loss": pg.item(), "kl": kl.item(), "ent": ent.item()}


def update(policy, ref, opt, batch: Batch, adv: torch.Tensor, step: int, col, cfg: Config, gen) -> dict:
    """ppo_epochs x n_minibatches clipped updates on one rollout batch; each one recorded with record_update."""
    B = batch.seq.shape[0]
    with torch.no_grad():
        logp_ref, _ = token_logp(ref, batch.seq)
    logp_old = batch.logp  # the behaviour policy's log-probs: the sampler's own (it may lag the learner)
    norms, stats, k = [], [], 0
    for _epoch in range(cfg.ppo_epochs):
        for idx in torch.randperm(B, generator=gen).chunk(cfg.n_minibatches):
            seq, mask = batch.seq[idx], batch.mask[idx]
            logp, entropy = token_logp(policy, seq)
            loss, info = grpo_loss(logp, logp_old[idx], logp_ref[idx], entropy, adv[idx], mask, cfg)
            opt.zero_grad()
            loss.backward()
            norm = float(nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
            norms.append(norm)
            stats.append(info)
            col.record_update(step, update=k, logp=logp.detach(), logp_old=logp_old[idx], advantages=adv[idx],
                              response_mask=mask, logp_ref=logp_ref[idx], entropy=entropy.detach(),
                              sample_ids=step * B + idx, turn_ids=batch.turn[idx], token_ids=seq[:, 1:])
            if math.isfinite(norm):  # a non-finite gradient would poison the weights: skip that step
                opt.step()
            k += 1
    return {"grad_norm": float(np.mean(norms)), "grad_norm_max": float(np.max(norms)),
            **{key: float(np.mean([s[key] for s in stats])) for key in stats[0]}}


def entropy_weight(cfg: Config, step: int) -> float:
    """The entropy bonus weight of ``step``: linear from ent_coef to ent_coef_end over the run."""
    if cfg.ent_coef_end < 0 or cfg.steps <= 1:
        return cfg.ent_coef
    return cfg.ent_coef + (cfg.ent_coef_end - cfg.ent_coef) * step / (cfg.steps - 1)


def step_metrics(batch: Batch, upd: dict, lr: float) -> dict[str, float]:
    """What this loop logs per step, under the names such loops commonly use."""
    return {"success_rate": float(batch.success.mean()), "format_valid_rate": batch.valid_turn_frac,
            "episode_format_ok": float(batch.valid.mean()), "reward_avg": float(batch.reward.mean()),
            "entropy_avg": upd["ent"], "kl_ref": upd["kl"], "pg_loss": upd["pg_loss"],
            "grad_norm": upd["grad_norm"], "grad_norm_max": upd["grad_norm_max"], "lr": lr,
            "avg_response_len": float(batch.n_reply_tokens.mean()), "num_turns": float(batch.n_turns.mean())}


def flag_bool(text: str) -> bool:
    """A boolean flag's value: true/false, yes/no, 1/0."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def make_config(argv: list[str] | None = None) -> Config:
    """Config from the command line: one flag per field, with the field's help; --failure applies its preset
    first, and flags given explicitly win over it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    for f in dataclasses.fields(Config):
        kind = {"bool": flag_bool, "int": int, "float": float}.get(f.type, str)
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None,
                       help=f"{f.metadata['help']} (default {f.default})")
    args = p.parse_args(argv)
    if args.failure is not None and args.failure not in FAILURES:
        p.error(f"--failure must be one of {', '.join(FAILURES)}, got {args.failure!r}")
    base = dataclasses.replace(Config(), **FAILURES[args.failure or "none"])
    return dataclasses.replace(base, **{k: v for k, v in vars(args).items() if v is not None})


def train(cfg: Config) -> dict:
    """Warm start, then ``cfg.steps`` GRPO steps, recorded in ``cfg.out``. Returns a summary with what was
    generated (per step: masked policy tokens, turns per episode, success, format), for checks."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    policy = Policy(vocab(cfg)["size"], cfg.d_embed, cfg.d_hidden)
    behaviour_clone(policy, cfg, rng)
    ref = Policy(vocab(cfg)["size"], cfg.d_embed, cfg.d_hidden)
    ref.load_state_dict(policy.state_dict())
    lagged = [{k: t.clone() for k, t in policy.state_dict().items()}]        # the sampler's weights, oldest first
    sampler = Policy(vocab(cfg)["size"], cfg.d_embed, cfg.d_hidden)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    clip = (cfg.clip_eps, cfg.clip_eps) if cfg.clip_eps > 0 else (0.2, 0.2)  # no clipping: report against the usual band
    history, t0 = [], time.time()
    with arldiag.Collector(cfg.out, config=dataclasses.asdict(cfg), clip=clip, algorithm="grpo",
                           token_sample_rate=cfg.token_sample_rate) as col:
        for step in range(cfg.steps):
            sampler.load_state_dict(lagged[0])
            hidden = np.repeat(rng.integers(1, cfg.n_numbers + 1, cfg.n_tasks), cfg.group_size)      # [B]
            batch = rollout(sampler, hidden, cfg, gen)
            B = len(hidden)
            adv = torch.from_numpy(group_advantages(batch.reward, cfg.group_size)).float()           # [B]
            col.record_rollout(step, sample_ids=step * B + np.arange(B),
                               group_ids=step * cfg.n_tasks + np.arange(B) // cfg.group_size,
                               turn_ids=batch.turn, token_ids=batch.seq[:, 1:], response_mask=batch.mask,
                               logp_rollout=batch.logp, rewards=batch.reward, format_valid=batch.valid,
                               truncated=batch.truncated, success=batch.success)
            lr = cfg.lr * (cfg.lr_jump_factor if 0 <= cfg.lr_jump_step <= step else 1.0)
            for g in opt.param_groups:
                g["lr"] = lr
            ent_coef = entropy_weight(cfg, step)
            upd = update(policy, ref, opt, batch, adv, step, col, dataclasses.replace(cfg, ent_coef=ent_coef), gen)
            metrics = step_metrics(batch, upd, lr)
            metrics["ent_coef"] = ent_coef
            col.record_step(step, metrics=metrics)
            lagged.append({k: t.clone() for k, t in policy.state_dict().items()})
            lagged = lagged[-(cfg.rollout_lag + 1):]
            history.append({"step": step, "masked_tokens": int(batch.mask.sum()), "n_updates":
                            cfg.ppo_epochs * cfg.n_minibatches, "batch": B, "turns": batch.n_turns.tolist(),
                            **metrics})
            if cfg.log_every and (step % cfg.log_every == 0 or step == cfg.steps - 1):
                print(f"step {step:4d} success {metrics['success_rate']:.2f} format {metrics['format_valid_rate']:.2f}"
                      f" reward {metrics['reward_avg']:+.2f} len {metrics['avg_response_len']:.1f} ent "
                      f"{metrics['entropy_avg']:.3f} kl {metrics['kl_ref']:.3f} grad {metrics['grad_norm']:.2f} "
                      f"{time.time() - t0:.0f}s", flush=True)
    return {"config": dataclasses.asdict(cfg), "wall_s": time.time() - t0, "history": history}


def main(argv: list[str] | None = None) -> None:
    cfg = make_config(argv)
    out = train(cfg)
    print(json.dumps({"out": cfg.out, "failure": cfg.failure, "seed": cfg.seed, "wall_s": round(out["wall_s"], 1),
                      "final_success": round(out["history"][-1]["success_rate"], 3)}))


if __name__ == "__main__":
    main()
