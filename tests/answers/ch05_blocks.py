"""Answer banks of Chapter 5 (blocks): q6, q7, q7b, layernorm, post_ln_block.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .given import MultiHeadAttention
from .bank import lacks, right, says, solution, solution_value, variant, wrong, wrong_rows
from .ch04_multihead_attention import MHAHeadMajorLayout, MHASeparate


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("q6")
class ResidualAdd(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        # Q6. Return the residual sum of x and self.fn(x).
        ### BEGIN SOLUTION
        return x + self.fn(x, **kwargs)
        ### END SOLUTION


@solution("q7")
class FeedForwardBlock(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size  # the hidden width: hidden_dim if given, else expansion * emb_size
        # Q7. Fill in the input and output sizes of the two linear layers.
        ### BEGIN SOLUTION
        expand = nn.Linear(emb_size, hidden)
        shrink = nn.Linear(hidden, emb_size)
        ### END SOLUTION
        super().__init__(expand, nn.GELU(), nn.Dropout(drop_p), shrink)


@solution("q7b")
class TransformerEncoderBlock(nn.Sequential):
    def __init__(self, emb_size=768, num_heads=8, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0,
                 mlp_dim=None):
        # Q7b. Build the two residual sub-layers: LayerNorm -> attention -> Dropout, and
        # LayerNorm -> feed-forward -> Dropout, each wrapped in ResidualAdd.
        ### BEGIN SOLUTION
        attention_sublayer = ResidualAdd(nn.Sequential(
            nn.LayerNorm(emb_size),
            MultiHeadAttention(emb_size, num_heads),
            nn.Dropout(drop_p),
        ))
        mlp_sublayer = ResidualAdd(nn.Sequential(
            nn.LayerNorm(emb_size),
            FeedForwardBlock(emb_size, forward_expansion, forward_drop_p, hidden_dim=mlp_dim),
            nn.Dropout(drop_p),
        ))
        ### END SOLUTION
        super().__init__(attention_sublayer, mlp_sublayer)


@solution("layernorm")
class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        # x: (..., dim)
        ### BEGIN SOLUTION
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
        ### END SOLUTION


@solution("post_ln_block")
class PostLNEncoderBlock(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.mlp = FeedForwardBlock(emb_size, expansion=forward_expansion)
        self.norm2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        # x: (B, N, emb_size)
        ### BEGIN SOLUTION
        x = self.norm1(x + self.attn(x))
        x = self.norm2(x + self.mlp(x))
        return x
        ### END SOLUTION


mlp_to_attention = solution_value("concept_mlp_share", 2.0)


warmup_option = solution_value("concept_warmup", 2)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- q6
@variant("q6")
class ResidualFirst(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


@variant("q6")
class ResidualClone(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        out = x.clone()
        out += self.fn(x, **kwargs)
        return out


# ----------------------------------------------------------------- q7
@variant("q7")
class FFNModule(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = expansion * emb_size if hidden_dim is None else hidden_dim
        self.fc1 = nn.Linear(emb_size, hidden)
        self.fc2 = nn.Linear(hidden, emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        return self.fc2(self.drop(F.gelu(self.fc1(x))))


@variant("q7")
class FFNFunctionalDropout(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = hidden_dim if hidden_dim else emb_size * expansion
        self.up, self.down, self.drop_p = nn.Linear(emb_size, hidden), nn.Linear(hidden, emb_size), drop_p

    def forward(self, x):
        return self.down(F.dropout(F.gelu(self.up(x)), self.drop_p, training=self.training))


# ----------------------------------------------------------------- q7b
@variant("q7b")
class EncoderBlockModule(nn.Module):
    """Pre-LN with named sub-modules and separate q/k/v attention layers."""

    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, num_heads=8):
        super().__init__()
        self.ln1 = nn.LayerNorm(emb_size)
        self.attention = MHASeparate(emb_size, num_heads)
        self.ln2 = nn.LayerNorm(emb_size)
        self.ffn = FFNModule(emb_size, forward_expansion, forward_drop_p)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.drop(self.ffn(self.ln2(x)))


@variant("q7b")
class EncoderBlockHeadMajor(nn.Sequential):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__(
            ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), MHAHeadMajorLayout(emb_size, **kwargs),
                                        nn.Dropout(drop_p))),
            ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size),
                                        FeedForwardBlock(emb_size, forward_expansion, forward_drop_p),
                                        nn.Dropout(drop_p))),
        )


# ----------------------------------------------------------------- layernorm
@variant("layernorm")
class LayerNormGammaBeta(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(var + self.eps) + self.beta


@variant("layernorm")
class LayerNormFloat64(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        x = x.double()
        centred = x - x.mean(dim=-1, keepdim=True)
        std = torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return centred / std * self.weight.double() + self.bias.double()


# ----------------------------------------------------------------- post_ln_block
@variant("post_ln_block")
class PostLNOtherNames(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.mha = MHASeparate(emb_size, num_heads)
        self.ln1 = nn.LayerNorm(emb_size)
        self.ffn = FFNModule(emb_size, forward_expansion)
        self.ln2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        h = self.ln1(x + self.mha(x))
        return self.ln2(h + self.ffn(h))


# ----------------------------------------------------------------- other parameter names and shapes
@variant("layernorm")
class LayerNormOtherNames(nn.Module):
    def __init__(self, features, epsilon=1e-5):
        super().__init__()
        self.epsilon = epsilon
        self.scale = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, correction=0)
        return self.scale * (x - mean) / (var + self.epsilon).sqrt() + self.shift


# ####################################################################################################
# realistic answers
# The building blocks these answers use: the MultiHeadAttention chapter 5's notebook gives (given.py) and
# the chapter's solutions (ResidualAdd, FeedForwardBlock).
MHA, FFN, Residual = MultiHeadAttention, FeedForwardBlock, ResidualAdd


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


@wrong("q6", says("float32's precision only"))
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


wrong_rows([
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
])


@wrong("q7", ("dropout_always_on", says("eval mode"), says("drop_p=0.5")))
class FFNDropoutAlwaysOn(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = hidden_dim or expansion * emb_size
        self.fc1, self.fc2 = nn.Linear(emb_size, hidden), nn.Linear(hidden, emb_size)
        self.drop_p = drop_p

    def forward(self, x):
        return self.fc2(F.dropout(F.gelu(self.fc1(x)), self.drop_p))


@wrong("q7", says("would never be trained"))
class FFNFrozen(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.GELU(), nn.Dropout(drop_p), nn.Linear(hidden, emb_size))
        self[0].weight.requires_grad_(False)


# hidden_dim (FeedForwardBlock(emb_size, expansion=4, drop_p=0.0, hidden_dim=None), vitref's signature, which
# chapters 7 and 8 call as FeedForwardBlock(dim, hidden_dim=mlp_dim)): the answer written before the exercise
# took it, and answers that take it and never use it: right on every input but the hidden_dim one (only
# that input fails), named by the mistake
HIDDEN_DIM_IGNORED = ("hidden_dim_ignored", says("hidden_dim ignored"),
                      says("On input FeedForwardBlock(6, hidden_dim=10)"), lacks("input sets fail"))


@wrong("q7", HIDDEN_DIM_IGNORED)
class FFNBeforeHiddenDim(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0):
        super().__init__(nn.Linear(emb_size, expansion * emb_size), nn.GELU(), nn.Dropout(drop_p),
                         nn.Linear(expansion * emb_size, emb_size))


@wrong("q7", HIDDEN_DIM_IGNORED)
class FFNHiddenDimUnused(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        self.up, self.down = nn.Linear(emb_size, emb_size * expansion), nn.Linear(emb_size * expansion, emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        return self.down(self.drop(F.gelu(self.up(x))))


@wrong("q7", HIDDEN_DIM_IGNORED)
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


wrong_rows([
    ("q7b", _block("swapped_drops"), "dropout_swapped"),
    ("q7b", _block("ffn_drop_not_passed"), "forward_drop_p_not_passed"),
    ("q7b", _block("no_dropout"), "no_dropout"),
    ("q7b", _block("dropout_first"), "dropout_before_sublayer"),
    ("q7b", _block("no_kwargs"), "kwargs_not_passed"),
    ("q7b", _block("shared_norm"), "shared_norm"),
    ("q7b", _block("ffn_first"), "ffn_first"),
    ("q7b", _block("ffn_relu"), "ffn_relu"),
])


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


wrong_rows([
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
])


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


wrong_rows([
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
    ("post_ln_block", _post(lambda s, x: PostLNEncoderBlock.forward(s, x).float()),
     says("float32's precision only")),
])


@wrong("post_ln_block", says("would never be trained"))
class PostFrozenNorm(_Post):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__(emb_size, num_heads, forward_expansion)
        self.norm2.requires_grad_(False)

    def forward(self, x):
        return PostLNEncoderBlock.forward(self, x)


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


wrong_rows([("q7", _ffn("up", "gelu", "drop", "down", "drop"), says("In training mode with drop_p=1.0"))])


# ####################################################################################################
# classes of the instructor's hidden collection, named by the counterfactuals of the reference blocks:
# a residual dropped around one branch, the two norms swapped, a residual that multiplies or subtracts,
# ReLU for GELU, a norm over the token axis; and a block whose forward returns a tuple
class _Branch(nn.Module):
    """A sub-layer without a residual connection around it (the slides' ResidualAdd left out)."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x, **kwargs):
        return self.layers(x)


@wrong("q7b", ("residual_dropped", says("around the feed-forward block")))
class BlockNoResidualAroundMlp(nn.Sequential):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__(
            ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), MultiHeadAttention(emb_size, **kwargs),
                                        nn.Dropout(drop_p))),
            _Branch(nn.LayerNorm(emb_size), FeedForwardBlock(emb_size, forward_expansion, forward_drop_p),
                    nn.Dropout(drop_p)),
        )


class _BlockModule(nn.Module):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, num_heads=8):
        super().__init__()
        self.norm1 = nn.LayerNorm(emb_size)
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm2 = nn.LayerNorm(emb_size)
        self.mlp = FeedForwardBlock(emb_size, forward_expansion, forward_drop_p)
        self.drop = nn.Dropout(drop_p)


@wrong("q7b", ("residual_dropped", says("around the attention")))
class BlockAttentionOverwritesX(_BlockModule):
    def forward(self, x):
        x = self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


@wrong("q7b", ("norms_swapped", says("norm1 and norm2")))
class BlockNormsSwapped(_BlockModule):
    def forward(self, x):
        x = x + self.drop(self.attn(self.norm2(x)))
        return x + self.drop(self.mlp(self.norm1(x)))


@wrong("q7b", ("residual_subtracts", says("around the feed-forward block")))
class BlockMlpResidualSubtracted(_BlockModule):
    def forward(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x - self.drop(self.mlp(self.norm2(x)))


@wrong("q7b", ("returns_a_tuple", says("should return the output tensor alone")))
class BlockReturnsWeightsToo(_BlockModule):
    def forward(self, x):
        out, weights = self.attn(self.norm1(x), return_attention=True)
        x = x + self.drop(out)
        return x + self.drop(self.mlp(self.norm2(x))), weights


@wrong("post_ln_block", ("residual_dropped", says("around the attention")))
class PostNoResidualAroundAttention(_Post):
    def forward(self, x):
        x = self.norm1(self.attn(x))
        return self.norm2(x + self.mlp(x))


@wrong("post_ln_block", ("residual_dropped", says("around the feed-forward block")))
class PostNoResidualAroundMlp(_Post):
    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(self.mlp(x))


@wrong("post_ln_block", ("norms_swapped", says("norm1 and norm2")))
class PostNormsSwapped(_Post):
    def forward(self, x):
        x = self.norm2(x + self.attn(x))
        return self.norm1(x + self.mlp(x))


@wrong("post_ln_block", ("residual_multiplies", says("around both sub-layers")))
class PostResidualProducts(_Post):
    def forward(self, x):
        x = self.norm1(x * self.attn(x))
        return self.norm2(x * self.mlp(x))


@wrong("post_ln_block", ("residual_subtracts", says("around the attention")))
class PostAttentionSubtracted(_Post):
    def forward(self, x):
        x = self.norm1(x - self.attn(x))
        return self.norm2(x + self.mlp(x))


class _ReluFFN(nn.Sequential):
    """A feed-forward block written with ReLU (the student's own, reused by the post-LN block)."""

    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.ReLU(), nn.Dropout(drop_p), nn.Linear(hidden, emb_size))


@wrong("post_ln_block", "relu_for_gelu")
class PostWithReluMlp(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.mlp = _ReluFFN(emb_size, expansion=forward_expansion)
        self.norm2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


@wrong("post_ln_block", "relu_for_gelu")
class PostFunctionalRelu(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.fc1 = nn.Linear(emb_size, forward_expansion * emb_size)
        self.fc2 = nn.Linear(forward_expansion * emb_size, emb_size)
        self.norm2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.fc2(F.relu(self.fc1(x))))


@wrong("post_ln_block", ("returns_a_tuple", says("should return the output tensor alone")))
class PostReturnsBothSums(_Post):
    def forward(self, x):
        h = self.norm1(x + self.attn(x))
        return self.norm2(h + self.mlp(h)), h


@wrong("q6", ("residual_multiplies", says("multiplies")))
class ResidualGate(_Residual):
    def forward(self, x, **kwargs):
        return x * self.fn(x, **kwargs)


@wrong("q6", "residual_subtracts")
class ResidualMinus(_Residual):
    def forward(self, x, **kwargs):
        return x - self.fn(x, **kwargs)


@wrong("q6", "residual_subtracts")
class ResidualSkipSubtracted(_Residual):
    def forward(self, x, **kwargs):
        out = self.fn(x, **kwargs)
        return out - x


@wrong("layernorm", ("norm_over_tokens", says("dim=-2")))
class LayerNormOverTokens(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(dim=-2, keepdim=True)
        var = x.var(dim=-2, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


@wrong("layernorm", ("norm_over_tokens", says("dim=1")))
class LayerNormDimOne(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = torch.mean(x, 1, keepdim=True)
        centred = x - mean
        var = torch.mean(centred ** 2, 1, keepdim=True)
        return self.weight * centred / (var + self.eps).sqrt() + self.bias


@wrong("layernorm", "norm_over_tokens")
class LayerNormTransposed(nn.Module):
    """Normalises the columns of each (N, dim) matrix: the transpose, then the statistics of the last axis."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        t = x.transpose(-1, -2)
        mean = t.mean(-1, keepdim=True)
        std = torch.sqrt(((t - mean) ** 2).mean(-1, keepdim=True) + self.eps)
        return ((t - mean) / std).transpose(-1, -2) * self.weight + self.bias


@wrong("post_ln_block", ("norms_swapped", says("norm1 and norm2")))
class PostNormsByPosition(nn.Module):
    """The norms declared in the other order than they are used."""

    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.mlp = FeedForwardBlock(emb_size, expansion=forward_expansion)
        self.norm2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        attended = self.norm2(x + self.attn(x))          # "the second norm of the block" read as the attention's
        return self.norm1(attended + self.mlp(attended))
