"""The references and the catalogue of known mistakes of ch05_blocks (grader side)."""
from __future__ import annotations


import torch
from torch import nn

from ..model import Mistake
from . import add
from ._common import parts, vitref
from ...questions.ch05_blocks import (  # noqa: F401
    BLOCK_CASES,
    LN_CASES,
    POST_CASES,
    Q6_CASES,
    Q7_CASES,
    Sublayer,
    _run_block,
    _run_ln,
    _run_q6,
    _run_q7,
)


def _residual(body):
    def build(parts):
        class ResidualAdd(nn.Module):
            def __init__(self, fn):
                super().__init__()
                self.fn = fn

            def forward(self, x, **kwargs):
                return body(self, x, kwargs)
        return ResidualAdd
    return build


Q6_MISTAKES = [
    Mistake("returns_x", "returns x unchanged (the skeleton's return x)",
            "Return the residual sum x + self.fn(x, **kwargs).", _residual(lambda self, x, kw: x)),
    Mistake("returns_fn_only", "returns fn(x) only: the skip connection is missing",
            "Add the input back: return x + self.fn(x, **kwargs).", _residual(lambda self, x, kw: self.fn(x, **kw))),
    Mistake("added_twice", "the input added twice",
            "The residual sum adds x once: x + fn(x).", _residual(lambda self, x, kw: x + x + self.fn(x, **kw))),
    Mistake("fn_doubled", "fn(x) added to itself: the input is lost",
            "Keep the input before overwriting x: res = x; x = self.fn(x, **kwargs); return x + res.",
            _residual(lambda self, x, kw: self.fn(x, **kw) + self.fn(x, **kw))),
    Mistake("kwargs_dropped", "keyword arguments are not passed on to fn",
            "Forward them: self.fn(x, **kwargs) (the encoder passes e.g. a mask this way).",
            _residual(lambda self, x, kw: x + self.fn(x))),
]

add('q6', references=lambda: [vitref().ResidualAdd], catalogue=Q6_MISTAKES)


def _ffn(hidden="expansion", activation="gelu", order="normal"):
    def build(parts):
        class FeedForwardBlock(nn.Sequential):
            def __init__(self, emb_size, expansion=4, drop_p=0.0):
                width = {"expansion": expansion * emb_size, "none": emb_size, "four": 4 * emb_size,
                         "bare": expansion}[hidden]
                act = {"gelu": nn.GELU(), "relu": nn.ReLU(), "tanh": nn.GELU(approximate="tanh"),
                       None: nn.Identity()}[activation]
                if order == "normal":
                    super().__init__(nn.Linear(emb_size, width), act, nn.Dropout(drop_p), nn.Linear(width, emb_size))
                else:
                    super().__init__(nn.Linear(emb_size, width), nn.Dropout(drop_p), nn.Linear(width, emb_size), act)
        return FeedForwardBlock
    return build


Q7_MISTAKES = [
    Mistake("relu", "ReLU instead of GELU",
            "The ViT feed-forward block uses nn.GELU() between the two linear layers.", _ffn(activation="relu")),
    Mistake("gelu_tanh", "GELU with the tanh approximation",
            "Use the exact nn.GELU() (erf form), as in the slides.", _ffn(activation="tanh")),
    Mistake("no_expansion", "the hidden layer is not expanded",
            "The first linear layer maps emb_size -> expansion * emb_size, the second back to emb_size.",
            _ffn(hidden="none")),
    Mistake("expansion_hardcoded", "expansion fixed at 4",
            "Use the expansion argument: nn.Linear(emb_size, expansion * emb_size).", _ffn(hidden="four")),
    Mistake("hidden_is_expansion", "hidden layer of size expansion instead of expansion * emb_size",
            "The hidden width is expansion * emb_size (e.g. 4 * 768 = 3072), not expansion.", _ffn(hidden="bare")),
    Mistake("no_activation", "no activation between the linear layers",
            "Two linear layers in a row are one linear map: put nn.GELU() between them.", _ffn(activation=None)),
    Mistake("activation_last", "GELU after the second linear layer",
            "The order is Linear, GELU, Dropout, Linear: the activation sits in the hidden layer.",
            _ffn(order="last")),
]

add('q7', references=lambda: [vitref().FeedForwardBlock], catalogue=Q7_MISTAKES)


def _block_reference(norm_first):
    def make():
        v = vitref()

        class Reference(v.TransformerEncoderBlock):
            def __init__(self, emb_size=768, num_heads=8, forward_expansion=4, drop_p=0.0, forward_drop_p=0.0,
                         **kwargs):
                super().__init__(emb_size, num_heads, drop_p=drop_p, forward_expansion=forward_expansion,
                                 forward_drop_p=forward_drop_p, norm_first=norm_first)
        return [Reference]
    return make


def _encoder_block(layout):
    """Wrong blocks in the slides' nn.Sequential style; ``layout`` names the mistake."""
    def build(parts):
        MHA, ResidualAdd, FFN = parts.MultiHeadAttention, parts.ResidualAdd, parts.FeedForwardBlock

        class PostNorm(nn.Module):
            def __init__(self, fn, emb_size):
                super().__init__()
                self.fn, self.norm = fn, nn.LayerNorm(emb_size)

            def forward(self, x, **kwargs):
                return self.norm(x + self.fn(x, **kwargs))

        class TransformerEncoderBlock(nn.Sequential):
            def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
                heads = kwargs.get("num_heads", 8)
                attn = MHA(emb_size) if layout == "kwargs_not_passed" else MHA(emb_size, heads)
                ffn = (FFN(emb_size) if layout == "expansion_not_passed" else
                       FFN(emb_size, expansion=forward_expansion, drop_p=forward_drop_p))
                if layout in ("kwargs_not_passed", "expansion_not_passed"):
                    layout_ = "pre_ln"
                else:
                    layout_ = layout
                if layout_ == "pre_ln":
                    super().__init__(ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), attn, nn.Dropout(drop_p))),
                                     ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), ffn, nn.Dropout(drop_p))))
                elif layout == "post_ln":
                    super().__init__(PostNorm(nn.Sequential(attn, nn.Dropout(drop_p)), emb_size),
                                     PostNorm(nn.Sequential(ffn, nn.Dropout(drop_p)), emb_size))
                elif layout == "no_residual":
                    super().__init__(nn.Sequential(nn.LayerNorm(emb_size), attn, nn.Dropout(drop_p)),
                                     nn.Sequential(nn.LayerNorm(emb_size), ffn, nn.Dropout(drop_p)))
                elif layout == "norm_after_sublayer":
                    super().__init__(ResidualAdd(nn.Sequential(attn, nn.LayerNorm(emb_size), nn.Dropout(drop_p))),
                                     ResidualAdd(nn.Sequential(ffn, nn.LayerNorm(emb_size), nn.Dropout(drop_p))))
                elif layout == "ffn_first":
                    super().__init__(ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), ffn, nn.Dropout(drop_p))),
                                     ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), attn, nn.Dropout(drop_p))))
                elif layout == "missing_ffn_norm":
                    super().__init__(ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), attn, nn.Dropout(drop_p))),
                                     ResidualAdd(nn.Sequential(ffn, nn.Dropout(drop_p))))
                elif layout == "one_residual":
                    super().__init__(ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), attn, nn.Dropout(drop_p),
                                                               nn.LayerNorm(emb_size), ffn, nn.Dropout(drop_p))))
                else:
                    raise ValueError(layout)
        return TransformerEncoderBlock
    return build


_BLOCK_PARTS = ("MultiHeadAttention", "ResidualAdd", "FeedForwardBlock")

BLOCK_MISTAKES = [
    Mistake("post_ln", "post-LN: LayerNorm after the residual sum",
            "The slides' (and ViT's) block is pre-LN: x + MSA(LN(x)), then x + MLP(LN(x)); put nn.LayerNorm "
            "first inside each ResidualAdd.", _encoder_block("post_ln"), _BLOCK_PARTS),
    Mistake("no_residual", "the residual connections are missing",
            "Wrap each sub-layer in ResidualAdd(nn.Sequential(...)) so its input is added back.",
            _encoder_block("no_residual"), _BLOCK_PARTS),
    Mistake("norm_after_sublayer", "LayerNorm after the sub-layer inside the residual branch",
            "Inside each ResidualAdd the order is LayerNorm, then the sub-layer, then Dropout.",
            _encoder_block("norm_after_sublayer"), _BLOCK_PARTS),
    Mistake("ffn_first", "sub-layers in the wrong order: feed-forward before attention",
            "Attention comes first (tokens exchange information), then the feed-forward block.",
            _encoder_block("ffn_first"), _BLOCK_PARTS),
    Mistake("missing_ffn_norm", "no LayerNorm before the feed-forward block",
            "Both residual branches start with their own nn.LayerNorm(emb_size).",
            _encoder_block("missing_ffn_norm"), _BLOCK_PARTS),
    Mistake("kwargs_not_passed", "MultiHeadAttention built without **kwargs: num_heads keeps its default",
            "Pass the extra arguments on: MultiHeadAttention(emb_size, **kwargs), so num_heads reaches it.",
            _encoder_block("kwargs_not_passed"), _BLOCK_PARTS),
    Mistake("expansion_not_passed", "forward_expansion not passed to the feed-forward block",
            "FeedForwardBlock(emb_size, expansion=forward_expansion, drop_p=forward_drop_p).",
            _encoder_block("expansion_not_passed"), _BLOCK_PARTS),
    Mistake("one_residual", "one residual connection around both sub-layers",
            "Each sub-layer gets its own ResidualAdd: x = x + MSA(LN(x)), then x = x + MLP(LN(x)).",
            _encoder_block("one_residual"), _BLOCK_PARTS),
]

_VITREF_PARTS = parts(MultiHeadAttention=lambda: vitref().MultiHeadAttention,
                      ResidualAdd=lambda: vitref().ResidualAdd,
                      FeedForwardBlock=lambda: vitref().FeedForwardBlock)

add('q7b', references=_block_reference(True), catalogue=BLOCK_MISTAKES, reference_parts=_VITREF_PARTS)


def _layernorm(body):
    def build(parts):
        class LayerNorm(nn.Module):
            def __init__(self, dim, eps=1e-5):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.ones(dim))
                self.bias = nn.Parameter(torch.zeros(dim))

            def forward(self, x):
                return body(self, x)
        return LayerNorm
    return build


def _ln(mean_dims=-1, unbiased=False, eps="inside", affine=True, sqrt=True, eps_value=None):
    """A wrong LayerNorm; ``mean_dims=None`` reduces over every axis."""
    def body(self, x):
        dims = tuple(range(x.dim())) if mean_dims is None else mean_dims
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
        e = self.eps if eps_value is None else eps_value
        if eps == "inside":
            denom = torch.sqrt(var + e) if sqrt else var + e
        elif eps == "outside":
            denom = torch.sqrt(var) + e
        else:
            denom = torch.sqrt(var)
        y = (x - mean) / denom
        return y * self.weight + self.bias if affine else y
    return _layernorm(body)


LN_MISTAKES = [
    Mistake("unbiased_variance", "unbiased variance (divides by dim - 1)",
            "LayerNorm uses the biased variance, the mean of (x - mean)^2; torch.var divides by dim - 1 "
            "unless you pass unbiased=False (correction=0).", _ln(unbiased=True)),
    Mistake("no_eps", "eps missing: a constant row divides by zero",
            "Add eps inside the square root: (x - mean) / sqrt(var + eps).", _ln(eps=None)),
    Mistake("eps_outside_sqrt", "eps added outside the square root",
            "The formula is (x - mean) / sqrt(var + eps), not / (sqrt(var) + eps).", _ln(eps="outside")),
    Mistake("eps_hardcoded", "eps fixed at 1e-5",
            "Use the eps argument (self.eps).", _ln(eps_value=1e-5)),
    Mistake("all_axes", "normalised over all axes instead of the last one",
            "Each token vector is normalised on its own: mean and variance over the last axis (dim=-1).",
            _ln(mean_dims=None)),
    Mistake("first_axis", "normalised over the first axis (the batch)",
            "Normalise each token vector: mean and variance over the last axis, dim=-1.", _ln(mean_dims=0)),
    Mistake("std_unbiased_eps_outside", "x.std() (unbiased) with eps outside the square root",
            "torch.std divides by dim - 1; use the biased variance and put eps inside: sqrt(var + eps).",
            _ln(unbiased=True, eps="outside")),
    Mistake("no_affine", "weight and bias not applied",
            "After normalising, scale by self.weight and shift by self.bias.", _ln(affine=False)),
    Mistake("no_sqrt", "divided by the variance instead of the standard deviation",
            "Divide by sqrt(var + eps).", _ln(sqrt=False)),
]

add('layernorm', references=lambda: [vitref().LayerNorm], catalogue=LN_MISTAKES)


def _post_block(layout):
    def build(parts):
        MHA, FFN = parts.MultiHeadAttention, parts.FeedForwardBlock

        class PostLNEncoderBlock(nn.Module):
            def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
                super().__init__()
                self.attn = MHA(emb_size, num_heads)
                self.norm1 = nn.LayerNorm(emb_size)
                self.mlp = FFN(emb_size, expansion=forward_expansion)
                self.norm2 = nn.LayerNorm(emb_size)

            def forward(self, x):
                if layout == "pre_ln":
                    x = x + self.attn(self.norm1(x))
                    return x + self.mlp(self.norm2(x))
                if layout == "no_residual":
                    x = self.norm1(self.attn(x))
                    return self.norm2(self.mlp(x))
                if layout == "residual_after_norm":
                    x = x + self.norm1(self.attn(x))
                    return x + self.norm2(self.mlp(x))
                raise ValueError(layout)
        return PostLNEncoderBlock
    return build


POST_MISTAKES = [
    Mistake("pre_ln", "pre-LN: LayerNorm before the sub-layers",
            "Post-LN (the original Transformer) normalises after the residual sum: x = LN(x + MSA(x)), "
            "then x = LN(x + MLP(x)).", _post_block("pre_ln"), ("MultiHeadAttention", "FeedForwardBlock")),
    Mistake("no_residual", "the residual connections are missing",
            "Add each sub-layer's input back before normalising: LN(x + MSA(x)).",
            _post_block("no_residual"), ("MultiHeadAttention", "FeedForwardBlock")),
    Mistake("residual_after_norm", "LayerNorm on the sub-layer output only",
            "Normalise the sum: x = LN(x + MSA(x)), not x + LN(MSA(x)).",
            _post_block("residual_after_norm"), ("MultiHeadAttention", "FeedForwardBlock")),
]

add('post_ln_block', references=_block_reference(False), catalogue=POST_MISTAKES, reference_parts=_VITREF_PARTS)
