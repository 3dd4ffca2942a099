"""The policy: any Hugging Face causal LM, plus the log-prob computations the trainer needs.

The default is a tiny model of a real architecture (Qwen3 or Llama) built from a config, with a word-level
tokenizer built locally from the environment's vocabulary (``tokenizers`` WordLevel wrapped in
PreTrainedTokenizerFast). ``--model PATH`` loads a pretrained model and its tokenizer from a local folder with
``local_files_only=True``: nothing is ever downloaded.

The tiny tokenizer also gets a few *merged* tokens ("<action> up" as one token), built from adjacent word pairs of
solver responses, like the merges of a BPE vocabulary: encoding text always produces the merged token, but the policy
may sample the two parts separately. That is what makes ``--retokenize`` drift real (decode, encode again, and the
ids differ from the sampled ones), as with BPE tokenizers of real LLMs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")
TINY_ARCHS = ("tiny-qwen3", "tiny-llama")


@dataclass
class TokenCodec:
    """Text <-> ids for the trainer: the HF tokenizer plus the ids it needs (bos may be None)."""
    tokenizer: Any
    bos_id: int | None
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> "TokenCodec":
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("model: the tokenizer has no eos token; the trainer needs one to end responses")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        return cls(tokenizer, tokenizer.bos_token_id, int(eos), int(pad))


def merge_pairs(corpus: Iterable[str], max_merges: int = 16, min_count: int = 2) -> list[str]:
    """The most frequent adjacent word pairs of ``corpus`` ("w1 w2"), at most ``max_merges``."""
    counts: Counter[str] = Counter()
    for text in corpus:
        words = [w for w in text.split(" ") if w]  # env texts: words separated by spaces, newline is a word
        counts.update(f"{a} {b}" for a, b in zip(words, words[1:]))
    return [pair for pair, c in counts.most_common(max_merges) if c >= min_count]


def build_word_tokenizer(vocabulary: Sequence[str], merges: Sequence[str] = ()) -> Any:
    """A word-level PreTrainedTokenizerFast over ``vocabulary`` (space-separated words; "\n" is a word) with
    ``merges`` as extra multi-word tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(w for w in vocabulary if w and w not in SPECIAL_TOKENS))
    bad = [w for w in words if " " in w]
    if bad:
        raise ValueError(f"vocabulary: words must not contain spaces, got {bad[:3]!r}")
    vocab = {w: i for i, w in enumerate(list(SPECIAL_TOKENS) + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # split on spaces only: the newline character is a word of its own in env texts (envs/__init__.py)
    core.pre_tokenizer = pre_tokenizers.CharDelimiterSplit(" ")
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    if merges:
        core.add_tokens([AddedToken(m, normalized=False) for m in merges])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>",
                                   eos_token="<eos>")


def build_tiny_model(arch: str, vocab_size: int, hidden_size: int, n_layers: int, codec: TokenCodec, seed: int) -> Any:
    """A tiny causal LM of a real architecture from a config (random init, seeded)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    if arch not in TINY_ARCHS:
        raise ValueError(f"model={arch!r}: choose from {', '.join(TINY_ARCHS)} or give a local path")
    n_heads = max(1, hidden_size // 32)
    common = dict(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                  num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=max(1, n_heads // 2),
                  max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=codec.pad_id,
                  bos_token_id=codec.bos_id, eos_token_id=codec.eos_id)
    config = Qwen3Config(head_dim=hidden_size // n_heads, **common) if arch == "tiny-qwen3" else LlamaConfig(**common)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def load_pretrained(path: str) -> tuple[Any, TokenCodec]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    return model, TokenCodec.from_tokenizer(tokenizer)


def build_policy(cfg: Any, vocabulary: Sequence[str], merge_corpus: Iterable[str] = ()) -> tuple[Any, TokenCodec]:
    """The (model, codec) the config asks for; the model is on cfg.device in float32."""
    if cfg.model in TINY_ARCHS:
        tokenizer = build_word_tokenizer(vocabulary, merge_pairs(merge_corpus))
        codec = TokenCodec.from_tokenizer(tokenizer)
        model = build_tiny_model(cfg.model, len(tokenizer), cfg.hidden_size, cfg.n_layers, codec, cfg.seed)
    else:
        model, codec = load_pretrained(cfg.model)
    return model.to(device=cfg.device, dtype=torch.float32), codec


def perturb_weights(model: Any, rel: float, seed: int) -> None:
    """In place: every parameter p becomes p * (1 + rel * z), z ~ N(0, 1) per element, drawn from a generator of its
    own (seeded by ``seed``, so the global torch generator and the run's sampling are untouched). rel = 1e-7 is the
    size of the last-bit differences other CPUs' kernels leave (float32's unit roundoff is 2^-24 = 6e-8)."""
    if rel == 0.0:
        return
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(device=p.device, dtype=p.dtype)
            p.add_(p * (rel * z))  # p * (1 + rel z), rounded once to p's own precision


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: 0 at each row's first real token, [B, T]."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def window_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                    temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(input_ids[:, t] | input_ids[:, :t]) for the window t = start .. T-1, as [B, T-start], and optionally the
    entropy of the full next-token distribution at those positions (with gradient when ``entropy_grad``: an entropy
    bonus in the loss). Only the window's logits are materialised
    (``logits_to_keep``), which matters for real vocabularies."""
    if start < 1:
        raise ValueError(f"start must be >= 1 (a token needs a context), got {start}")
    width = input_ids.shape[1] - start
    out = model(input_ids=input_ids, attention_mask=attention_mask,
                position_ids=position_ids_from_mask(attention_mask), logits_to_keep=width + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temperature  # [B, W, V], predicts the window's tokens
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, W, V]
    targets = input_ids[:, start:]  # [B, W]
    logp = torch.gather(logp_all, -1, targets[..., None]).squeeze(-1)  # [B, W]
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # [B, W]
    return logp, entropy
