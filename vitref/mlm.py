"""Masked language modelling, the pre-training of encoder-only Transformers (BERT; Devlin et al., 2019).

The encoder sees every token of its input (no causal mask) and learns to predict tokens that were
hidden: :func:`mask_tokens` chooses ``rate`` (15%) of the positions at random; of the chosen ones,
80% become the ``[MASK]`` token, 10% a random token and 10% stay as they were (so that the model
cannot learn that only ``[MASK]`` positions matter). The loss is taken at the chosen positions only.
"""
from __future__ import annotations

import torch

IGNORE = -100          # a target that cross_entropy(..., ignore_index=IGNORE) leaves out of the loss


def mask_tokens(tokens: torch.Tensor, vocab_size: int, mask_id: int, rate: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens (B, T)`` -> ``(inputs (B, T), targets (B, T))`` for masked language modelling.

    ``targets`` holds the original token at each chosen position and :data:`IGNORE` elsewhere;
    ``inputs`` is ``tokens`` with the chosen positions replaced as the module docstring says. Random
    replacements are drawn from ``0 .. vocab_size - 1``."""
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"expected integer token ids (B, T), got {tokens.dtype}")
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate is the share of positions chosen, in (0, 1), got {rate}")
    chosen = torch.rand(tokens.shape, generator=generator) < rate               # (B, T) bool
    draw = torch.rand(tokens.shape, generator=generator)                        # (B, T): 80 / 10 / 10
    random_ids = torch.randint(0, vocab_size, tokens.shape, generator=generator, dtype=tokens.dtype)
    inputs = torch.where(chosen & (draw < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)
    targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    return inputs, targets


__all__ = ["mask_tokens", "IGNORE"]
