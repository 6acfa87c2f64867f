"""Generating sequences with a decoder-only Transformer: KV cache, sampling, beam search, batches.

A decoder-only language model (the GPT family) maps tokens ``(B, T)`` to next-token logits
``(B, T, V)``: position ``t`` predicts token ``t + 1`` from tokens ``0..t`` (causal mask).
Generation appends one token at a time. Recomputing the whole prefix at every step repeats
work: the keys and values of earlier positions never change (the causal mask keeps later
tokens out of them), so a **KV cache** keeps them and each step runs only the new token. The
attention layer is :class:`vitref.kvcache.CachedSelfAttention` (chapter 8's exercise, with a key
mask for padding); :class:`KVCache` holds the ``(keys, values)`` pair each layer returns.

The model protocol used by :func:`generate` and :func:`beam_search`::

    logits = model(tokens (B, T), attention_mask=None | (B, L), position_ids=None | (B, T),
                   cache=None | KVCache)                       # (B, T, V)
    cache = model.new_cache()                                  # an empty KVCache
    model.max_len                                              # longest sequence, or None

``attention_mask`` covers every position seen so far, cached ones included (``L = cached +
T``): 1/True for a real token, 0/False for padding. :class:`DecoderOnlyLM` is such a model,
built from the course's pieces; :class:`BigramLM` is a hand-built one whose next-token
probabilities are a table, for checking decoding algorithms against answers known exactly.

Batches of prompts of different lengths are padded on the **left** (:func:`pad_batch`), so
that the last column holds every prompt's last token and new tokens are appended in one
column for the whole batch; the attention mask hides the padding and :func:`positions_from_mask`
numbers each row's real tokens from 0.
"""
from __future__ import annotations

import itertools
import math
from typing import cast
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import expect_dims, shape_str
from .blocks import FeedForwardBlock
from .kvcache import CachedSelfAttention


# ------------------------------------------------------------------------------------ KV cache

class KVCache:
    """The keys and values of the positions processed so far: one ``(keys, values)`` pair per layer.

    Each pair is what that layer's :class:`~vitref.kvcache.CachedSelfAttention` returned,
    ``(B, h, L, d)`` each (batch, heads, cached positions, head dimension): the model reads it
    with :meth:`layer` (``None`` while the layer has seen nothing), passes it to the layer, and
    keeps what the layer returns (the old positions followed by the new ones) with :meth:`store`.
    :meth:`reorder` picks batch rows (beam search keeps the cache of the beams it continues).
    """

    def __init__(self, num_layers: int):
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        self._layers: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * num_layers

    def __len__(self) -> int:
        """Number of cached positions ``L`` (0 when empty)."""
        return self.layer_length(0) if self._layers else 0

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer < len(self._layers):
            raise ValueError(f"layer {layer} out of range: the cache has {len(self._layers)} layers")

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The ``(keys, values)`` cached for layer ``layer``, ``(B, h, L, d)`` each, or ``None`` if empty."""
        self._check_layer(layer)
        return self._layers[layer]

    def layer_length(self, layer: int) -> int:
        """Number of positions cached for layer ``layer``."""
        kv = self.layer(layer)
        return 0 if kv is None else kv[0].shape[-2]

    def store(self, layer: int, kv) -> None:
        """Keep ``kv = (keys, values)``, ``(B, h, L, d)`` each, as layer ``layer``'s cache (replacing the old one:
        a layer returns the cached positions followed by the new ones)."""
        self._check_layer(layer)
        if not isinstance(kv, (tuple, list)) or len(kv) != 2:
            raise TypeError(f"store expects a pair (keys, values), got {type(kv).__name__}")
        k, v = kv
        if not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
            raise TypeError(f"store expects tensors (keys, values), got ({type(k).__name__}, {type(v).__name__})")
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"keys {shape_str(k.shape)} and values {shape_str(v.shape)} must be (B, h, L, d) "
                             "with the same batch, heads and length")
        self._layers[layer] = (k, v)

    @property
    def keys(self) -> tuple:
        """Each layer's cached keys ``(B, h, L, d)`` (``None`` for an empty layer); read-only."""
        return tuple(None if kv is None else kv[0] for kv in self._layers)

    @property
    def values(self) -> tuple:
        """Each layer's cached values ``(B, h, L, d)`` (``None`` for an empty layer); read-only."""
        return tuple(None if kv is None else kv[1] for kv in self._layers)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (a 1-D long tensor; rows may repeat), in every layer."""
        for layer, kv in enumerate(self._layers):
            if kv is not None:
                k, v = kv
                self._layers[layer] = (k.index_select(0, index.to(k.device)), v.index_select(0, index.to(v.device)))

    def num_bytes(self) -> int:
        """Memory held by the cached tensors."""
        return sum(t.numel() * t.element_size() for kv in self._layers if kv is not None for t in kv)


# ------------------------------------------------------------------------------ the model

def _check_mask(attention_mask: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    if attention_mask.dim() != 2 or attention_mask.shape != (batch, length):
        raise ValueError(
            f"attention_mask must have shape (B, L) = ({batch}, {length}): one entry per token seen so far "
            f"(cached + new), got {shape_str(attention_mask.shape)}")
    return attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0


class DecoderOnlyBlock(nn.Module):
    """Pre-LN GPT block: ``x += Attn(LN(x))`` (causal, cached), then ``x += MLP(LN(x))``.

    ``forward(x (B, T, D), cache=None, key_mask=None) -> (x (B, T, D), (keys, values))``: the
    protocol of its :class:`~vitref.kvcache.CachedSelfAttention` (``cache``: this layer's
    ``(keys, values)``, each ``(B, h, S, d)``, or ``None``; ``key_mask (B, S+T)``, True = real
    token), whose returned pair is the next call's cache. Unlike
    :class:`~vitref.decoder.DecoderBlock` there is no cross-attention: nothing to read but the
    sequence itself.
    """

    def __init__(self, dim: int, num_heads: int, mlp_dim: int | None = None, dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CachedSelfAttention(dim, num_heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim or 4 * dim, drop_p=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None, key_mask=None):
        attended, kv = self.attn(self.norm1(x), cache, key_mask=key_mask)   # (B, T, D), (B, h, S+T, d) each
        x = x + attended
        return x + self.dropout(self.mlp(self.norm2(x))), kv                # (B, T, D)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions ``(B, L)`` that number each row's real tokens 0, 1, 2, ... (padding gets 0).

    For a left-padded row ``[pad, pad, a, b]`` (mask ``0 0 1 1``) that is ``[0, 0, 0, 1]``: the
    prompt's tokens get the same positions as without padding.
    """
    mask = attention_mask.long()                                              # (B, L)
    return (mask.cumsum(dim=-1) - 1).clamp(min=0)


class DecoderOnlyLM(nn.Module):
    """A small GPT: token + learned position embeddings, pre-LN causal blocks, LayerNorm, linear head.

    ``forward(tokens (B, T), attention_mask=None, position_ids=None, cache=None) -> logits (B, T, V)``.

    * ``cache``: a :class:`KVCache` from :meth:`new_cache`; the call appends the ``T`` new
      positions to it, so the next call passes only the tokens after them.
    * ``attention_mask (B, L)``: 1 = real token, 0 = padding, for the cached and the new
      positions together (``L = len(cache) + T``).
    * ``position_ids (B, T)``: the positions of the new tokens; by default they continue
      from the cache, counting only real tokens when a mask is given (:func:`positions_from_mask`).
    """

    def __init__(self, vocab_size: int, max_len: int, dim: int = 64, depth: int = 2, num_heads: int = 4,
                 mlp_dim: int | None = None, dropout: float = 0.0):
        super().__init__()
        if vocab_size < 1 or max_len < 1:
            raise ValueError(f"vocab_size and max_len must be positive, got {vocab_size} and {max_len}")
        self.vocab_size, self.max_len, self.dim = vocab_size, max_len, dim
        self.token_embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(DecoderOnlyBlock(dim, num_heads, mlp_dim, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_cache(self) -> KVCache:
        return KVCache(len(self.blocks))

    def forward(self, tokens, attention_mask=None, position_ids=None, cache: KVCache | None = None):
        expect_dims(tokens, "B, T", "DecoderOnlyLM tokens")
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be integer token ids, got dtype {tokens.dtype}")
        B, T = tokens.shape
        if T == 0:
            raise ValueError("DecoderOnlyLM got an empty sequence (T = 0)")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size - 1}], got values "
                             f"from {tokens.min().item()} to {tokens.max().item()}")
        past = 0 if cache is None else len(cache)
        if past + T > self.max_len:
            where = f"{past} cached + {T} new = {past + T}" if past else f"{T}"
            raise ValueError(f"sequence length {where} exceeds the model's maximum sequence length {self.max_len}")
        key_mask = None
        if attention_mask is not None:
            key_mask = _check_mask(attention_mask.to(tokens.device), B, past + T)        # (B, L)
        if position_ids is None:
            if key_mask is not None:
                position_ids = positions_from_mask(key_mask)[:, past:]              # (B, T)
            else:
                position_ids = torch.arange(past, past + T, device=tokens.device).expand(B, T)
        elif position_ids.shape != (B, T):
            raise ValueError(f"position_ids must have the shape of tokens {shape_str(tokens.shape)}, "
                             f"got {shape_str(position_ids.shape)}")
        x = self.token_embed(tokens) + self.pos_embed(position_ids)                      # (B, T, D)
        if cache is not None and key_mask is None:
            # cached decoding masks keys explicitly (all real here), so that every pass, the first one
            # too (its layers see no cache yet), takes the attention's general path, not the training one
            key_mask = torch.ones(B, past + T, dtype=torch.bool, device=tokens.device)     # (B, L)
        for layer, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache.layer(layer), key_mask)       # (B, T, D)
            if cache is not None:
                cache.store(layer, kv)                                                    # (B, h, L, d) each
        return self.head(self.norm(x))                                                    # (B, T, V)


class BigramLM(nn.Module):
    """A hand-built language model: the next token depends only on the current one.

    ``log_probs (V, V)``: row ``a`` holds ``log P(next | current = a)``. ``forward`` returns
    ``log_probs[tokens]`` ``(B, T, V)`` and ignores the mask, positions and cache (a bigram
    model needs no memory), so decoding algorithms can be checked against probabilities
    known exactly. Rows are normalised with ``log_softmax``, so any real table is accepted.
    """

    max_len = None

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        expect_dims(log_probs, "V, V", "BigramLM table")
        if log_probs.shape[0] != log_probs.shape[1]:
            raise ValueError(f"BigramLM table must be square (V, V), got {shape_str(log_probs.shape)}")
        self.register_buffer("log_probs", torch.log_softmax(log_probs.double(), dim=-1))
        self.vocab_size = log_probs.shape[0]

    @classmethod
    def from_probs(cls, probs) -> "BigramLM":
        """From a table of probabilities ``(V, V)`` (zeros allowed)."""
        return cls(torch.as_tensor(probs, dtype=torch.float64).log())

    def new_cache(self) -> KVCache:
        return KVCache(0)

    def forward(self, tokens, attention_mask=None, position_ids=None, cache=None):
        expect_dims(tokens, "B, T", "BigramLM tokens")
        return self.log_probs[tokens]                                                   # (B, T, V)

    def sequence_log_prob(self, tokens) -> float:
        """``log P(tokens[1:] | tokens[0])``: the sum of the table's entries along the sequence."""
        tokens = list(tokens)
        table = cast(torch.Tensor, self.log_probs)                                      # (V, V) buffer
        return float(sum(table[a, b].item() for a, b in zip(tokens, tokens[1:])))


# ------------------------------------------------------------------------------ decoding

def pad_batch(sequences, pad_id: int, side: str = "left"):
    """Pad token lists of different lengths into ``tokens (B, L)`` and ``attention_mask (B, L)`` (bool).

    ``side="left"`` puts the padding before each sequence (what generation with a
    decoder-only model needs), ``"right"`` after it (what training usually does).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    sequences = [list(map(int, s)) for s in sequences]
    if not sequences:
        raise ValueError("pad_batch needs at least one sequence")
    if any(len(s) == 0 for s in sequences):
        raise ValueError("every sequence needs at least one token (an empty prompt has nothing to condition on)")
    length = max(map(len, sequences))
    tokens = torch.full((len(sequences), length), pad_id, dtype=torch.long)              # (B, L)
    mask = torch.zeros(len(sequences), length, dtype=torch.bool)
    for row, seq in enumerate(sequences):
        cols = slice(length - len(seq), length) if side == "left" else slice(0, len(seq))
        tokens[row, cols] = torch.tensor(seq)
        mask[row, cols] = True
    return tokens, mask


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from ``logits (B, V)``: returns ``(B,)`` token ids.

    ``temperature`` divides the logits before the softmax: below 1 sharpens the
    distribution, above 1 flattens it, and 0 means greedy (``argmax``). ``top_k`` keeps only
    the ``k`` most likely tokens (the others get probability 0) before drawing.
    """
    expect_dims(logits, "B, V", "sample_next logits")
    if temperature < 0 or math.isnan(temperature):
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and not 1 <= top_k:
        raise ValueError(f"top_k must be a positive number of tokens or None, got {top_k}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.double() / temperature                                              # (B, V)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]                                 # (B, 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)                                               # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class Generation:
    """What :func:`generate` returns.

    ``tokens (B, P + n)``: the left-padded prompts followed by the ``n`` generated columns;
    ``attention_mask (B, P + n)``: True on real tokens (prompt and generated, EOS included);
    ``new_tokens``: per row, the generated tokens up to and including EOS; ``steps``: how
    many forward passes generation ran (fewer than ``max_new_tokens`` when every row
    stopped early).
    """
    tokens: torch.Tensor
    attention_mask: torch.Tensor
    new_tokens: list
    steps: int


def _device(model) -> torch.device:
    """Where the model's weights live (CPU for a model without any)."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _check_length_budget(model, prompt_length: int, max_new_tokens: int) -> None:
    max_len = getattr(model, "max_len", None)
    if max_len is None:
        return
    if prompt_length > max_len:
        raise ValueError(f"prompt length {prompt_length} exceeds the model's maximum sequence length {max_len}")
    if prompt_length + max_new_tokens > max_len:
        raise ValueError(
            f"prompt length {prompt_length} + max_new_tokens {max_new_tokens} = {prompt_length + max_new_tokens} "
            f"exceeds the model's maximum sequence length {max_len}")


@torch.no_grad()
def generate(model, prompts, max_new_tokens: int, *, eos_id: int | None = None, pad_id: int = 0,
             temperature: float = 0.0, top_k: int | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> Generation:
    """Continue a batch of prompts (lists of token ids, any lengths) by up to ``max_new_tokens``.

    Prompts are left-padded; the attention mask hides the padding and positions count real
    tokens only, so each row gets the same logits as if it were alone. Each step draws the
    next token with :func:`sample_next` (``temperature=0``: greedy). A row that has emitted
    ``eos_id`` is finished: it receives ``pad_id`` (masked) from then on, and generation stops
    as soon as every row is finished. ``use_cache=False`` recomputes the whole prefix at each
    step instead of feeding only the new token (same tokens, slower).
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    tokens, mask = pad_batch(prompts, pad_id, side="left")                              # (B, P)
    _check_length_budget(model, tokens.shape[1], max_new_tokens)
    device = _device(model)
    tokens, mask = tokens.to(device), mask.to(device)
    finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=device)           # (B,)
    cache = model.new_cache() if use_cache else None
    step_input = tokens                                                                 # (B, P) first, then (B, 1)
    steps = 0
    while steps < max_new_tokens and not finished.all():
        logits = model(step_input, attention_mask=mask, cache=cache)[:, -1]            # (B, V)
        steps += 1
        next_token = sample_next(logits, temperature, top_k, generator)                # (B,)
        next_token = torch.where(finished, torch.full_like(next_token, pad_id), next_token)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)                        # (B, L + 1)
        mask = torch.cat([mask, ~finished[:, None]], dim=1)
        if eos_id is not None:
            finished = finished | (next_token == eos_id)
        step_input = next_token[:, None] if use_cache else tokens
    prompt_length = tokens.shape[1] - steps
    new_tokens = [row[prompt_length:][row_mask[prompt_length:]].tolist() for row, row_mask in zip(tokens, mask)]
    return Generation(tokens, mask, new_tokens, steps)


@dataclass
class Hypothesis:
    """One beam: the generated tokens (after the prompt, EOS included) and their total log-probability."""
    tokens: list
    log_prob: float


@torch.no_grad()
def beam_search(model, prompt, num_beams: int, max_new_tokens: int, *, eos_id: int | None = None,
                pad_id: int = 0, use_cache: bool = True) -> list:
    """The ``num_beams`` most likely continuations of one prompt that beam search finds, best first.

    At each step every kept beam is extended by every token; of the ``beams x V``
    candidates the ``num_beams`` with the highest total log-probability
    ``sum_t log P(y_t | prompt, y_<t)`` are kept. A beam that has emitted ``eos_id`` is
    finished: its score is final and it competes unchanged with the live ones (its only
    extension is ``pad_id`` at log-probability 0). ``num_beams=1`` is greedy decoding; a
    width of ``V ** (max_new_tokens - 1)`` keeps every prefix and so finds the exact best
    sequence. Scores are raw sums, with no length normalisation, so shorter finished
    sequences are favoured. Returns a list of :class:`Hypothesis`.
    """
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    prompt = list(map(int, prompt))
    if not prompt:
        raise ValueError("beam_search needs a prompt of at least one token")
    _check_length_budget(model, len(prompt), max_new_tokens)
    device = _device(model)
    seqs = torch.tensor([prompt], device=device)                                        # (beams, P)
    scores = torch.zeros(1, dtype=torch.float64, device=device)                         # (beams,)
    finished = torch.zeros(1, dtype=torch.bool, device=device)
    cache = model.new_cache() if use_cache else None
    step_input = seqs
    for _ in range(max_new_tokens):
        logits = model(step_input, cache=cache)[:, -1]                                  # (beams, V)
        log_probs = torch.log_softmax(logits.double(), dim=-1)                          # (beams, V)
        vocab = log_probs.shape[-1]
        done_row = torch.full((vocab,), float("-inf"), dtype=torch.float64, device=device)
        done_row[pad_id] = 0.0                                        # a finished beam only pads, for free
        log_probs = torch.where(finished[:, None], done_row, log_probs)
        candidates = (scores[:, None] + log_probs).flatten()                           # (beams * V,)
        keep = min(num_beams, int(torch.isfinite(candidates).sum()))
        scores, index = candidates.topk(max(keep, 1))
        beam, token = index // vocab, index % vocab                                     # (beams,) each
        seqs = torch.cat([seqs[beam], token[:, None]], dim=1)
        finished = finished[beam] | ((token == eos_id) if eos_id is not None else torch.zeros_like(finished[beam]))
        if cache is not None:
            cache.reorder(beam)
        if finished.all():
            break
        step_input = token[:, None] if use_cache else seqs
    results = []
    for row, score in zip(seqs[:, len(prompt):].tolist(), scores.tolist()):
        if eos_id is not None and eos_id in row:
            row = row[: row.index(eos_id) + 1]
        results.append(Hypothesis(row, score))
    return results


__all__ = [
    "KVCache", "DecoderOnlyBlock", "DecoderOnlyLM", "BigramLM", "positions_from_mask",
    "pad_batch", "sample_next", "generate", "Generation", "beam_search", "Hypothesis",
]
