"""The live character GPT of chapter 8: the trained :class:`~vitref.generation.DecoderOnlyLM` in ONNX.

The page's text-attention explorer runs the model in the reader's browser with onnxruntime-web,
with the loader and drawing code it shares with chapter 7's ViT explorer
(``book/_ext/static/explorer/common.js``). This module writes what it needs and checks the export,
with the helpers of :mod:`vitref.explorer`:

* :class:`CharExplorerNet` -- the exported function: ``tokens (B, T)`` int64 ->
  ``(logits (B, T, V), attention (B, depth, heads, T, T))``, the model's own forward pass with
  each block's causal attention weights (:func:`block_attention_weights`) stacked;
* :func:`export_char_onnx`, :func:`char_onnx_outputs`, :func:`char_export_difference` -- the export
  (the sequence length is free, up to the model's context), onnxruntime's outputs, and their largest
  difference from vitref's on the same sequences;
* :func:`publish_char` -- the model file and a JSON (the vocabulary, the context, and vitref's
  outputs on a few sequences, for the browser test), checked, in the folder the book copies
  into the site.
"""
from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import torch
from einops import rearrange
from torch import nn

from .attention import causal_mask, scaled_dot_product_attention
from .charlm import CharTokenizer
from .explorer import (ALL_FILES, CHAR_DATA_FILE, CHAR_MODEL_FILE, _export, _largest_differences, checked_or_removed,
                       _run_onnx, _write_within_budget, page_html)
from .generation import DecoderOnlyLM
from .kvcache import CachedSelfAttention

TOP_K = 5            # next characters the page lists
CHECK_ATTENTION = 32   # the JSON carries the attention weights of check texts up to this length


def block_attention_weights(block, x: torch.Tensor) -> torch.Tensor:
    """The causal attention weights ``(B, h, T, T)`` of ``block`` (a ``DecoderOnlyBlock``) on its input
    ``x (B, T, D)``: :func:`~vitref.attention.scaled_dot_product_attention` of the queries and keys its
    attention layer computes from ``block.norm1(x)``, with the causal mask (row ``t`` is 0 after ``t``)."""
    attention = block.attn
    q, k, v = rearrange(attention.qkv(block.norm1(x)), "b t (qkv h d) -> qkv b h t d", qkv=3,
                        h=attention.num_heads)                                  # (B, h, T, d) each
    _, weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(x.shape[1], device=x.device))
    return weights                                                              # (B, h, T, T)


class CharExplorerNet(nn.Module):
    """``tokens (B, T)`` -> ``(logits (B, T, V), attention (B, depth, heads, T, T))``, without a cache."""

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor):
        model = self.model
        positions = torch.arange(tokens.shape[1], device=tokens.device)          # (T,)
        x = model.token_embed(tokens) + model.pos_embed(positions)               # (B, T, D)
        weights = []
        for block in model.blocks:
            weights.append(block_attention_weights(block, x))                   # (B, h, T, T)
            x, _ = block(x)                                                     # (B, T, D)
        return model.head(model.norm(x)), torch.stack(weights, dim=1)            # (B, T, V), (B, L, h, T, T)


def export_char_onnx(model: DecoderOnlyLM, path) -> Path:
    """Export ``model`` (put in eval mode) to ``path``; the batch size and the length are free."""
    example = torch.zeros(1, min(8, model.max_len), dtype=torch.long)            # (1, T)
    axes = {0: "batch", 1: "length"}
    return _export(CharExplorerNet(model.eval()), (example,), path, ["tokens"], ["logits", "attention"],
                   {"tokens": axes, "logits": axes, "attention": {0: "batch", 3: "length", 4: "length_"}})


def char_onnx_outputs(path, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime (CPU) on ``tokens (B, T)``: ``(logits (B, T, V), attention (B, L, h, T, T))``."""
    logits, attention = _run_onnx(path, {"tokens": tokens.long().numpy()}, ["logits", "attention"])
    return logits, attention


@torch.no_grad()
def char_export_difference(model: DecoderOnlyLM, path, sequences: list) -> dict:
    """Largest absolute differences between onnxruntime's outputs and vitref's, over ``sequences``
    (lists of token ids, each run alone): ``{'logits': float, 'attention': float}``. vitref's logits
    are ``model(tokens)`` itself."""
    largest = dict(logits=0.0, attention=0.0)
    for ids in sequences:
        tokens = torch.tensor([ids], dtype=torch.long)                           # (1, T)
        logits, attention = char_onnx_outputs(path, tokens)
        expected = dict(logits=model.eval()(tokens), attention=CharExplorerNet(model)(tokens)[1])
        for name, value in _largest_differences(dict(logits=logits, attention=attention), expected).items():
            largest[name] = max(largest[name], value)
    return largest


@torch.no_grad()
def char_explorer_data(model: DecoderOnlyLM, tokenizer: CharTokenizer, check_texts) -> dict:
    """The page's JSON: the vocabulary (``itos``, id 0 the padding token), the context, the model's
    shape, and for each of ``check_texts`` vitref's top next characters after it (the padding token
    left out) and, for those of at most :data:`CHECK_ATTENTION` characters, every attention weight
    ``(depth, heads, T, T)`` flattened, for the browser test."""
    checks = []
    for text in check_texts:
        tokens = tokenizer.encode_tensor(text)[None]                             # (1, T)
        if not 0 < tokens.shape[1] <= model.max_len:
            raise ValueError(f"a check text must have 1 to {model.max_len} characters, got {len(text)}")
        logits, attention = CharExplorerNet(model.eval())(tokens)
        probabilities = logits[0, -1].softmax(-1)
        probabilities[tokenizer.pad_id] = -1                                     # never listed
        top = probabilities.topk(TOP_K)
        check = dict(text=text, top=top.indices.tolist(), probabilities=top.values.tolist())
        if len(text) <= CHECK_ATTENTION:                                         # (L, h, T, T), 6 decimals
            check["attention"] = [round(w, 6) for w in attention[0].flatten().tolist()]
        checks.append(check)
    depth, heads = len(model.blocks), cast(CachedSelfAttention, model.blocks[0].attn).num_heads
    return dict(itos=tokenizer.itos, pad=tokenizer.pad_id, context=model.max_len, depth=depth, heads=heads,
                top=TOP_K, checks=checks)


def publish_char(folder, model: DecoderOnlyLM, tokenizer: CharTokenizer, check_texts,
                 tolerance: float = 1e-4) -> dict:
    """Export the model (:data:`~vitref.explorer.CHAR_MODEL_FILE`), write its data
    (:data:`~vitref.explorer.CHAR_DATA_FILE`) and check the export on ``check_texts``: onnxruntime's
    logits and attention weights must equal vitref's within ``tolerance``, and the explorers' files
    fit :data:`~vitref.explorer.MAX_ASSET_BYTES`; otherwise the two files are removed and
    ``ValueError`` is raised. Returns ``{'sizes': {file: bytes}, 'difference': {...}}``."""
    folder = Path(folder)
    export_char_onnx(model, folder / CHAR_MODEL_FILE)
    data = char_explorer_data(model, tokenizer, check_texts)
    sizes = _write_within_budget(folder, CHAR_MODEL_FILE, CHAR_DATA_FILE, data, ALL_FILES)
    sequences = [tokenizer.encode(text) for text in check_texts]
    difference = char_export_difference(model, folder / CHAR_MODEL_FILE, sequences)
    return checked_or_removed(folder, sizes, difference, tolerance)


# The explorer's markup in chapter 8: the script, served beside it, fills it in.
TEXT_EXPLORER_HTML = """
<section id="text-explorer" class="vit-explorer text-explorer" aria-label="Live attention explorer">
  <p id="text-explorer-status">Loading the live model (onnxruntime-web, served with this page)...</p>
  <div id="text-explorer-panel" hidden>
    <div class="vit-explorer-controls">
      <label for="text-explorer-input">Text (at most <span id="text-explorer-limit">128</span>
        characters)</label>
      <input type="text" id="text-explorer-input" value="The value of the " spellcheck="false"
        autocomplete="off" aria-describedby="text-explorer-message">
      <label><input type="checkbox" id="text-explorer-full"> full map per head</label>
    </div>
    <p id="text-explorer-message" role="status"></p>
    <p id="text-explorer-live" aria-live="polite"></p>
    <div id="text-explorer-tokens" class="text-explorer-tokens" role="toolbar"
      aria-label="The characters: focus one (Tab, then the arrow keys) or hover it to see its attention"></div>
    <p class="text-explorer-legend"><span class="text-explorer-swatch text-explorer-blocked"></span>
      blocked by the causal mask (a later character). Each row runs from light (no weight) to dark (its
      largest weight); the chosen character is outlined.</p>
    <div class="vit-explorer-scroll">
      <table id="text-explorer-maps"><caption>Attention of the chosen character (the query) over the
        characters up to it, in every block and head</caption></table>
    </div>
    <p id="text-explorer-timing"></p>
  </div>
  <script src="{common}"></script>
  <script src="{script}"></script>
</section>
"""


def text_explorer_html(script: str = "../_static/explorer/text-explorer.js") -> str:
    """The text explorer's HTML for the page, loading its script from ``script`` (a same-site path)."""
    return page_html(TEXT_EXPLORER_HTML, script)


__all__ = ["CharExplorerNet", "block_attention_weights", "export_char_onnx", "char_onnx_outputs",
           "char_export_difference", "char_explorer_data", "publish_char", "text_explorer_html", "TOP_K"]
