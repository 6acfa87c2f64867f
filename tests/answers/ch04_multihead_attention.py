"""Answer banks of Chapter 4 (multi-head attention): q5, mha_loop.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .ch03_attention import scaled_dot_product_attention
from .given import AttentionHead
from .given import MultiHeadAttention as GivenMultiHeadAttention
from .bank import right, says, solution, solution_value, variant, wrong, wrong_list
from .ch03_attention import HeadNoHelper, HeadRawParameters


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("q5")
class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)     # queries, keys, values of all heads
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        # x: (B, N, emb_size)
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]                  # each (B, h, N, d)
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)      # (B, h, N, N)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)                       # (B, h, N, N)
        att = self.att_drop(att)
        # Q5. Fill in the blanks of einsum: sum up over the third axis,
        # then rearrange the heads back into one vector per token: fill in the strings
        # einsum_output and merge_heads.
        ### BEGIN SOLUTION
        einsum_output = "bhav"
        merge_heads = "b h n d -> b n (h d)"
        ### END SOLUTION
        out = torch.einsum("bhal, bhlv -> " + einsum_output, att, values)   # (B, h, N, d)
        out = rearrange(out, merge_heads)                                   # (B, N, h*d)
        out = self.projection(out)                                      # (B, N, emb_size)
        return out


@solution("mha_loop")
class MultiHeadAttentionLoop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        # x: (B, N, emb_size)
        ### BEGIN SOLUTION
        outputs, weights = [], []
        for head in self.heads:
            out, w = head(x, mask)                  # (B, N, head_dim), (B, N, N)
            outputs.append(out)
            weights.append(w)
        out = self.projection(torch.cat(outputs, dim=-1))   # (B, N, emb_size)
        weights = torch.stack(weights, dim=1)               # (B, num_heads, N, N)
        ### END SOLUTION
        return (out, weights) if return_attention else out


heads_param_factor = solution_value("concept_heads_params", 1)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- q5
@variant("q5")
class MHASeparate(nn.Module):
    """Separate query/key/value layers (an earlier version of the slides' code)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.keys = nn.Linear(emb_size, emb_size)
        self.queries = nn.Linear(emb_size, emb_size)
        self.values = nn.Linear(emb_size, emb_size)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        queries = rearrange(self.queries(x), "b n (h d) -> b h n d", h=self.num_heads)
        keys = rearrange(self.keys(x), "b n (h d) -> b h n d", h=self.num_heads)
        values = rearrange(self.values(x), "b n (h d) -> b h n d", h=self.num_heads)
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@variant("q5")
class MHAHeadMajorLayout(nn.Module):
    """The fused projection laid out (h d qkv), as in the slides' source."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (h d qkv) -> (qkv) b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = torch.where(mask.bool(), energy, torch.tensor(-1e9, dtype=energy.dtype))
        att = self.att_drop(F.softmax(energy, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@variant("q5")
class MHAPermute(nn.Module):
    """No einops: reshape/permute and matmul, head_dim scaling written as a multiplier."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h, self.d, self.p = num_heads, emb_size // num_heads, dropout
        self.in_proj = nn.Linear(emb_size, 3 * emb_size)
        self.out_proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        b, n, e = x.shape
        q, k, v = self.in_proj(x).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * self.d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.p, training=self.training)
        out = (weights @ v).transpose(1, 2).reshape(b, n, e)
        return self.out_proj(out)


# ----------------------------------------------------------------- mha_loop
@variant("mha_loop")
class LoopStack(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        outs = torch.stack([out for out, _ in results])                        # (h, B, N, d)
        out = self.projection(rearrange(outs, "h b n d -> b n (h d)"))
        return (out, torch.stack([w for _, w in results], dim=1)) if return_attention else out


@wrong("mha_loop", "return_attention_always_tuple")
class LoopRawHeads(nn.Module):
    """Raw-parameter heads, W_O; always a tuple."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(HeadRawParameters(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.W_O = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outs, weights = zip(*(head(x, mask) for head in self.heads))
        return self.W_O(torch.cat(outs, dim=-1)), (torch.stack(weights, 1) if return_attention else None)


# ####################################################################################################
# realistic answers (first set)
# =============================================================================== q5
class _MHA(nn.Module):
    """The exercise's __init__ (qkv, att_drop, projection)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def attention(self, x, mask=None, fill=-1e9):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, fill)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        return att, values


@right("q5")
class MHATransposeReshape(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        b, h, n, d = out.shape
        return self.projection(out.transpose(1, 2).contiguous().view(b, n, h * d))


@right("q5")
class MHAChunk(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        att = self.drop(scores.softmax(dim=-1))
        return self.proj(rearrange(att @ v, "b h n d -> b n (h d)"))


@right("q5")
class MHAInfZeroRows(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        att = self.att_drop(torch.nan_to_num(att, nan=0.0))
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@right("q5")
class MHASeparateMasked(MHASeparate):
    """variants.MHASeparate with the mask applied."""

    def forward(self, x, mask=None):
        queries = rearrange(self.queries(x), "b n (h d) -> b h n d", h=self.num_heads)
        keys = rearrange(self.keys(x), "b n (h d) -> b h n d", h=self.num_heads)
        values = rearrange(self.values(x), "b n (h d) -> b h n d", h=self.num_heads)
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@right("q5")
class MHAHeadMajorMasked(MHAHeadMajorLayout):
    """variants.MHAHeadMajorLayout ((h d qkv) layout) with the mask applied."""

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (h d qkv) -> (qkv) b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1]) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy, dim=-1))
        return self.projection(rearrange(torch.einsum("bhal, bhlv -> bhav", att, qkv[2]), "b h n d -> b n (h d)"))


@right("q5")
class MHAPermuteMaskedDropout(MHAPermute):
    """variants.MHAPermute with the mask and the dropout (F.dropout with training=self.training)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        b, n, e = x.shape
        q, k, v = self.in_proj(x).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * self.d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.p, training=self.training)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, n, e))


class _MHAWrong(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "merge_d_h")
class MHAMergeDH(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (d h)"))


@wrong("q5", "reshape_without_permute")
class MHAReshape(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.reshape(x.shape[0], x.shape[1], self.emb_size))


@wrong("q5", "transpose_wrong_axes")
class MHATransposeWrong(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.transpose(-1, -2).reshape(x.shape[0], x.shape[1], -1))


@wrong("q5", "einsum_keeps_keys")
class MHAEinsumKeys(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhlv", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "einsum_wrong_axis")
class MHAEinsumQueries(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhla, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_in_eval")
class MHAFunctionalDropout(_MHA):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = F.dropout(att, self.p)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_missing")
class MHANoDropout(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_on_output")
class MHADropoutAtEnd(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.att_drop(self.projection(rearrange(out, "b h n d -> b n (h d)")))


@wrong("q5", "scale_by_emb")
class MHAScaleEmb(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / self.emb_size ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "nan_fully_masked")
class MHAMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "mask_ignored")
class MHAIgnoresMask(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", says("the gradient of the parameter qkv.weight"))
class MHADetachedQKV(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x).detach(), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "no_bias")
class MHANoBias(_MHAWrong):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.qkv = nn.Linear(emb_size, emb_size * 3, bias=False)


@wrong("q5", "dropout_before_softmax")
class MHADropEnergy(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        energy = self.att_drop(energy / (self.emb_size // self.num_heads) ** 0.5)
        out = torch.einsum("bhal, bhlv -> bhav", F.softmax(energy, dim=-1), qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "mask_inverted")
class MHAMaskWhereTrue(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, None if mask is None else (mask == 0))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


# =============================================================================== mha_loop
class _Loop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)


@right("mha_loop")
class LoopZip(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        outs, maps = zip(*[head(x, mask) for head in self.heads])
        out = self.projection(torch.cat(outs, dim=2))
        if return_attention:
            return out, torch.stack(maps, 1)
        return out


@right("mha_loop")
class LoopEinops(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask=mask) for head in self.heads]
        out = rearrange(torch.stack([r[0] for r in results]), "h b n d -> b n (h d)")
        weights = rearrange(torch.stack([r[1] for r in results]), "h b n m -> b h n m")
        return (self.projection(out), weights) if return_attention else self.projection(out)


@right("mha_loop")
class LoopStackFixed(LoopStack):
    """variants.LoopStack honouring return_attention."""

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(rearrange(torch.stack([r[0] for r in results]), "h b n d -> b n (h d)"))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@right("mha_loop")
class LoopRawHeadsFixed(LoopRawHeads):
    """LoopRawHeads returning the weights only when asked."""

    def forward(self, x, mask=None, return_attention=False):
        pairs = [head(x, mask) for head in self.heads]
        out = self.W_O(torch.cat([o for o, _ in pairs], dim=-1))
        return (out, torch.stack([w for _, w in pairs], dim=1)) if return_attention else out


class _LoopWrong(_Loop):
    combine = staticmethod(lambda outs: torch.cat(outs, dim=-1))
    stack = staticmethod(lambda maps: torch.stack(maps, dim=1))
    use_mask = True
    project = True

    def forward(self, x, mask=None, return_attention=False):
        outs, maps = [], []
        for head in self.heads:
            out, w = head(x, mask) if self.use_mask else head(x)
            outs.append(out)
            maps.append(w)
        out = self.combine(outs)
        if self.project:
            out = self.projection(out)
        return (out, self.stack(maps)) if return_attention else out


@wrong("mha_loop", "no_projection")
class LoopNoProjection(_LoopWrong):
    project = False


@wrong("mha_loop", "concat_tokens")
class LoopCatDim1(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs, dim=1))


@wrong("mha_loop", "heads_averaged")
class LoopMean(_LoopWrong):
    def __init__(self, emb_size, num_heads):
        super().__init__(emb_size, num_heads)
        self.projection = nn.Linear(emb_size // num_heads, emb_size)
    combine = staticmethod(lambda outs: sum(outs) / len(outs))


@wrong("mha_loop", ("weights_stacked_dim0", says("expected weights of shape (3, 2, 5, 5)"),
                     says("return_attention=True")))
class LoopStackDim0(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps))


@wrong("mha_loop", "weights_stacked_last")
class LoopStackLast(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps, dim=-1))


@wrong("mha_loop", "weights_averaged")
class LoopWeightsMean(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps, dim=1).mean(dim=1))


@wrong("mha_loop", "weights_of_last_head")
class LoopLastWeights(_LoopWrong):
    stack = staticmethod(lambda maps: maps[-1])


@wrong("mha_loop", "mask_ignored")
class LoopNoMask(_LoopWrong):
    use_mask = False


@wrong("mha_loop", "same_head_repeated")
class LoopFirstHead(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [self.heads[0](x, mask) for _ in range(len(self.heads))]
        out = self.projection(torch.cat([r[0] for r in results], dim=-1))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@wrong("mha_loop", "return_attention_ignored")
class LoopNoWeights(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        return self.projection(torch.cat([head(x, mask)[0] for head in self.heads], dim=-1))


@wrong("mha_loop", says("the gradient of the parameter heads.0"))
class LoopDetached(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(torch.cat([r[0].detach() for r in results], dim=-1))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@wrong("mha_loop", "heads_reversed")
class LoopReversed(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs[::-1], dim=-1))


# =============================================================================== two mistakes at once
# No catalogue entry matches a combination: the diagnosis names the property that fails.
@wrong("q5", says("merge as (h d), not (d h)"))
class MHAMergeDHMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (d h)"))


@wrong("q5", says("mix the tokens"))
class MHAReshapeMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.reshape(x.shape[0], x.shape[1], -1))


@wrong("mha_loop", says("hold head 1's output"))
class LoopReversedNoMask(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs[::-1], dim=-1))
    use_mask = False


# =============================================================================== from the parallel set
# Wrong answers first written for the parallel implementation of these checks (branch checks-a at
# 402507f, its realistic wrong answers for chapters 1 to 4), rewritten here: mine accepted or misnamed them.
@wrong("mha_loop", says("float32's precision only"))
class LoopFloat32(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList([AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        B, N, E = x.shape
        out = torch.zeros(B, N, E)
        ws = torch.zeros(B, len(self.heads), N, N)
        d = E // len(self.heads)
        for i, head in enumerate(self.heads):
            o, w = head(x, mask)
            out[..., i * d:(i + 1) * d] = o
            ws[:, i] = w
        out = self.projection(out.to(x.dtype))
        return (out, ws) if return_attention else out


@wrong("q5", "mask_after_softmax")
class MHAMaskAfterSoftmax(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x)
        if mask is not None:
            att = att * mask
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("mha_loop", "weights_concatenated")
class LoopWeightsCat(_LoopWrong):
    stack = staticmethod(lambda maps: torch.cat(maps, dim=-1))


# ####################################################################################################
# realistic answers, second set: first written for a parallel implementation of these checks
#
# =============================================================================== 04 q5
def _q5(merge="b h n d -> b n (h d)", einsum="bhal, bhlv -> bhav", fill=-1e9, mask_mode="fill",
        dropout="module", split="b n (qkv h d) -> qkv b h n d", detach=None, float32=False):
    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
            super().__init__()
            self.emb_size, self.num_heads = emb_size, num_heads
            self.qkv = nn.Linear(emb_size, emb_size * 3)
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None):
            w = self.qkv.weight.detach() if detach == "qkv" else self.qkv.weight
            qkv = rearrange(F.linear(x, w, self.qkv.bias), split, h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]
            energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
            if mask is not None and mask_mode == "fill":
                energy = energy.masked_fill(mask == 0, fill)
            elif mask is not None and mask_mode == "bool":
                energy = energy.masked_fill(mask.bool(), fill)
            scaling = (self.emb_size // self.num_heads) ** 0.5
            att = F.softmax(energy / scaling, dim=-1)
            if mask is not None and mask_mode == "after":
                att = att * mask
            if dropout == "module":
                att = self.att_drop(att)
            elif dropout == "functional":
                att = F.dropout(att, self.att_drop.p)
            out = torch.einsum(einsum, att, values)
            out = rearrange(out, merge)
            if float32:
                out = out.float()
                return F.linear(out, self.projection.weight.float(), self.projection.bias.float())
            out = self.projection(out)
            if dropout == "output":
                out = self.att_drop(out)
            return out
    return MultiHeadAttention


@right("q5")
class MHAFusedChunkFunctionalDropout(nn.Module):
    """qkv split with chunk after a head-major view, dropout as F.dropout(training=self.training)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h, self.p = num_heads, dropout
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in (q, k, v))
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            att = att.masked_fill(mask == 0, -1e9)
        att = F.dropout(att.softmax(dim=-1), p=self.p, training=self.training)
        return self.projection(rearrange(att @ v, "b h n d -> b n (h d)"))


@right("q5")
class MHAZeroRows(nn.Module):
    """-inf masking with fully masked rows set to zero; dropout as an nn.Dropout of another name."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = q @ k.transpose(-1, -2) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        att = torch.nan_to_num(F.softmax(energy, dim=-1), nan=0.0)
        att = self.dropout(att)
        return self.projection(rearrange(att @ v, "b h n d -> b n (h d)"))


wrong_list("q5", [
    (_q5(merge="b h n d -> b n (d h)"), "merge_d_h"),
    (_q5(einsum="bhal, bhlv -> bhlv"), "einsum_keeps_keys"),
    (_q5(mask_mode=None), "mask_ignored"),
    (_q5(mask_mode="bool"), "mask_inverted"),
    (_q5(mask_mode="after"), "mask_after_softmax"),
    (_q5(fill=float("-inf")), "nan_fully_masked"),
    (_q5(dropout="functional"), "dropout_in_eval"),
    (_q5(dropout=None), "dropout_missing"),
    (_q5(dropout="output"), "dropout_on_output"),
    (_q5(detach="qkv"), says("the gradient of the parameter qkv.weight")),
    (_q5(float32=True), says("float32's precision only")),
])


@wrong("q5", "reshape_without_permute")
class MHAReshape2(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        B, N, E = x.shape
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(out.reshape(B, N, E))


@wrong("q5", says("in eval mode (model.eval()) the output must equal the output without dropout"))
class MHADropoutTrainingFlag(MHAReshape2):
    """F.dropout with training=True hard-coded, and on the energy's scale (not in the catalogue)."""

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1)
        att = F.dropout(att, self.att_drop.p / 2, training=True)
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


# =============================================================================== 04 mha_loop
@right("mha_loop")
class LoopExplicit(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outs, ws = [], []
        for i in range(len(self.heads)):
            o, w = self.heads[i](x, mask=mask)
            outs.append(o)
            ws.append(w.unsqueeze(1))
        out = self.projection(torch.cat(outs, dim=2))
        if return_attention:
            return out, torch.cat(ws, dim=1)
        return out


@right("mha_loop")
class LoopZeroRowHeads(nn.Module):
    """Its own heads (-inf, fully masked rows zero), a Sequential-free W_O called out_proj."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(HeadNoHelper(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.out_proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [h(x, mask) for h in self.heads]
        out = self.out_proj(torch.cat([r[0] for r in results], -1))
        return (out, torch.stack([r[1] for r in results], 1)) if return_attention else out


def _loop(combine="cat", stack=1, pass_mask=True, project=True, detach=False, reverse=False):
    class MultiHeadAttentionLoop(nn.Module):
        def __init__(self, emb_size, num_heads):
            super().__init__()
            head_dim = emb_size // num_heads
            self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None, return_attention=False):
            outputs, weights = [], []
            heads = list(self.heads)[::-1] if reverse else self.heads
            for head in heads:
                out, w = head(x, mask) if pass_mask else head(x)
                outputs.append(out)
                weights.append(w)
            if combine == "cat":
                out = torch.cat(outputs, dim=-1)
            elif combine == "stack_flatten":
                out = torch.stack(outputs, dim=-1).reshape(x.shape[0], x.shape[1], -1)
            elif combine == "sum":
                out = torch.stack(outputs).sum(0)
            if project:
                w_o = self.projection.weight.detach() if detach else self.projection.weight
                out = F.linear(out, w_o, self.projection.bias)
            if stack == 1:
                weights = torch.stack(weights, dim=1)
            elif stack == 0:
                weights = torch.stack(weights)
            elif stack == "mean":
                weights = torch.stack(weights, dim=1).mean(dim=1)
            elif stack == "cat":
                weights = torch.cat(weights, dim=-1)
            return (out, weights) if return_attention else out
    return MultiHeadAttentionLoop


wrong_list("mha_loop", [
    (_loop(pass_mask=False), "mask_ignored"),
    (_loop(stack=0), "weights_stacked_dim0"),
    (_loop(stack="mean"), "weights_averaged"),
    (_loop(stack="cat"), "weights_concatenated"),
    (_loop(combine="stack_flatten"), says("hold the right numbers in the wrong places")),
    (_loop(project=False), "no_projection"),
    (_loop(detach=True), says("the gradient of the parameter projection.weight")),
    (_loop(reverse=True), says("hold head 1's output")),
])


@wrong("mha_loop", "heads_averaged")
class LoopMean2(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList([AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size // num_heads, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(sum(r[0] for r in results) / len(results))
        return (out, torch.stack([r[1] for r in results], 1)) if return_attention else out



# ####################################################################################################
# keys used as values, per-head output projections, a tuple always returned
LOOP, PER_HEAD = "mha_loop", "per_head_projection"
ALWAYS = ("return_attention_always_tuple", says("return_attention=False"))
@wrong("q5", "values_from_keys")
class MHAValuesAreKeys(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        b, n, e = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.num_heads, e // self.num_heads).permute(2, 0, 3, 1, 4)
        queries, keys, values = qkv[0], qkv[1], qkv[1]
        energy = queries @ keys.transpose(-2, -1)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / (e // self.num_heads) ** 0.5, dim=-1))
        return self.projection((att @ values).transpose(1, 2).reshape(b, n, e))


class _HeadKeysAsValues(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(dim, head_dim), nn.Linear(dim, head_dim), nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        k = self.key(x)
        return scaled_dot_product_attention(self.query(x), k, k, mask)


@wrong(LOOP, "values_from_keys")
class LoopOfHeadsWithKeysAsValues(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList([_HeadKeysAsValues(emb_size, emb_size // num_heads) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(torch.cat([r[0] for r in results], dim=-1))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@wrong(LOOP, PER_HEAD)
class LoopProjectionPerHeadSummed(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projections = nn.ModuleList([nn.Linear(head_dim, emb_size) for _ in range(num_heads)])

    def forward(self, x, mask=None, return_attention=False):
        out, maps = 0, []
        for head, projection in zip(self.heads, self.projections):
            head_out, weights = head(x, mask)
            out = out + projection(head_out)
            maps.append(weights)
        return (out, torch.stack(maps, dim=1)) if return_attention else out


@wrong(LOOP, PER_HEAD)
class LoopSharedSmallProjection(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(head_dim, head_dim)

    def forward(self, x, mask=None, return_attention=False):
        outs, maps = [], []
        for head in self.heads:
            head_out, weights = head(x, mask)
            outs.append(self.projection(head_out))
            maps.append(weights)
        out = torch.cat(outs, dim=-1)
        return (out, torch.stack(maps, dim=1)) if return_attention else out


@wrong(LOOP, PER_HEAD)
class LoopProjectionInsideEachHead(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.out_proj = nn.ModuleList([nn.Linear(head_dim, head_dim) for _ in range(num_heads)])

    def forward(self, x, mask=None, return_attention=False):
        pairs = [head(x, mask) for head in self.heads]
        out = torch.cat([proj(o) for proj, (o, _) in zip(self.out_proj, pairs)], dim=-1)
        return (out, torch.stack([w for _, w in pairs], dim=1)) if return_attention else out


@wrong(LOOP, ALWAYS)
class LoopAlwaysReturnsWeights(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        outs, maps = zip(*[head(x, mask) for head in self.heads])
        return self.projection(torch.cat(outs, dim=-1)), torch.stack(maps, dim=1)


@wrong(LOOP, ALWAYS)
class LoopReturnsNoneWeights(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        outs, maps = zip(*[head(x, mask) for head in self.heads])
        weights = torch.stack(maps, dim=1) if return_attention else None
        return self.projection(torch.cat(outs, dim=-1)), weights


@wrong(LOOP, "returns_a_tuple")
class LoopReturnsListOfMaps(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        outs, maps = [], []
        for head in self.heads:
            out, weights = head(x, mask)
            outs.append(out)
            maps.append(weights)
        return self.projection(torch.cat(outs, dim=-1)), maps


@wrong("q5", ("returns_a_tuple", says("tensor alone")))
class MHAAlwaysWithWeights(GivenMultiHeadAttention):
    def forward(self, x, mask=None, return_attention=True):          # the weights by default
        return super().forward(x, mask, return_attention=return_attention)
