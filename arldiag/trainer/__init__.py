"""The bundled reference trainer: SAMPO and its baselines (GRPO, DAPO, GSPO, CISPO, SAPO, ATPO) on multi-turn
environments, logging only through the public ``arldiag.Collector`` API.

Modules, in the order a step uses them (read top to bottom, CleanRL-style):
  config.py      TrainConfig (every knob, documented once) and PRESETS per algorithm
  envs/          Sokoban and the calculator tool-use task behind a small interface
  policy.py      any HF causal LM; default a tiny Qwen3/Llama with a local word-level tokenizer
  rollout.py     batched multi-turn episodes, token-in-token-out, optional retokenization / reduced precision
  batch.py       episodes -> padded [B, P+W] batch with a [B, W] response window
  advantages.py  GRPO group z-score, GiGPO anchor-state step advantages, dynamic filtering
  losses.py      registered pure loss functions + the negative-advantage low-IS mask and k3 KL
  bc.py          behaviour-cloning warm start from solver trajectories (cached)
  loop.py        the training loop; cli.py: `arldiag train`

Nothing heavy is imported here (no side effects at import): ``from arldiag.trainer.loop import train``.
"""
