"""A tiny character-level language model: corpus, tokenizer, training loop.

The corpus is the prose of Python's own reference documentation, which every Python
ships in the standard library (``pydoc_data.topics``, the text that ``help("if")``
prints): no download. Each paragraph becomes one line, so the newline character is a
natural end-of-sequence token. The model is :class:`~vitref.generation.DecoderOnlyLM`,
trained to predict each next character (teacher forcing, cross-entropy in nats per
character)::

    text = python_docs_corpus()
    tokenizer = CharTokenizer(text)
    data = tokenizer.encode_tensor(text)                      # (N,) long
    train, valid = split(data, 0.9)
    model = DecoderOnlyLM(tokenizer.vocab_size, max_len=128, dim=64, depth=2, num_heads=4)
    result = train_char_lm(model, train, context=64, max_steps=600, seed=0)   # a budget in steps
    valid_loss = evaluate_loss(model, valid, context=64)
    print(perplexity(valid_loss))
    print(sample_at_temperatures(model, tokenizer, "The ", (0.5, 1.0, 1.5), 60))

With a budget in steps (``seconds=None``), a fixed seed and a fixed number of threads
(``torch.set_num_threads``), every run on the same machine and PyTorch gives the same losses.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .generation import generate

# typographic characters of the documentation, as plain ASCII
_ASCII = {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2014": "-", "\u2013": "-",
          "\u2026": "..."}


def python_docs_corpus() -> str:
    """The prose paragraphs of ``pydoc_data.topics`` as ASCII text, one paragraph per line.

    Indented lines (grammar rules, code examples) and heading underlines are dropped; the
    remaining lines of a paragraph are joined with spaces. About 250,000 characters with
    Python 3.11 (the exact text depends on the Python version).
    """
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        current: list[str] = []
        for line in topics[name].splitlines():
            stripped = line.strip()
            underline = len(stripped) > 2 and set(stripped) <= set('*=-~^"')
            if not line or line[0].isspace() or underline:
                if current:
                    paragraphs.append(" ".join(current))
                    current = []
                continue
            current.append(stripped)
        if current:
            paragraphs.append(" ".join(current))
    text = "\n".join(paragraphs) + "\n"
    for fancy, plain in _ASCII.items():
        text = text.replace(fancy, plain)
    return text.encode("ascii", "ignore").decode()


class CharTokenizer:
    """Characters <-> token ids. Id 0 is ``"<pad>"`` (never in the text); the others are the
    text's characters in sorted order."""

    PAD = "<pad>"

    def __init__(self, text: str):
        chars = sorted(set(text))
        if not chars:
            raise ValueError("CharTokenizer needs a non-empty text")
        self.itos = [self.PAD] + chars
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.pad_id = 0

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list:
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return [self.stoi[c] for c in text]

    def encode_tensor(self, text: str) -> torch.Tensor:
        return torch.tensor(self.encode(text), dtype=torch.long)                        # (N,)

    def decode(self, ids) -> str:
        return "".join(self.itos[int(i)] for i in ids if int(i) != self.pad_id)


def split(data: torch.Tensor, train_fraction: float = 0.9):
    """First ``train_fraction`` of the characters for training, the rest for validation."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be between 0 and 1, got {train_fraction}")
    cut = int(len(data) * train_fraction)
    return data[:cut], data[cut:]


def random_windows(data: torch.Tensor, batch_size: int, context: int, generator: torch.Generator):
    """``batch_size`` random windows: inputs ``(B, T)`` and targets ``(B, T)`` shifted by one."""
    if len(data) < context + 1:
        raise ValueError(f"the text ({len(data)} tokens) is shorter than one window of {context + 1}")
    starts = torch.randint(0, len(data) - context, (batch_size,), generator=generator)   # (B,)
    index = starts[:, None] + torch.arange(context + 1)                                 # (B, T + 1)
    windows = data[index]
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def evaluate_loss(model, data: torch.Tensor, context: int, batch_size: int = 64) -> float:
    """Mean cross-entropy (nats per character) over consecutive windows covering ``data``."""
    was_training = model.training
    model.eval()
    usable = (len(data) - 1) // context * context
    inputs = data[:usable].view(-1, context)                                            # (W, T)
    targets = data[1:usable + 1].view(-1, context)
    total = 0.0
    for i in range(0, len(inputs), batch_size):
        logits = model(inputs[i:i + batch_size])                                        # (b, T, V)
        total += F.cross_entropy(logits.flatten(0, 1), targets[i:i + batch_size].flatten(),
                                 reduction="sum").item()
    model.train(was_training)
    return total / targets.numel()


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a loss in nats per token: the number of equally likely choices that
    would be as uncertain (a uniform guess over ``V`` tokens has perplexity ``V``)."""
    if math.isnan(loss) or loss < 0:
        raise ValueError(f"a cross-entropy loss is a number >= 0, got {loss}")
    return math.exp(loss)


@dataclass
class TrainResult:
    losses: list = field(default_factory=list)       # training loss per step (nats per character)
    steps: int = 0
    seconds: float = 0.0


def train_char_lm(model, train_data: torch.Tensor, *, context: int = 64, batch_size: int = 32,
                  lr: float = 3e-3, max_steps: int = 1000, seconds: float | None = None, warmup: int = 50,
                  seed: int = 0) -> TrainResult:
    """Teacher-forced next-character training with AdamW.

    The learning rate warms up linearly over ``warmup`` steps, then follows a cosine down to
    10% over ``max_steps``. Training stops after ``max_steps`` or, if given, ``seconds`` of
    wall-clock time, whichever comes first (so a slow machine stops early, with the same
    seeds and batches up to that point).
    """
    if context > model.max_len:
        raise ValueError(f"context {context} exceeds the model's maximum sequence length {model.max_len}")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    model.train()
    result, start = TrainResult(), time.perf_counter()
    for step in range(max_steps):
        if seconds is not None and time.perf_counter() - start > seconds:
            break
        progress = max(0.0, (step - warmup) / max(1, max_steps - warmup))
        scale = min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        inputs, targets = random_windows(train_data, batch_size, context, generator)    # (B, T) each
        logits = model(inputs)                                                          # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        result.losses.append(loss.item())
        result.steps = step + 1
    result.seconds = time.perf_counter() - start
    model.eval()
    return result


class _NeverPad(torch.nn.Module):
    """The model with the padding token's logit at -inf, so that sampling never draws it."""

    def __init__(self, model, pad_id: int):
        super().__init__()
        self.model, self.pad_id, self.max_len = model, pad_id, getattr(model, "max_len", None)

    def new_cache(self):
        return self.model.new_cache()

    def forward(self, tokens, attention_mask=None, position_ids=None, cache=None):
        logits = self.model(tokens, attention_mask=attention_mask, position_ids=position_ids, cache=cache)
        return logits.index_fill(-1, torch.tensor([self.pad_id], device=logits.device), float("-inf"))


def sample_at_temperatures(model, tokenizer: CharTokenizer, prompt: str, temperatures, max_new_tokens: int, *,
                           seed: int = 0, eos: str | None = None) -> dict:
    """One continuation of ``prompt`` per temperature: ``{temperature: prompt + generated text}``.

    Every temperature draws from a generator seeded with ``seed``, so the runs differ only in
    the temperature; temperature 0 is greedy decoding. ``eos`` (a character) ends a sample early.
    The padding token is never drawn (at a high temperature it otherwise can be, and ``decode``
    would drop it silently).
    """
    if eos is not None and len(eos) != 1:
        raise ValueError(f"eos must be one character, got {eos!r}")
    prompt_ids = tokenizer.encode(prompt)
    eos_id = None if eos is None else tokenizer.encode(eos)[0]
    samples, never_pad = {}, _NeverPad(model, tokenizer.pad_id)
    for temperature in temperatures:
        out = generate(never_pad, [prompt_ids], max_new_tokens, eos_id=eos_id, pad_id=tokenizer.pad_id,
                       temperature=temperature, generator=torch.Generator().manual_seed(seed))
        samples[temperature] = prompt + tokenizer.decode(out.new_tokens[0])
    return samples


__all__ = ["python_docs_corpus", "CharTokenizer", "split", "random_windows", "evaluate_loss", "perplexity",
           "TrainResult", "train_char_lm", "sample_at_temperatures"]
