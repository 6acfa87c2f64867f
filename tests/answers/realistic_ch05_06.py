"""Answers to chapters 5 and 6 as students write them: right ones in other formulations, and
realistic wrong ones, each with the name the checker should give it.

``RIGHT``: (question id, answer) pairs that must pass.
``WRONG``: (question id, answer, expected) triples that must fail; ``expected`` is the
catalogue key the judge should name, or ``("says", words)``: words the feedback must contain
(a property named by the judge or a diagnosis, when no catalogue entry matches).

Written independently of the catalogue's builders, with the notebook's building blocks
(``MultiHeadAttention`` as given in chapter 5's notebook, the course's ``ResidualAdd`` and
``FeedForwardBlock``, chapter 2's ``getPositionEncoding``).
"""
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from . import solutions as S

RIGHT: list = []
WRONG: list = []


def right(*qids):
    def register(obj):
        for qid in qids:
            RIGHT.append((qid, obj))
        return obj
    return register


def wrong(qid, expected):
    def register(obj):
        WRONG.append((qid, obj, expected))
        return obj
    return register


def says(words):
    return ("says", words)


MHA, FFN, Residual = S.MultiHeadAttention, S.FeedForwardBlock, S.ResidualAdd


def getPositionEncoding(seq_len, d, n=10000):
    """As chapter 6's notebook gives it (an odd d fails)."""
    k = np.arange(seq_len)[:, None]
    i = np.arange(d // 2)[None, :]
    angles = k / np.power(n, 2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


# =========================================================================== q6 ResidualAdd
class _Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn


@right("q6")
class ResidualTorchAdd(_Residual):
    def forward(self, x, **kwargs):
        return torch.add(x, self.fn(x, **kwargs))


@right("q6")
class ResidualOutAdd(_Residual):
    def forward(self, x, **kwargs):
        out = self.fn(x, **kwargs)
        return out.add(x)


@wrong("q6", "returns_x")
class ResidualSkeleton(_Residual):
    def forward(self, x, **kwargs):
        self.fn(x, **kwargs)
        return x


@wrong("q6", "returns_fn_only")
class ResidualNoSkip(_Residual):
    def forward(self, x, **kwargs):
        x = self.fn(x, **kwargs)
        return x


@wrong("q6", "kwargs_dropped")
class ResidualNoKwargs(_Residual):
    def forward(self, x, **kwargs):
        return x + self.fn(x)


@wrong("q6", "fn_doubled")
class ResidualOverwritten(_Residual):
    def forward(self, x, **kwargs):
        x = self.fn(x, **kwargs)
        res = x
        return x + res


@wrong("q6", "inplace_on_input")
class ResidualInPlace(_Residual):
    def forward(self, x, **kwargs):
        x += self.fn(x, **kwargs)
        return x


@wrong("q6", "residual_detached")
class ResidualDetachedSkip(_Residual):
    def forward(self, x, **kwargs):
        return x.detach() + self.fn(x, **kwargs)


@wrong("q6", says("gradient of the parameter"))
class ResidualNoGrad(_Residual):
    def forward(self, x, **kwargs):
        with torch.no_grad():
            out = self.fn(x, **kwargs)
        return x + out


@wrong("q6", says("float32 although the inputs"))
class ResidualFloat32(_Residual):
    def forward(self, x, **kwargs):
        return x.float() + self.fn(x, **kwargs).float()


@wrong("q6", "kwargs_as_dict")
class ResidualKwargsDict(_Residual):
    def forward(self, x, **kwargs):
        return x + self.fn(x, kwargs)


# =========================================================================== q7 FeedForwardBlock
@right("q7")
class FFNNamedSequential(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or emb_size * expansion
        super().__init__(OrderedDict(fc1=nn.Linear(emb_size, hidden), act=nn.GELU(),
                                     drop=nn.Dropout(p=drop_p), fc2=nn.Linear(hidden, emb_size)))


@right("q7")
class FFNExplicit(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = int(expansion * emb_size) if hidden_dim is None else hidden_dim
        self.lin1 = nn.Linear(emb_size, hidden)
        self.act = nn.GELU()
        self.dropout = nn.Dropout(drop_p)
        self.lin2 = nn.Linear(hidden, emb_size)

    def forward(self, x):
        h = self.act(self.lin1(x))
        h = self.dropout(h)
        return self.lin2(h)


def _ffn(*layers):
    class FeedForwardBlock(nn.Sequential):
        def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
            hidden = hidden_dim or expansion * emb_size         # the notebook's given line
            made = {"up": lambda: nn.Linear(emb_size, hidden), "down": lambda: nn.Linear(hidden, emb_size),
                    "gelu": nn.GELU, "relu": nn.ReLU, "drop": lambda: nn.Dropout(drop_p),
                    "drop_default": nn.Dropout, "up4": lambda: nn.Linear(emb_size, 4 * emb_size),
                    "down4": lambda: nn.Linear(4 * emb_size, emb_size), "same": lambda: nn.Linear(emb_size, emb_size),
                    "up_nobias": lambda: nn.Linear(emb_size, hidden, bias=False),
                    "down_nobias": lambda: nn.Linear(hidden, emb_size, bias=False),
                    "drop_input": lambda: nn.Dropout(drop_p), "gelu_tanh": lambda: nn.GELU(approximate="tanh")}
            super().__init__(*(made[name]() for name in layers))
    return FeedForwardBlock


WRONG += [
    ("q7", _ffn("up", "relu", "drop", "down"), "relu"),
    ("q7", _ffn("up", "gelu_tanh", "drop", "down"), "gelu_tanh"),
    ("q7", _ffn("same", "gelu", "drop", "same"), "no_expansion"),
    ("q7", _ffn("up4", "gelu", "drop", "down4"), "expansion_hardcoded"),
    ("q7", _ffn("up", "gelu", "down"), "no_dropout"),
    ("q7", _ffn("up", "gelu", "down", "drop"), "dropout_last"),
    ("q7", _ffn("up", "gelu", "drop_default", "down"), "dropout_default_p"),
    ("q7", _ffn("up", "drop", "gelu", "down"), "dropout_before_activation"),
    ("q7", _ffn("drop_input", "up", "gelu", "down"), "dropout_on_input"),
    ("q7", _ffn("up_nobias", "gelu", "drop", "down_nobias"), "no_bias"),
]


@wrong("q7", "dropout_always_on")
class FFNDropoutAlwaysOn(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = hidden_dim or expansion * emb_size
        self.fc1, self.fc2 = nn.Linear(emb_size, hidden), nn.Linear(hidden, emb_size)
        self.drop_p = drop_p

    def forward(self, x):
        return self.fc2(F.dropout(F.gelu(self.fc1(x)), self.drop_p))


@wrong("q7", says("frozen"))
class FFNFrozen(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.GELU(), nn.Dropout(drop_p), nn.Linear(hidden, emb_size))
        self[0].weight.requires_grad_(False)


# hidden_dim (FeedForwardBlock(emb_size, expansion=4, drop_p=0.0, hidden_dim=None), vitref's signature, which
# chapters 7 and 8 call as FeedForwardBlock(dim, hidden_dim=mlp_dim)): the answer written before the exercise
# took it, and answers that take it and never use it
@wrong("q7", "hidden_dim_ignored")
class FFNBeforeHiddenDim(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0):
        super().__init__(nn.Linear(emb_size, expansion * emb_size), nn.GELU(), nn.Dropout(drop_p),
                         nn.Linear(expansion * emb_size, emb_size))


@wrong("q7", "hidden_dim_ignored")
class FFNHiddenDimUnused(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        self.up, self.down = nn.Linear(emb_size, emb_size * expansion), nn.Linear(emb_size * expansion, emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        return self.down(self.drop(F.gelu(self.up(x))))


@wrong("q7", "hidden_dim_ignored")
class FFNKwargsSwallowHiddenDim(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, **kwargs):
        super().__init__(nn.Linear(emb_size, expansion * emb_size), nn.GELU(), nn.Dropout(drop_p),
                         nn.Linear(expansion * emb_size, emb_size))


# =========================================================================== q7b TransformerEncoderBlock
@right("q7b")
class BlockExplicit(nn.Module):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, num_heads=8):
        super().__init__()
        self.norm_attn, self.norm_ffn = nn.LayerNorm(emb_size), nn.LayerNorm(emb_size)
        self.attn = MHA(emb_size, num_heads)
        self.ffn = FFN(emb_size, forward_expansion, forward_drop_p)
        self.drop_attn, self.drop_ffn = nn.Dropout(drop_p), nn.Dropout(drop_p)

    def forward(self, x):
        x = x + self.drop_attn(self.attn(self.norm_attn(x)))
        x = x + self.drop_ffn(self.ffn(self.norm_ffn(x)))
        return x


@right("q7b")
class BlockFunctionalDropout(nn.Module):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__()
        self.drop_p = drop_p
        self.ln1, self.mha = nn.LayerNorm(emb_size), MHA(emb_size, **kwargs)
        self.ln2, self.mlp = nn.LayerNorm(emb_size), FFN(emb_size, expansion=forward_expansion, drop_p=forward_drop_p)

    def forward(self, x):
        x = x + F.dropout(self.mha(self.ln1(x)), self.drop_p, self.training)
        return x + F.dropout(self.mlp(self.ln2(x)), self.drop_p, self.training)


@right("q7b")
class BlockResidualModules(nn.Module):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__()
        self.attention = Residual(nn.Sequential(nn.LayerNorm(emb_size), MHA(emb_size, **kwargs), nn.Dropout(drop_p)))
        self.feed_forward = Residual(nn.Sequential(nn.LayerNorm(emb_size),
                                                   FFN(emb_size, forward_expansion, forward_drop_p),
                                                   nn.Dropout(drop_p)))

    def forward(self, x):
        return self.feed_forward(self.attention(x))


def _block(layout):
    """Wrong encoder blocks in the slides' nn.Sequential form; ``layout`` says what is wrong."""
    class TransformerEncoderBlock(nn.Sequential):
        def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
            ln1, ln2 = nn.LayerNorm(emb_size), nn.LayerNorm(emb_size)
            attn = MHA(emb_size) if layout == "no_kwargs" else MHA(emb_size, **kwargs)
            ffn = FFN(emb_size, expansion=forward_expansion, drop_p=forward_drop_p)
            d1, d2 = nn.Dropout(drop_p), nn.Dropout(drop_p)
            if layout == "swapped_drops":
                ffn = FFN(emb_size, expansion=forward_expansion, drop_p=drop_p)
                d1, d2 = nn.Dropout(forward_drop_p), nn.Dropout(forward_drop_p)
            if layout == "ffn_drop_not_passed":
                ffn = FFN(emb_size, forward_expansion)
            if layout == "ffn_relu":
                hidden = forward_expansion * emb_size
                ffn = nn.Sequential(nn.Linear(emb_size, hidden), nn.ReLU(), nn.Dropout(forward_drop_p),
                                    nn.Linear(hidden, emb_size))
            if layout == "shared_norm":
                ln2 = ln1
            branches = {
                "ok": ((ln1, attn, d1), (ln2, ffn, d2)),
                "no_kwargs": ((ln1, attn, d1), (ln2, ffn, d2)),
                "swapped_drops": ((ln1, attn, d1), (ln2, ffn, d2)),
                "ffn_drop_not_passed": ((ln1, attn, d1), (ln2, ffn, d2)),
                "ffn_relu": ((ln1, attn, d1), (ln2, ffn, d2)),
                "shared_norm": ((ln1, attn, d1), (ln2, ffn, d2)),
                "no_dropout": ((ln1, attn), (ln2, ffn)),
                "dropout_first": ((ln1, d1, attn), (ln2, d2, ffn)),
                "ffn_first": ((ln1, ffn, d1), (ln2, attn, d2)),
            }[layout]
            super().__init__(*(Residual(nn.Sequential(*branch)) for branch in branches))
    return TransformerEncoderBlock


WRONG += [
    ("q7b", _block("swapped_drops"), "dropout_swapped"),
    ("q7b", _block("ffn_drop_not_passed"), "forward_drop_p_not_passed"),
    ("q7b", _block("no_dropout"), "no_dropout"),
    ("q7b", _block("dropout_first"), "dropout_before_sublayer"),
    ("q7b", _block("no_kwargs"), "kwargs_not_passed"),
    ("q7b", _block("shared_norm"), "shared_norm"),
    ("q7b", _block("ffn_first"), "ffn_first"),
    ("q7b", _block("ffn_relu"), "ffn_relu"),
]


@wrong("q7b", "post_ln")
class BlockPostLN(nn.Module):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__()
        self.attn, self.norm1 = MHA(emb_size, **kwargs), nn.LayerNorm(emb_size)
        self.ffn, self.norm2 = FFN(emb_size, forward_expansion, forward_drop_p), nn.LayerNorm(emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.ffn(x)))


@wrong("q7b", "no_residual")
class BlockNoResidual(nn.Sequential):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__(nn.LayerNorm(emb_size), MHA(emb_size, **kwargs), nn.Dropout(drop_p),
                         nn.LayerNorm(emb_size), FFN(emb_size, forward_expansion, forward_drop_p), nn.Dropout(drop_p))


@wrong("q7b", "dropout_always_on")
class BlockDropoutAlwaysOn(BlockFunctionalDropout):
    def forward(self, x):
        x = x + F.dropout(self.mha(self.ln1(x)), self.drop_p)
        return x + F.dropout(self.mlp(self.ln2(x)), self.drop_p)


# =========================================================================== layernorm
class _LN(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))


@right("layernorm")
class LayerNormVarMean(_LN):
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


@right("layernorm")
class LayerNormTorchVar(_LN):
    def forward(self, x):
        mean = torch.mean(x, -1, keepdim=True)
        var = torch.var(x, -1, unbiased=False, keepdim=True)
        x_hat = (x - mean) / (var + self.eps) ** 0.5
        return self.weight * x_hat + self.bias


def _ln(body):
    class LayerNorm(_LN):
        def forward(self, x):
            return body(self, x)
    return LayerNorm


def _centred(x):
    return x - x.mean(-1, keepdim=True)


WRONG += [
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt(torch.var(x, -1, keepdim=True) + s.eps) * s.weight
                      + s.bias), "unbiased_variance"),
    ("layernorm", _ln(lambda s, x: _centred(x) / (x.std(-1, keepdim=True) + s.eps) * s.weight + s.bias),
     "std_unbiased_eps_outside"),
    ("layernorm", _ln(lambda s, x: _centred(x) / (x.std(-1, keepdim=True, unbiased=False) + s.eps) * s.weight
                      + s.bias), "eps_outside_sqrt"),
    ("layernorm", _ln(lambda s, x: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + s.eps) * s.weight + s.bias),
     "all_axes"),
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt(_centred(x).pow(2).mean(-1, keepdim=True) + s.eps)
                      * s.bias + s.weight), "weight_bias_swapped"),
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt((x ** 2).mean(-1, keepdim=True) + s.eps) * s.weight
                      + s.bias), "variance_not_centred"),
    ("layernorm", _ln(lambda s, x: x / torch.sqrt(_centred(x).pow(2).mean(-1, keepdim=True) + s.eps) * s.weight
                      + s.bias), "not_centred"),
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt(_centred(x).pow(2).mean(-1, keepdim=True) + 1e-5)
                      * s.weight + s.bias), "eps_hardcoded"),
    ("layernorm", _ln(lambda s, x: (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + s.eps) * s.weight
                      + s.bias), "keepdim_missing"),
    ("layernorm", _ln(lambda s, x: (x - x.mean((-2, -1), keepdim=True))
                      / torch.sqrt(x.var((-2, -1), keepdim=True, unbiased=False) + s.eps) * s.weight + s.bias),
     "last_two_axes"),
    ("layernorm", _ln(lambda s, x: (x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, keepdim=True, unbiased=False)
                                                                               + s.eps) * s.weight + s.bias),
     "first_axis"),
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt(_centred(x).pow(2).mean(-1, keepdim=True) + s.eps)),
     "no_affine"),
    ("layernorm", _ln(lambda s, x: _centred(x) / torch.sqrt(_centred(x).pow(2).mean(-1, keepdim=True) + s.eps)
                      * s.weight.detach() + s.bias), says("gradient of the parameter weight")),
]


# =========================================================================== post_ln_block
class _Post(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MHA(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.mlp = FFN(emb_size, expansion=forward_expansion)
        self.norm2 = nn.LayerNorm(emb_size)


@right("post_ln_block")
class PostSteps(_Post):
    def forward(self, x):
        attn_out = self.attn(x)
        x = x + attn_out
        x = self.norm1(x)
        mlp_out = self.mlp(x)
        return self.norm2(mlp_out + x)


def _post(body):
    class PostLNEncoderBlock(_Post):
        def forward(self, x):
            return body(self, x)
    return PostLNEncoderBlock


def _post_first(s, x):
    return s.norm1(x + s.attn(x))


WRONG += [
    ("post_ln_block", _post(lambda s, x: (lambda h: h + s.mlp(s.norm2(h)))(x + s.attn(s.norm1(x)))), "pre_ln"),
    ("post_ln_block", _post(lambda s, x: s.norm2(s.mlp(s.norm1(s.attn(x))))), "no_residual"),
    ("post_ln_block", _post(lambda s, x: (lambda h: h + s.norm2(s.mlp(h)))(x + s.norm1(s.attn(x)))),
     "residual_after_norm"),
    ("post_ln_block", _post(lambda s, x: (lambda h: s.norm1(h + s.mlp(h)))(_post_first(s, x))), "norm_reused"),
    ("post_ln_block", _post(lambda s, x: s.norm2(_post_first(s, x) + s.mlp(x))), "mlp_on_input"),
    ("post_ln_block", _post(lambda s, x: s.norm2(x + s.mlp(_post_first(s, x)))), "residual_from_input"),
    ("post_ln_block", _post(lambda s, x: (lambda h: s.norm2(h + s.attn(h)))(s.norm1(x + s.mlp(x)))), "ffn_first"),
    ("post_ln_block", _post(lambda s, x: (lambda h: h + s.mlp(h))(_post_first(s, x))), "missing_second_norm"),
    ("post_ln_block", _post(lambda s, x: (lambda h: (lambda g: g + s.mlp(g))(s.norm2(h)))(
        (lambda n: n + s.attn(n))(s.norm1(x)))), "norm_then_residual"),
    ("post_ln_block", _post(lambda s, x: S.PostLNEncoderBlock.forward(s, x).float()),
     says("float32 although the inputs")),
]


@wrong("post_ln_block", says("frozen"))
class PostFrozenNorm(_Post):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__(emb_size, num_heads, forward_expansion)
        self.norm2.requires_grad_(False)

    def forward(self, x):
        return S.PostLNEncoderBlock.forward(self, x)


# =========================================================================== q2, q3, q4 PatchEmbedding
class _Embed(nn.Module):
    """The notebook's PatchEmbedding (the final version takes img_size)."""

    pattern = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"
    bias = True
    features = "ppc"

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.patch_size = patch_size
        if self.features == "swapped":                  # nn.Linear(emb_size, P*P*C)
            linear = nn.Linear(emb_size, patch_size * patch_size * in_channels)
        else:                                           # "pp": nn.Linear(P*P, emb_size)
            features = patch_size * patch_size * (in_channels if self.features == "ppc" else 1)
            linear = nn.Linear(features, emb_size, bias=self.bias)
        self.projection = nn.Sequential(Rearrange(self.pattern, s1=patch_size, s2=patch_size), linear)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        num_patches = (img_size // patch_size) ** 2
        self.learnable_positions = nn.Parameter(torch.randn(num_patches + 1, emb_size))
        self.register_buffer("sinusoids_positions", self.table(num_patches, emb_size, patch_size))

    def table(self, num_patches, emb_size, patch_size):
        return torch.from_numpy(getPositionEncoding(num_patches + 1, emb_size)).float()

    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
        x = torch.cat([cls_tokens, x], dim=1)
        return self.add_positions(x)

    def add_positions(self, x):
        return x + self.sinusoids_positions


def _embed(**attrs):
    return type("PatchEmbedding", (_Embed,), attrs)


class _Projection(nn.Module):
    def __init__(self, fn, in_features, emb_size):
        super().__init__()
        self.fn, self.linear = fn, nn.Linear(in_features, emb_size)

    def forward(self, images):
        return self.linear(self.fn(images))


def _patches_unfold(images, p):
    b = images.shape[0]
    patches = images.unfold(2, p, p).unfold(3, p, p)                       # (B, C, h, w, P, P)
    return patches.permute(0, 2, 3, 4, 5, 1).reshape(b, -1, patches.shape[1] * p * p)


def _patches_reshape(images, p):
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // p, p, w // p, p)                       # (B, C, h, P, w, P)
    return grid.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


@right("q2", "q3", "q4")
class EmbedUnfold(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = _Projection(lambda x: _patches_unfold(x, patch_size),
                                      patch_size * patch_size * in_channels, emb_size)


@right("q2", "q3", "q4")
class EmbedReshape(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = _Projection(lambda x: _patches_reshape(x, patch_size),
                                      patch_size * patch_size * in_channels, emb_size)


right("q2", "q3", "q4")(_embed(pattern="batch chan (rows s1) (cols s2) -> batch (rows cols) (s1 s2 chan)"))


@right("q3")
class EmbedExpand(nn.Module):
    """The Q3 notebook class (no img_size, no positions); the class token expanded."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__()
        self.projection = nn.Sequential(Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size,
                                                  s2=patch_size),
                                        nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), 1)


@right("q3")
class EmbedRepeatMethod(EmbedExpand):
    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.repeat(x.size(0), 1, 1), x], dim=1)


@right("q3")
class EmbedFlatClsToken(EmbedExpand):
    """A class token stored as (emb_size,)."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__(in_channels, patch_size, emb_size)
        self.cls_token = nn.Parameter(torch.randn(emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(x.shape[0], 1, -1), x], dim=1)


@right("q4")
class EmbedPlainAttribute(_Embed):
    """The table kept as a plain float32 attribute (as the slides do) and added in place."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        del self.sinusoids_positions
        self.sinusoids_positions = torch.from_numpy(getPositionEncoding((img_size // patch_size) ** 2 + 1,
                                                                        emb_size)).float()

    def add_positions(self, x):
        x += self.sinusoids_positions
        return x


@right("q4")
class EmbedBatchedTable(_Embed):
    def table(self, num_patches, emb_size, patch_size):
        return torch.tensor(getPositionEncoding(seq_len=num_patches + 1, d=emb_size),
                            dtype=torch.float32).unsqueeze(0)      # (1, N + 1, E)


WRONG += [
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (h w) (c s1 s2)"), "channels_first"),
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (h w) (s2 s1 c)"), "transposed_patch"),
    ("q2", _embed(pattern="b c (h s2) (w s1) -> b (h w) (s1 s2 c)"), "transposed_patch"),
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)"), "column_order"),
    ("q2", _embed(pattern="b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)"), "interleaved"),
    ("q2", _embed(features="pp"), "in_features_without_channels"),
    ("q2", _embed(features="swapped"), "linear_swapped"),
    ("q2", _embed(bias=False), "no_bias"),
    ("q3", _embed(pattern="b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)"), "interleaved"),
    ("q4", _embed(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)"), "column_order"),
]


@wrong("q2", "channels_first")
class EmbedNnUnfold(_Embed):
    """nn.Unfold flattens a patch channel-major, (c s1 s2)."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = nn.Sequential(nn.Unfold(kernel_size=patch_size, stride=patch_size),
                                        Rearrange("b f n -> b n f"),
                                        nn.Linear(patch_size * patch_size * in_channels, emb_size))


@wrong("q2", "reshape_only")
class EmbedReshapeOnly(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        p = patch_size
        self.projection = _Projection(lambda x: x.reshape(x.shape[0], (x.shape[2] // p) * (x.shape[3] // p), -1),
                                      p * p * in_channels, emb_size)


class _Q3(EmbedExpand):
    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        return self.join(self.cls_token, x, b)


def _q3(join):
    return type("PatchEmbedding", (_Q3,), {"join": staticmethod(join)})


WRONG += [
    ("q3", _q3(lambda cls, x, b: torch.cat([cls, x], dim=1)), "cls_not_repeated"),
    ("q3", _q3(lambda cls, x, b: torch.cat([x, repeat(cls, "() n e -> b n e", b=b)], dim=1)), "cls_at_end"),
    ("q3", _q3(lambda cls, x, b: x + repeat(cls, "() n e -> b n e", b=b)), "cls_added"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls, "() n e -> n b e", b=b), x], dim=1)), "cls_not_repeated"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls, "() n e -> b n e", b=b), x], dim=-1)),
     "cls_cat_wrong_dim"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls.detach(), "() n e -> b n e", b=b), x], dim=1)),
     says("gradient of the parameter cls_token")),
    ("q3", _q3(lambda cls, x, b: torch.cat([torch.zeros(b, 1, x.shape[-1], dtype=x.dtype), x], dim=1)),
     says("gradient of the parameter cls_token")),
]


def _q4(add=None, table=None):
    attrs = {}
    if add is not None:
        attrs["add_positions"] = add
    if table is not None:
        attrs["table"] = table
    return _embed(**attrs)


def _before_cls_forward(self, x):
    x = self.projection(x) + self.sinusoids_positions
    return torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)


def _cls_without_position(self, x):
    return torch.cat([x[:, :1], x[:, 1:] + self.sinusoids_positions[1:]], dim=1)


WRONG += [
    ("q4", _q4(add=lambda self, x: x + self.learnable_positions), "learned_positions"),
    ("q4", _q4(add=lambda self, x: x), "no_positions"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n, e)).float()),
     "seq_len_num_patches"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(e, n + 1)).float()),
     "swapped_arguments"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(e, n + 1)).float().T),
     "swapped_arguments"),
    # with chapter 2's own loop version (an odd width leaves the last column 0), the transposed table fits
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(S.getPositionEncoding(e, n + 1)).float().T),
     says("the table of positions")),
    ("q4", _q4(add=lambda self, x: x + self.learnable_positions + self.sinusoids_positions), "both_positions"),
    ("q4", _q4(add=_cls_without_position), "cls_without_position"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n + 1, e, p)).float()),
     "base_not_default"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n + 2, e)[1:]).float()),
     "positions_from_one"),
    ("q4", type("PatchEmbedding", (_Embed,), {"forward": _before_cls_forward,
                                              "table": lambda self, n, e, p: torch.from_numpy(
                                                  getPositionEncoding(n, e)).float()}), "positions_before_cls"),
    ("q4", type("PatchEmbedding", (_Embed,), {"forward": lambda self, x: self.add_positions(torch.cat(
        [self.projection(x), repeat(self.cls_token, "() n e -> b n e", b=x.shape[0])], dim=1))}), "cls_at_end"),
]


# =========================================================================== conv_patch_embedding
class _Conv(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)


@right("conv_patch_embedding")
class ConvPermute(_Conv):
    def forward(self, images):
        grid = self.proj(images)
        b, e, h, w = grid.shape
        return grid.permute(0, 2, 3, 1).reshape(b, h * w, e)


@right("conv_patch_embedding")
class ConvView(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.patcher = nn.Conv2d(in_channels, emb_size, patch_size, patch_size)

    def forward(self, images):
        out = self.patcher(images)
        return out.view(out.shape[0], out.shape[1], -1).permute(0, 2, 1)


@right("conv_patch_embedding")
class ConvSequential(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.embed = nn.Sequential(nn.Conv2d(in_channels, emb_size, patch_size, stride=patch_size),
                                   Rearrange("b e gh gw -> b (gh gw) e"))

    def forward(self, images):
        return self.embed(images)


def _conv(flatten, **conv):
    class ConvPatchEmbedding(nn.Module):
        def __init__(self, in_channels, patch_size, emb_size):
            super().__init__()
            options = {"kernel_size": patch_size, "stride": patch_size, **conv}
            if options.pop("swap", False):
                in_channels, emb_size = emb_size, in_channels
            if options.get("stride") == "default":
                del options["stride"]
            self.proj = nn.Conv2d(in_channels, emb_size, **options)

        def forward(self, images):
            return flatten(self.proj(images))
    return ConvPatchEmbedding


def _rows(grid):
    return rearrange(grid, "b e h w -> b (h w) e")


WRONG += [
    ("conv_patch_embedding", _conv(_rows, stride="default"), "stride_one"),
    ("conv_patch_embedding", _conv(lambda g: rearrange(g, "b e h w -> b (w h) e")), "column_order"),
    ("conv_patch_embedding", _conv(lambda g: rearrange(g, "b e w h -> b (h w) e")), "column_order"),
    ("conv_patch_embedding", _conv(lambda g: g.flatten(2)), "channels_not_last"),
    ("conv_patch_embedding", _conv(lambda g: g.reshape(g.shape[0], -1, g.shape[1])), "reshape_no_permute"),
    ("conv_patch_embedding", _conv(_rows, bias=False), "no_bias"),
    ("conv_patch_embedding", _conv(_rows, swap=True), "conv_channels_swapped"),
    ("conv_patch_embedding", _conv(lambda g: _rows(g).detach()), says("does not depend differentiably")),
    ("conv_patch_embedding", _conv(lambda g: _rows(g).float()), says("float32 although the inputs")),
]


@right("q7")
class FFNInplaceDropout(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim if hidden_dim is not None else expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.GELU(), nn.Dropout(drop_p, inplace=True),
                         nn.Linear(hidden, emb_size))


@right("q7b")
class BlockSlidesWithOwnParts(nn.Sequential):
    """The slides' form with the chapter's own Q6/Q7 answers written differently."""

    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__(
            ResidualOutAdd(nn.Sequential(nn.LayerNorm(emb_size), MHA(emb_size, **kwargs), nn.Dropout(drop_p))),
            ResidualOutAdd(nn.Sequential(nn.LayerNorm(emb_size), FFNExplicit(emb_size, forward_expansion,
                                                                             forward_drop_p), nn.Dropout(drop_p))))


# Named by the diagnoses (no catalogue entry matches them):
@wrong("q6", says("gradient with respect to x is not"))
class ResidualDetachedBranch(_Residual):
    def forward(self, x, **kwargs):
        return x + self.fn(x.detach(), **kwargs)


WRONG.append(("q7", _ffn("up", "gelu", "drop", "down", "drop"), says("In training mode with drop_p=1.0")))
