"""The references and the catalogue of known mistakes of ch05_blocks (grader side)."""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

import vitref

from ..model import Mistake
from ._entry import add
from ._common import parts
from ._changes import norm_over_tokens, norms_swapped, relu_for_gelu, residual_dropped, residual_multiplies
from ._changes import residual_subtracts
from ._symptoms import BLOCK_DROPOUT, GRADIENT_DIFFERS, PROPERTIES, RECIPE_SAYS, RETURNS_TUPLE

BLOCK_SYMPTOMS = (*PROPERTIES, GRADIENT_DIFFERS, RETURNS_TUPLE, *RECIPE_SAYS)


def _add_in_place(self, x, kw):
    x += self.fn(x, **kw)
    return x


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
    Mistake("inplace_on_input", "x changed in place (x += self.fn(x))",
            "x += ... writes into the caller's tensor, which autograd still needs for the sub-layer's backward: "
            "return a new tensor, x + self.fn(x, **kwargs).", _residual(_add_in_place)),
    Mistake("residual_detached", "the skip path is detached (x.detach() + fn(x))",
            "Keep the skip path in the graph: x + self.fn(x, **kwargs); it is what lets gradients reach early "
            "layers unchanged.", _residual(lambda self, x, kw: x.detach() + self.fn(x, **kw))),
    Mistake("kwargs_as_dict", "kwargs passed as one dictionary: self.fn(x, kwargs)",
            "Unpack them: self.fn(x, **kwargs).", _residual(lambda self, x, kw: x + self.fn(x, kw))),
]

add('q6', references=lambda: [vitref.ResidualAdd],
    catalogue=[*Q6_MISTAKES, residual_multiplies(("",)), residual_subtracts(("",)), *BLOCK_SYMPTOMS])


class AlwaysDropout(nn.Module):
    """F.dropout(x, p) without training=self.training: on in eval mode too."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p)


def _ffn(hidden="expansion", activation="gelu", order="normal", dropout="normal", bias=True):
    """A wrong feed-forward block with the exercise's signature; ``hidden``: the hidden width
    (``"expansion"``: the given ``hidden_dim or expansion * emb_size``, right; ``"ignores_hidden_dim"``:
    always ``expansion * emb_size``); ``dropout``: where (and which) dropout it has."""
    def build(parts):
        class FeedForwardBlock(nn.Sequential):
            def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
                width = {"expansion": hidden_dim or expansion * emb_size, "ignores_hidden_dim": expansion * emb_size,
                         "none": emb_size, "four": 4 * emb_size, "bare": expansion}[hidden]
                act = {"gelu": nn.GELU(), "relu": nn.ReLU(), "tanh": nn.GELU(approximate="tanh"),
                       None: nn.Identity()}[activation]
                up, down = nn.Linear(emb_size, width, bias=bias), nn.Linear(width, emb_size, bias=bias)
                drop = (nn.Dropout() if dropout == "default_p" else AlwaysDropout(drop_p) if dropout == "always_on"
                        else nn.Dropout(drop_p))
                if order != "normal":
                    super().__init__(up, drop, down, act)
                    return
                layers = {"normal": (up, act, drop, down), "default_p": (up, act, drop, down),
                          "always_on": (up, act, drop, down), "none": (up, act, down), "last": (up, act, down, drop),
                          "before_act": (up, drop, act, down), "input": (drop, up, act, down)}[dropout]
                super().__init__(*layers)
        return FeedForwardBlock
    return build


def _ffn_without_hidden_dim(parts):
    """The answer to the exercise before it took hidden_dim: FeedForwardBlock(emb_size, expansion=4, drop_p=0.0)."""
    class FeedForwardBlock(nn.Sequential):
        def __init__(self, emb_size, expansion=4, drop_p=0.0):
            super().__init__(nn.Linear(emb_size, expansion * emb_size), nn.GELU(), nn.Dropout(drop_p),
                             nn.Linear(expansion * emb_size, emb_size))
    return FeedForwardBlock


Q7_MISTAKES = [
    Mistake("relu", "ReLU instead of GELU",
            "The ViT feed-forward block uses nn.GELU() between the two linear layers.", _ffn(activation="relu")),
    Mistake("gelu_tanh", "GELU with the tanh approximation",
            "Use the exact nn.GELU() (erf form), as in the slides.", _ffn(activation="tanh")),
    Mistake("no_expansion", "the hidden layer is not expanded",
            "The first linear layer maps emb_size -> hidden (expansion * emb_size, or hidden_dim when given), the "
            "second back to emb_size.",
            _ffn(hidden="none")),
    Mistake("expansion_hardcoded", "expansion fixed at 4",
            "Use the expansion argument: hidden = hidden_dim or expansion * emb_size, then nn.Linear(emb_size, "
            "hidden).", _ffn(hidden="four")),
    Mistake("hidden_is_expansion", "hidden layer of size expansion instead of expansion * emb_size",
            "The hidden width is expansion * emb_size (e.g. 4 * 768 = 3072), not expansion.", _ffn(hidden="bare")),
    Mistake("no_activation", "no activation between the linear layers",
            "Two linear layers in a row are one linear map: put nn.GELU() between them.", _ffn(activation=None)),
    Mistake("activation_last", "GELU after the second linear layer",
            "The order is Linear, GELU, Dropout, Linear: the activation sits in the hidden layer.",
            _ffn(order="last")),
    Mistake("no_dropout", "no dropout: drop_p is not used",
            "Put nn.Dropout(drop_p) between the GELU and the second linear layer; in training mode it zeroes "
            "hidden units with probability drop_p.", _ffn(dropout="none")),
    Mistake("dropout_last", "dropout after the second linear layer",
            "The dropout sits in the hidden layer: Linear, GELU, Dropout(drop_p), Linear.", _ffn(dropout="last")),
    Mistake("dropout_default_p", "nn.Dropout() without drop_p: the default p = 0.5",
            "Pass the probability: nn.Dropout(drop_p).", _ffn(dropout="default_p")),
    Mistake("dropout_before_activation", "dropout before the GELU",
            "The order is Linear, GELU, Dropout, Linear.", _ffn(dropout="before_act")),
    Mistake("dropout_on_input", "dropout on the input, before the first linear layer",
            "The dropout sits in the hidden layer: Linear, GELU, Dropout(drop_p), Linear.", _ffn(dropout="input")),
    Mistake("dropout_always_on", "dropout also in eval mode: F.dropout(x, p) without training=self.training",
            "F.dropout drops by default (training=True); use nn.Dropout(drop_p), or pass "
            "training=self.training.", _ffn(dropout="always_on")),
    Mistake("no_bias", "linear layers without bias (bias=False)",
            "Keep nn.Linear's bias (the default): nn.Linear(emb_size, hidden).", _ffn(bias=False)),
    Mistake("hidden_dim_ignored", "hidden_dim ignored (not a parameter, or not used as the hidden width)",
            "FeedForwardBlock(emb_size, expansion=4, drop_p=0.0, hidden_dim=None): when hidden_dim is given it is "
            "the hidden width, instead of expansion * emb_size; use the given hidden = hidden_dim or "
            "expansion * emb_size in both layers: nn.Linear(emb_size, hidden) and nn.Linear(hidden, emb_size).",
            _ffn(hidden="ignores_hidden_dim"), also=(_ffn_without_hidden_dim,)),
]

add('q7', references=lambda: [vitref.FeedForwardBlock], catalogue=[*Q7_MISTAKES, *BLOCK_SYMPTOMS, *BLOCK_DROPOUT])


def _block_reference(norm_first):
    def make():

        class Reference(vitref.TransformerEncoderBlock):
            def __init__(self, emb_size=768, num_heads=8, forward_expansion=4, drop_p=0.0, forward_drop_p=0.0,
                         **kwargs):
                super().__init__(emb_size, num_heads, drop_p=drop_p, forward_expansion=forward_expansion,
                                 forward_drop_p=forward_drop_p, norm_first=norm_first)
        return [Reference]
    return make


_PRE_LN = ("pre_ln", "kwargs_not_passed", "expansion_not_passed", "dropout_swapped", "forward_drop_p_not_passed",
           "shared_norm", "dropout_always_on", "ffn")


def _encoder_block(layout, ffn_build=None):
    """Wrong blocks in the slides' nn.Sequential style; ``layout`` names the mistake, ``ffn_build``
    (a feed-forward mistake's builder, with layout "ffn") a wrong feed-forward block inside."""
    def build(parts):
        MHA, ResidualAdd = parts.MultiHeadAttention, parts.ResidualAdd
        FFN = ffn_build(parts) if ffn_build is not None else parts.FeedForwardBlock

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
                inner = {"dropout_swapped": drop_p, "forward_drop_p_not_passed": 0.0}.get(layout, forward_drop_p)
                outer = forward_drop_p if layout == "dropout_swapped" else drop_p
                ffn = (FFN(emb_size) if layout == "expansion_not_passed" else
                       FFN(emb_size, expansion=forward_expansion, drop_p=inner))
                norm1 = nn.LayerNorm(emb_size)
                norm2 = norm1 if layout == "shared_norm" else nn.LayerNorm(emb_size)
                Drop = AlwaysDropout if layout == "dropout_always_on" else nn.Dropout
                d1, d2 = Drop(outer), Drop(outer)
                if layout in _PRE_LN:
                    super().__init__(ResidualAdd(nn.Sequential(norm1, attn, d1)),
                                     ResidualAdd(nn.Sequential(norm2, ffn, d2)))
                elif layout == "no_dropout":
                    super().__init__(ResidualAdd(nn.Sequential(norm1, attn)), ResidualAdd(nn.Sequential(norm2, ffn)))
                elif layout == "dropout_before_sublayer":
                    super().__init__(ResidualAdd(nn.Sequential(norm1, d1, attn)),
                                     ResidualAdd(nn.Sequential(norm2, d2, ffn)))
                elif layout == "post_ln":
                    super().__init__(PostNorm(nn.Sequential(attn, d1), emb_size),
                                     PostNorm(nn.Sequential(ffn, d2), emb_size))
                elif layout == "no_residual":
                    super().__init__(nn.Sequential(norm1, attn, d1), nn.Sequential(norm2, ffn, d2))
                elif layout == "norm_after_sublayer":
                    super().__init__(ResidualAdd(nn.Sequential(attn, norm1, d1)),
                                     ResidualAdd(nn.Sequential(ffn, norm2, d2)))
                elif layout == "ffn_first":
                    super().__init__(ResidualAdd(nn.Sequential(norm1, ffn, d1)),
                                     ResidualAdd(nn.Sequential(norm2, attn, d2)))
                elif layout == "missing_ffn_norm":
                    super().__init__(ResidualAdd(nn.Sequential(norm1, attn, d1)), ResidualAdd(nn.Sequential(ffn, d2)))
                elif layout == "one_residual":
                    super().__init__(ResidualAdd(nn.Sequential(norm1, attn, d1, norm2, ffn, d2)))
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
    Mistake("dropout_swapped", "drop_p and forward_drop_p swapped",
            "drop_p is for the Dropout after each sub-layer (in both ResidualAdd branches); forward_drop_p goes "
            "to FeedForwardBlock(emb_size, forward_expansion, forward_drop_p).",
            _encoder_block("dropout_swapped"), _BLOCK_PARTS),
    Mistake("forward_drop_p_not_passed", "forward_drop_p not passed to the feed-forward block",
            "FeedForwardBlock(emb_size, expansion=forward_expansion, drop_p=forward_drop_p): its inner dropout "
            "uses forward_drop_p.", _encoder_block("forward_drop_p_not_passed"), _BLOCK_PARTS),
    Mistake("no_dropout", "no Dropout after the sub-layers: drop_p is not used",
            "End each ResidualAdd branch with nn.Dropout(drop_p): LayerNorm, sub-layer, Dropout.",
            _encoder_block("no_dropout"), _BLOCK_PARTS),
    Mistake("dropout_before_sublayer", "Dropout before the sub-layer instead of after it",
            "Inside each ResidualAdd the order is LayerNorm, sub-layer, Dropout(drop_p).",
            _encoder_block("dropout_before_sublayer"), _BLOCK_PARTS),
    Mistake("shared_norm", "one LayerNorm shared by both sub-layers",
            "Each branch needs its own nn.LayerNorm(emb_size) (its own weight and bias).",
            _encoder_block("shared_norm"), _BLOCK_PARTS),
    Mistake("dropout_always_on", "dropout also in eval mode: F.dropout(x, p) without training=self.training",
            "Use nn.Dropout(drop_p) (off in eval mode), or pass training=self.training to F.dropout.",
            _encoder_block("dropout_always_on"), _BLOCK_PARTS),
    # the feed-forward block's own mistakes (Q7), seen through the encoder block
    *(Mistake(f"ffn_{m.key}", f"in your FeedForwardBlock: {m.title}", m.hint, _encoder_block("ffn", m.build),
              _BLOCK_PARTS) for m in Q7_MISTAKES
      # no_dropout: the same block as forward_drop_p_not_passed; hidden_dim_ignored: the encoder block never
      # passes hidden_dim, so that block is right
      if m.key not in ("no_dropout", "hidden_dim_ignored")),
]

_VITREF_PARTS = parts(MultiHeadAttention=lambda: vitref.MultiHeadAttention,
                      ResidualAdd=lambda: vitref.ResidualAdd,
                      FeedForwardBlock=lambda: vitref.FeedForwardBlock)

# a sub-layer's residual, the two norms: changes of the reference block
BLOCK_CHANGES = (residual_dropped(), residual_multiplies(), residual_subtracts(), norms_swapped())

add('q7b', references=_block_reference(True), catalogue=[*BLOCK_MISTAKES, *BLOCK_CHANGES, *BLOCK_SYMPTOMS,
                                                         *BLOCK_DROPOUT],
    reference_parts=_VITREF_PARTS)


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


def _ln(mean_dims=-1, unbiased=False, eps="inside", affine=True, sqrt=True, eps_value=None, centre="both",
        swap_affine=False):
    """A wrong LayerNorm; ``mean_dims=None`` reduces over every axis; ``centre``: "both",
    "output" (the variance is E[x^2], not centred) or "variance" (x itself is not centred)."""
    def body(self, x):
        dims = tuple(range(x.dim())) if mean_dims is None else mean_dims
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
        if centre == "output":
            var = (x ** 2).mean(dim=dims, keepdim=True)
        if centre == "variance":
            mean = torch.zeros_like(mean)
        e = self.eps if eps_value is None else eps_value
        if eps == "inside":
            denom = torch.sqrt(var + e) if sqrt else var + e
        elif eps == "outside":
            denom = torch.sqrt(var) + e
        else:
            denom = torch.sqrt(var)
        y = (x - mean) / denom
        if swap_affine:
            return y * self.bias + self.weight
        return y * self.weight + self.bias if affine else y
    return _layernorm(body)


def _ln_no_keepdim(self, x):
    return (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + self.eps) * self.weight + self.bias


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
    Mistake("weight_bias_swapped", "weight and bias swapped",
            "Scale by self.weight, then shift by self.bias: x_hat * self.weight + self.bias.", _ln(swap_affine=True)),
    Mistake("variance_not_centred", "the variance is the mean of x^2, not of (x - mean)^2",
            "Subtract the mean before squaring: var = ((x - mean) ** 2).mean(-1, keepdim=True).",
            _ln(centre="output")),
    Mistake("not_centred", "the mean is not subtracted from x",
            "Normalise x - mean, not x: (x - mean) / sqrt(var + eps).", _ln(centre="variance")),
    Mistake("last_two_axes", "normalised over the last two axes (tokens and features)",
            "Each token vector is normalised on its own: reduce over the last axis only (dim=-1).",
            _ln(mean_dims=(-2, -1))),
    Mistake("keepdim_missing", "mean and variance without keepdim=True",
            "x.mean(-1) drops the last axis, so x - mean does not broadcast per token: use keepdim=True.",
            _layernorm(_ln_no_keepdim)),
]

add('layernorm', references=lambda: [vitref.LayerNorm], catalogue=[*LN_MISTAKES, norm_over_tokens(), *BLOCK_SYMPTOMS])


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
                if layout == "norm_then_residual":
                    x = self.norm1(x)
                    x = x + self.attn(x)
                    x = self.norm2(x)
                    return x + self.mlp(x)
                if layout == "ffn_first":
                    x = self.norm1(x + self.mlp(x))
                    return self.norm2(x + self.attn(x))
                h = self.norm1(x + self.attn(x))
                if layout == "norm_reused":
                    return self.norm1(h + self.mlp(h))
                if layout == "mlp_on_input":
                    return self.norm2(h + self.mlp(x))
                if layout == "residual_from_input":
                    return self.norm2(x + self.mlp(h))
                if layout == "missing_second_norm":
                    return h + self.mlp(h)
                raise ValueError(layout)
        return PostLNEncoderBlock
    return build


_POST_PARTS = ("MultiHeadAttention", "FeedForwardBlock")


def _post(key, title, hint):
    """A post-LN block mistake: the block :func:`_post_block` writes for ``key``, on the given attention and
    feed-forward block."""
    return Mistake(key, title, hint, _post_block(key), _POST_PARTS)


POST_MISTAKES = [
    _post("pre_ln", "pre-LN: LayerNorm before the sub-layers",
          "Post-LN (the original Transformer) normalises after the residual sum: x = LN(x + MSA(x)), "
          "then x = LN(x + MLP(x))."),
    _post("no_residual", "the residual connections are missing",
          "Add each sub-layer's input back before normalising: LN(x + MSA(x))."),
    _post("residual_after_norm", "LayerNorm on the sub-layer output only",
          "Normalise the sum: x = LN(x + MSA(x)), not x + LN(MSA(x))."),
    _post("norm_reused", "norm1 used for both sub-layers (norm2 never used)",
          "Each sum has its own LayerNorm: x = self.norm1(x + MSA(x)), then x = self.norm2(x + MLP(x))."),
    _post("mlp_on_input", "the feed-forward block applied to the block's input, not to the first sum",
          "The second sub-layer reads the output of the first: h = LN(x + MSA(x)); out = LN(h + MLP(h))."),
    _post("residual_from_input", "the second residual adds the block's input instead of the first sum",
          "Add the feed-forward block's own input back: h = LN(x + MSA(x)); out = LN(h + MLP(h))."),
    _post("ffn_first", "sub-layers in the wrong order: feed-forward before attention",
          "Attention first: x = LN(x + MSA(x)), then x = LN(x + MLP(x))."),
    _post("missing_second_norm", "no LayerNorm after the second residual sum",
          "Post-LN normalises after each sum: the block ends with self.norm2(x + MLP(x))."),
    _post("norm_then_residual", "LayerNorm first, then the residual sum of the normalised x",
          "Post-LN adds the raw input and normalises the sum: x = LN(x + MSA(x)), not x = LN(x); x = x + MSA(x)."),
]

add('post_ln_block', references=_block_reference(False),
    catalogue=[*POST_MISTAKES, *BLOCK_CHANGES, relu_for_gelu(), *BLOCK_SYMPTOMS], reference_parts=_VITREF_PARTS)
