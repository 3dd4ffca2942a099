"""A tiny real TRL GRPO setup on CPU: a Qwen3-architecture model built from a config, a word-level tokenizer built
locally, an in-memory dataset and a reward function. Nothing is downloaded (HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

WORDS = ["say", "yes", "no", "maybe", "ok", "please", "now"]


def tiny_model_and_tokenizer(seed: int = 0):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from arldiag.trainer.policy import build_word_tokenizer

    tok = build_word_tokenizer(WORDS)
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg), tok


def reward_yes(completions, **kwargs):
    """Share of "yes" words in the completion (varies within a group, so advantages are non-zero)."""
    out = []
    for c in completions:
        words = c.split()
        out.append(sum(w == "yes" for w in words) / max(len(words), 1))
    return out


def grpo_trainer(out_dir: str, cls=None, max_steps: int = 3, beta: float = 0.04, loss_type: str = "dapo",
                 trainer_kwargs: dict | None = None, **extra):
    """A GRPOTrainer (or ``cls``) over 4 prompts x 4 generations, 2 updates per generation batch (num_iterations=2,
    so the second one is off-policy and the ratio moves), lr large enough for the clip ratios to be non-zero.
    ``use_bias_correction_kl=False``: TRL's logged ``kl`` is then the plain k3 to the reference (with the correction,
    the default, it is k3 times the IS ratio)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tiny_model_and_tokenizer()
    # TRL builds the reference model (beta > 0) from the model's path: save the tiny model to a local folder
    model_dir = os.path.join(out_dir, "tiny-qwen3")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    ds = Dataset.from_dict({"prompt": ["say yes", "say no", "say yes please", "say no now"] * 4})
    args = GRPOConfig(output_dir=out_dir, per_device_train_batch_size=8, num_generations=4,
                      gradient_accumulation_steps=1, num_iterations=2, max_completion_length=6, max_steps=max_steps,
                      learning_rate=5e-2, beta=beta, epsilon=0.1, loss_type=loss_type, logging_steps=1,
                      report_to=[], save_strategy="no", use_cpu=True, seed=0, temperature=1.0,
                      dataloader_num_workers=0, bf16=False,
                      use_bias_correction_kl=False, **extra)
    cls = cls or GRPOTrainer
    return cls(model=model_dir, reward_funcs=reward_yes, args=args, train_dataset=ds, processing_class=tok,
               **(trainer_kwargs or {}))
