"""Realistic answers to the questions of chapters 7 and 8, written the way students write them
(not built from the catalogue's builders).

``RIGHT[qid]``: other correct formulations; every one must pass.
``WRONG[qid]``: ``(answer, expected)`` pairs; every answer must fail, and ``expected`` is the
catalogue key the check should name, or ``"words: ..."``, words the feedback must contain
(the property the check names when no catalogue entry matches).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

RIGHT: dict = {}
WRONG: dict = {}


def right(qid):
    def register(obj):
        RIGHT.setdefault(qid, []).append(obj)
        return obj
    return register


def wrong(qid, expected):
    def register(obj):
        WRONG.setdefault(qid, []).append((obj, expected))
        return obj
    return register


# ----------------------------------------------------------------- the notebooks' given code
class MultiHeadAttention(nn.Module):
    """The notebooks' given fused multi-head self-attention (chapters 7 and 8)."""

    def __init__(self, emb_size=768, num_heads=8):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, causal=False, return_attention=False):
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", qkv=3, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            allowed = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
            mask = allowed if mask is None else (mask != 0) & allowed
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h n d -> b n (h d)"))
        return (out, weights) if return_attention else out


class FeedForwardBlock(nn.Sequential):
    """The notebooks' given feed-forward block (chapters 7 and 8): vitref.FeedForwardBlock's signature."""

    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.GELU(), nn.Dropout(drop_p), nn.Linear(hidden, emb_size))


class TransformerEncoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)

    def forward(self, x, return_attention=False):
        attn_out, weights = self.attn(self.norm1(x), return_attention=True)
        x = x + attn_out
        x = x + self.mlp(self.norm2(x))
        return (x, weights) if return_attention else x


# ----------------------------------------------------------------- 07: ViT forward
class _ViTBase(nn.Module):
    """The notebook's given __init__; subclasses write forward as students do."""

    def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10,
                 dim=128, depth=6, num_heads=4, mlp_dim=512):
        super().__init__()
        num_patches = (img_size // patch_size) ** 2
        self.patch_embed = nn.Sequential(
            nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size),
            Rearrange("b d gh gw -> b (gh gw) d"),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([TransformerEncoderBlock(dim, num_heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def run_blocks(self, x):
        attentions = []
        for block in self.blocks:
            x, w = block(x, return_attention=True)
            attentions.append(w)
        return x, attentions


@right("vit_forward")
class ViTRepeat(_ViTBase):
    """einops repeat for the class token; LayerNorm applied to the class token only."""

    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        cls = repeat(self.cls_token, "() n d -> b n d", b=x.shape[0])
        x = torch.cat((cls, x), dim=1)
        x += self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x[:, 0]))
        return (logits, attentions) if return_attention else logits


@right("vit_forward")
class ViTPositionsInTwoParts(_ViTBase):
    """Positions added to the class token and the patches separately; maps stacked (depth first)."""

    def forward(self, x, return_attention=False):
        patches = self.patch_embed[0](x).flatten(2).transpose(1, 2) + self.pos_embed[:, 1:]
        cls = self.cls_token + self.pos_embed[:, :1]
        x = torch.cat([cls.expand(patches.shape[0], -1, -1), patches], dim=1)
        x, attentions = self.run_blocks(x)
        x = self.norm(x)
        logits = self.head(x[:, 0, :])
        if return_attention:
            return logits, torch.stack(attentions)
        return logits


@right("vit_forward")
class ViTTwoPaths(_ViTBase):
    """Blocks called without return_attention unless asked; maps as a tuple."""

    def forward(self, x, return_attention=False):
        B = x.shape[0]
        tokens = torch.cat([self.cls_token.repeat(B, 1, 1), self.patch_embed(x)], dim=1) + self.pos_embed
        maps = []
        for blk in self.blocks:
            if return_attention:
                tokens, w = blk(tokens, return_attention=True)
                maps.append(w)
            else:
                tokens = blk(tokens)
        cls_out = self.norm(tokens)[:, 0]
        out = self.head(cls_out)
        return (out, tuple(maps)) if return_attention else out


@wrong("vit_forward", "cls_added")
class ViTClsAdded(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = x + self.cls_token
        x = x + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "cls_added")
class ViTClsAddedPositionsSliced(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x) + self.cls_token          # "prepend" the class token
        x = x + self.pos_embed[:, 1:]
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "cls_at_end")
class ViTClsAppended(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([x, self.cls_token.expand(x.shape[0], -1, -1)], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "cls_not_repeated")
class ViTClsNotRepeated(_ViTBase):
    def forward(self, x, return_attention=False):
        x = torch.cat([self.cls_token, self.patch_embed(x)], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "mean_pool")
class ViTMeanPool(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x).mean(dim=1))
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "patch_mean")
class ViTPatchMean(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        x = self.norm(x)
        logits = self.head(x[:, 1:].mean(1))
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "no_positions")
class ViTNoPositions(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "positions_after_encoder")
class ViTPositionsAfterBlocks(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x, attentions = self.run_blocks(x)
        x = x + self.pos_embed
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "positions_before_cls")
class ViTPositionsBeforeCls(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x) + self.pos_embed[:, 1:]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "no_final_norm")
class ViTNoNorm(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(x[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "norm_before_blocks")
class ViTNormFirst(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(x)
        x, attentions = self.run_blocks(x)
        logits = self.head(x[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "last_token")
class ViTLastToken(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, -1])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "weights_stacked_batch_first")
class ViTMapsStackedDim1(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, torch.stack(attentions, dim=1)) if return_attention else logits


@wrong("vit_forward", "weights_averaged")
class ViTMapsAveraged(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        maps = []
        for block in self.blocks:
            x, w = block(x, return_attention=True)
            maps.append(w.mean(1))                  # one map per layer, averaged over the heads
        logits = self.head(self.norm(x)[:, 0])
        return (logits, maps) if return_attention else logits


@wrong("vit_forward", "weights_last_block")
class ViTOnlyLastMap(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x, attn = block(x, return_attention=True)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attn) if return_attention else logits


@wrong("vit_forward", "same_block_repeated")
class ViTFirstBlockOnly(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        attentions = []
        for i in range(len(self.blocks)):
            x, w = self.blocks[0](x, return_attention=True)
            attentions.append(w)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "words: the logits are right but the attention maps are not")
class ViTMapsFromSecondCall(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        attentions = []
        for block in self.blocks:
            x = block(x)
            _, w = block(x, return_attention=True)        # weights of a second call, on the block's output
            attentions.append(w)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "words: gradient of the parameter pos_embed")
class ViTDetachedPositions(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed.detach()
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "words: gradient of the parameter cls_token")
class ViTClsTokenData(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.data.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "words: mixes float32 and float64")
class ViTFloat32(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x.float())                    # "images may come as uint8"
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "words: should return a tuple (logits, attentions)")
class ViTIgnoresReturnAttention(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


# ----------------------------------------------------------------- 07: cross-entropy
@right("cross_entropy")
def ce_gather_logsumexp(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return -log_probs.gather(1, targets.unsqueeze(1)).mean()


@right("cross_entropy")
def ce_max_detached(logits, targets):
    m = logits.max(dim=1, keepdim=True).values.detach()      # the shift needs no gradient
    log_z = m + torch.log(torch.sum(torch.exp(logits - m), dim=1, keepdim=True))
    return (log_z.squeeze(1) - logits[range(len(targets)), targets]).mean()


@right("cross_entropy")
def ce_loop(logits, targets):
    total = 0
    for row, t in zip(logits, targets):
        shifted = row - row.max()
        total = total - (shifted[t] - shifted.exp().sum().log())
    return total / len(targets)


@right("cross_entropy")
def ce_one_hot_sum(logits, targets):
    B, C = logits.shape
    shifted = logits - logits.amax(-1, keepdim=True)
    log_probs = shifted - shifted.exp().sum(-1, keepdim=True).log()
    one_hot = torch.zeros(B, C, dtype=logits.dtype)
    one_hot[torch.arange(B), targets] = 1
    return -(one_hot * log_probs).sum() / B


@right("cross_entropy")
def ce_diag(logits, targets):
    shifted = logits - logits.max(-1, keepdim=True)[0]
    log_probs = shifted - torch.log(torch.exp(shifted).sum(-1, keepdim=True))
    return -torch.diag(log_probs[:, targets]).mean()


@wrong("cross_entropy", "shortcut")
def ce_library_log_softmax(logits, targets):
    log_probs = F.log_softmax(logits, dim=-1)
    return -log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "shortcut")
def ce_method_log_softmax(logits, targets):
    return -logits.log_softmax(-1).gather(1, targets[:, None]).mean()


@wrong("cross_entropy", "sum_not_mean")
def ce_sum(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[torch.arange(logits.shape[0]), targets].sum()


@wrong("cross_entropy", "mean_over_classes")
def ce_mean_everything(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs.mean()


@wrong("cross_entropy", "rows_indexed_by_target")
def ce_rows(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[targets].mean()


@wrong("cross_entropy", "columns_indexed_by_target")
def ce_columns(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[:, targets].mean()


@wrong("cross_entropy", "not_stable")
def ce_no_shift(logits, targets):
    log_probs = logits - torch.log(torch.exp(logits).sum(dim=1, keepdim=True))
    return -log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "not_stable")
def ce_log_of_naive_softmax(logits, targets):
    probs = torch.exp(logits) / torch.exp(logits).sum(dim=1, keepdim=True)
    return -torch.log(probs[torch.arange(len(targets)), targets]).mean()


@wrong("cross_entropy", "log_of_softmax")
def ce_log_of_stable_softmax(logits, targets):
    e = torch.exp(logits - logits.max(dim=1, keepdim=True).values)
    probs = e / e.sum(dim=1, keepdim=True)
    return -torch.log(probs[torch.arange(len(targets)), targets]).mean()


@wrong("cross_entropy", "global_max_shift")
def ce_global_max(logits, targets):
    shifted = logits - logits.max()
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=1, keepdim=True))
    return -log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "no_keepdim")
def ce_logsumexp_no_keepdim(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1)
    return -log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "one_hot_mean_over_all")
def ce_one_hot_mean(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -(F.one_hot(targets, logits.shape[-1]) * log_probs).mean()


@wrong("cross_entropy", "one_hot_without_num_classes")
def ce_one_hot_no_classes(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -(F.one_hot(targets) * log_probs).sum(dim=-1).mean()


@wrong("cross_entropy", "no_minus")
def ce_no_minus(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "max_not_added_back")
def ce_forgot_max(logits, targets):
    m = logits.max(dim=1, keepdim=True).values
    log_probs = logits - torch.log(torch.exp(logits - m).sum(dim=1, keepdim=True))
    return -log_probs[torch.arange(len(targets)), targets].mean()


@wrong("cross_entropy", "divided_by_classes")
def ce_divided_by_classes(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets].sum() / logits.shape[1]


@wrong("cross_entropy", "no_mean")
def ce_per_example(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets]


@wrong("cross_entropy", "words: not a torch tensor")
def ce_numpy(logits, targets):
    x = logits.detach().numpy().astype(np.float64)
    t = targets.numpy()
    m = x.max(axis=1, keepdims=True)
    log_z = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return float(np.mean(log_z - x[np.arange(len(t)), t]))


@wrong("cross_entropy", "words: not a torch tensor")
def ce_item(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets].mean().item()


@wrong("cross_entropy", "words: float32 although the inputs")
def ce_float32(logits, targets):
    logits = logits.float()
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets].mean()


# ----------------------------------------------------------------- 08: causal mask
@right("causal_mask")
def mask_tril_bool(T):
    return torch.tril(torch.ones(T, T)).bool()


@right("causal_mask")
def mask_not_triu(T):
    return ~torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


@right("causal_mask")
def mask_arange(T):
    positions = torch.arange(T)
    return positions[:, None] >= positions[None, :]


@right("causal_mask")
def mask_np_tri(T):
    return np.tri(T, dtype=bool)


@right("causal_mask")
def mask_triu_transposed(T):
    return torch.triu(torch.ones(T, T)).T


@wrong("causal_mask", "upper_triangular")
def mask_triu(T):
    return torch.triu(torch.ones(T, T)).bool()


@wrong("causal_mask", "upper_triangular")
def mask_arange_transposed(T):
    positions = torch.arange(T)
    return positions[None, :] >= positions[:, None]


@wrong("causal_mask", "diagonal_excluded")
def mask_strict_lower(T):
    return torch.tril(torch.ones(T, T), diagonal=-1).bool()


@wrong("causal_mask", "diagonal_excluded")
def mask_strict_arange(T):
    positions = torch.arange(T)
    return positions[:, None] > positions[None, :]


@wrong("causal_mask", "inverted")
def mask_blocked_true(T):
    return torch.triu(torch.ones(T, T), diagonal=1).bool()


@wrong("causal_mask", "inverted")
def mask_tril_eq_zero(T):
    return torch.tril(torch.ones(T, T)) == 0


@wrong("causal_mask", "one_step_ahead")
def mask_tril_plus_one(T):
    return torch.tril(torch.ones(T, T), diagonal=1).bool()


@wrong("causal_mask", "additive")
def mask_additive(T):
    return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)


@wrong("causal_mask", "extra_axes")
def mask_batched(T):
    return torch.tril(torch.ones(T, T)).unsqueeze(0).bool()


# ----------------------------------------------------------------- 08: cross-attention
class _CrossBase(nn.Module):
    """The notebook's given __init__."""

    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)


@right("cross_attention")
class CrossEinsumChunk(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        h = self.num_heads
        k, v = self.key_value(context).chunk(2, dim=-1)              # (B, S, E) each: (kv h d)
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=h)
        k = rearrange(k, "b s (h d) -> b h s d", h=h)
        v = rearrange(v, "b s (h d) -> b h s d", h=h)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        out = torch.einsum("bhts,bhsd->bhtd", attn, v)
        out = self.projection(rearrange(out, "b h t d -> b t (h d)"))
        if return_attention:
            return out, attn
        return out


@right("cross_attention")
class CrossHeadLoop(_CrossBase):
    """One head at a time, slicing the (kv h d) layout by hand."""

    def forward(self, x, context, mask=None, return_attention=False):
        E = self.query.out_features
        d = E // self.num_heads
        q_all = self.query(x)
        kv = self.key_value(context)
        keys, values = kv[..., :E], kv[..., E:]
        outs, weights = [], []
        for i in range(self.num_heads):
            q = q_all[..., i * d:(i + 1) * d]
            k = keys[..., i * d:(i + 1) * d]
            v = values[..., i * d:(i + 1) * d]
            scores = q @ k.transpose(1, 2) / d ** 0.5                 # (B, T, S)
            if mask is not None:
                m = mask[:, i] if mask.shape[1] > 1 else mask[:, 0]
                scores = scores.masked_fill(m == 0, -1e9)
            w = scores.softmax(dim=-1)
            outs.append(w @ v)
            weights.append(w)
        out = self.projection(torch.cat(outs, dim=-1))
        return (out, torch.stack(weights, dim=1)) if return_attention else out


@right("cross_attention")
class CrossViewPermuteNanToNum(_CrossBase):
    """view/permute; -inf fills, then the NaN rows of fully masked queries set to zero."""

    def forward(self, x, context, mask=None, return_attention=False):
        B, T, E = x.shape
        S = context.shape[1]
        h = self.num_heads
        d = E // h
        q = self.query(x).view(B, T, h, d).permute(0, 2, 1, 3)
        kv = self.key_value(context).view(B, S, 2, h, d).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        scores = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(~mask.bool(), float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        out = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(B, T, E)
        out = self.projection(out)
        return (out, weights) if return_attention else out


@right("cross_attention")
class CrossAdditive(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores + (1.0 - mask.to(scores.dtype)) * -1e9
        weights = scores.softmax(-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


def _cross_forward(self, x, context, mask=None, return_attention=False, *, kv="kv h d", queries="x", keys="context",
                   scale="head", fill=-1e9, mask_mode="fill", softmax_dim=-1, merge="b h t d -> b t (h d)",
                   project=True, returned="weights", heads=True):
    """Shared body of the wrong cross-attentions below (each class names its one mistake)."""
    h = self.num_heads if heads else 1
    E = self.query.out_features
    q = rearrange(self.query(x if queries == "x" else context), "b t (h d) -> b h t d", h=h)
    k, v = rearrange(self.key_value(context if keys == "context" else x), f"b s ({kv}) -> kv b h s d", kv=2, h=h)
    scores = q @ k.transpose(-2, -1)
    if scale == "head":
        scores = scores / math.sqrt(E // self.num_heads)
    elif scale == "emb":
        scores = scores / math.sqrt(E)
    if mask is not None and mask_mode == "fill":
        scores = scores.masked_fill(mask == 0, fill)
    elif mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask == 1, fill)
    weights = F.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_mode == "after":
        weights = weights * mask
    out = weights @ v
    if merge == "reshape":
        out = out.reshape(x.shape[0], -1, E)
    else:
        out = rearrange(out, merge)
    if project:
        out = self.projection(out)
    shown = {"weights": weights, "scores": scores, "mean": weights.mean(1)}[returned]
    return (out, shown) if return_attention else out


def _wrong_cross(name, expected, **mistake):
    cls = type(name, (_CrossBase,), {"forward": lambda self, x, context, mask=None, return_attention=False:
                                     _cross_forward(self, x, context, mask, return_attention, **mistake)})
    WRONG.setdefault("cross_attention", []).append((cls, expected))
    return cls


@wrong("cross_attention", "kv_layout")
class CrossKVPerHead(_CrossBase):
    """Heads split first, then keys and values: the (h kv d) layout."""

    def forward(self, x, context, mask=None, return_attention=False):
        B, S, _ = context.shape
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        kv = self.key_value(context).reshape(B, S, self.num_heads, -1).transpose(1, 2)   # (B, h, S, 2d)
        k, v = kv.chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


_wrong_cross("CrossKVInterleaved", "kv_layout", kv="h d kv")
_wrong_cross("CrossQueriesFromContext", "queries_from_context", queries="context")
_wrong_cross("CrossKeysFromX", "keys_from_decoder", keys="x")
_wrong_cross("CrossNoScaling", "no_scaling", scale=None)
_wrong_cross("CrossScaledByE", "scale_by_emb", scale="emb")
_wrong_cross("CrossMinusInf", "nan_fully_masked", fill=float("-inf"))
_wrong_cross("CrossMaskAfterSoftmax", "mask_after_softmax", mask_mode="after")
_wrong_cross("CrossMaskIgnored", "mask_ignored", mask_mode=None)
_wrong_cross("CrossMaskInverted", "mask_inverted", mask_mode="inverted")
_wrong_cross("CrossMergeDH", "merge_d_h", merge="b h t d -> b t (d h)")
_wrong_cross("CrossReshape", "reshape_without_permute", merge="reshape")
_wrong_cross("CrossNoProjection", "no_projection", project=False)
_wrong_cross("CrossSoftmaxQueries", "softmax_over_queries", softmax_dim=-2)
_wrong_cross("CrossReturnsScores", "weights_before_softmax", returned="scores")
_wrong_cross("CrossSingleHead", "single_head", heads=False)


@wrong("cross_attention", "words: gradient of the parameter key_value.weight")
class CrossDetachedKV(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        kv = F.linear(context, self.key_value.weight.detach(), self.key_value.bias)
        k, v = rearrange(kv, "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@wrong("cross_attention", "words: gradients are not")
class CrossDetachedContext(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        context = context.detach()              # "the encoder is frozen anyway"
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@wrong("cross_attention", "words: mixes float32 and float64")
class CrossFloatMask(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = (q @ k.transpose(-2, -1)).float() / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


# ----------------------------------------------------------------- 08: decoder block
class _DecoderBase(nn.Module):
    """The notebook's given __init__, with the student's (correct) cross-attention."""

    cross = CrossEinsumChunk

    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = self.cross(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)


@right("decoder_block")
class DecoderCausalFlag(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=(self_mask == "causal"))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@right("decoder_block")
class DecoderExplicitMask(_DecoderBase):
    cross = CrossHeadLoop

    def forward(self, x, context, self_mask=None):
        mask = None
        if self_mask == "causal":
            T = x.size(1)
            mask = torch.tril(torch.ones(T, T, device=x.device))
        h = self.norm1(x)
        x = x + self.self_attn(h, mask=mask)
        h = self.norm2(x)
        x = x + self.cross_attn(h, context)
        h = self.norm3(x)
        x = x + self.mlp(h)
        return x


@right("decoder_block")
class DecoderResidualNames(_DecoderBase):
    cross = CrossViewPermuteNanToNum

    def forward(self, x, context, self_mask=None):
        causal = isinstance(self_mask, str) and self_mask == "causal"
        residual = x
        x = self.self_attn(self.norm1(x), causal=causal) + residual
        residual = x
        x = self.cross_attn(self.norm2(x), context) + residual
        residual = x
        x = self.mlp(self.norm3(x)) + residual
        return x


def _decoder_forward(self, x, context, self_mask=None, *, mode):
    causal = self_mask == "causal" and mode != "no_causal"
    T = x.shape[1]
    if mode == "triu":
        sa = lambda h: self.self_attn(h, mask=torch.triu(torch.ones(T, T)) if self_mask == "causal" else None)  # noqa: E731
    elif mode == "triu1":
        sa = lambda h: self.self_attn(h, mask=torch.triu(torch.ones(T, T), 1) if self_mask == "causal" else None)  # noqa: E731
    else:
        sa = lambda h: self.self_attn(h, causal=causal)  # noqa: E731
    if mode == "post_ln":
        x = self.norm1(x + sa(x))
        x = self.norm2(x + self.cross_attn(x, context))
        return self.norm3(x + self.mlp(x))
    if mode == "cross_first":
        x = x + self.cross_attn(self.norm1(x), context)
        x = x + sa(self.norm2(x))
        return x + self.mlp(self.norm3(x))
    if mode == "norm_in_residual":
        x = self.norm1(x)
        x = x + sa(x)
        x = self.norm2(x)
        x = x + self.cross_attn(x, context)
        x = self.norm3(x)
        return x + self.mlp(x)
    if mode == "same_norm":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm1(x), context)
        return x + self.mlp(self.norm1(x))
    if mode == "norms_swapped":
        x = x + sa(self.norm2(x))
        x = x + self.cross_attn(self.norm1(x), context)
        return x + self.mlp(self.norm3(x))
    if mode == "keys_from_x":
        x = x + sa(self.norm1(x))
        h = self.norm2(x)
        x = x + self.cross_attn(h, h)
        return x + self.mlp(self.norm3(x))
    if mode == "context_normalised":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), self.norm2(context))
        return x + self.mlp(self.norm3(x))
    if mode == "mlp_before_cross":
        x = x + sa(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x + self.cross_attn(self.norm3(x), context)
    if mode == "no_norm_mlp":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(x)
    if mode == "causal_in_cross":
        x = x + sa(self.norm1(x))
        mask = torch.tril(torch.ones(T, context.shape[1])) if causal else None
        x = x + self.cross_attn(self.norm2(x), context, mask=mask)
        return x + self.mlp(self.norm3(x))
    if mode == "detached_mlp":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x).detach())
    if mode == "float32":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context.float())
        return x + self.mlp(self.norm3(x))
    a = sa(self.norm1(x))
    x = a if mode == "no_res_self" else x + a
    c = self.cross_attn(self.norm2(x), context)
    x = c if mode == "no_res_cross" else x + c
    m = self.mlp(self.norm3(x))
    return m if mode == "no_res_mlp" else x + m


def _wrong_decoder(name, expected, mode, cross=None):
    body = {"forward": lambda self, x, context, self_mask=None: _decoder_forward(self, x, context, self_mask,
                                                                                  mode=mode)}
    if cross is not None:
        body["cross"] = cross
    cls = type(name, (_DecoderBase,), body)
    WRONG.setdefault("decoder_block", []).append((cls, expected))
    return cls


@wrong("decoder_block", "no_causal_mask")
class DecoderForgotCausal(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "always_causal")
class DecoderAlwaysCausal(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=True)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "self_mask_as_mask")
class DecoderSelfMaskAsMask(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=self_mask)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "no_norm_self")
class DecoderNoNorm1(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(x, causal=self_mask == "causal")
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


_wrong_decoder("DecoderUpperMask", "upper_mask", "triu")
_wrong_decoder("DecoderInvertedMask", "inverted_mask", "triu1")
_wrong_decoder("DecoderPostLN", "post_ln", "post_ln")
_wrong_decoder("DecoderCrossFirst", "cross_first", "cross_first")
_wrong_decoder("DecoderNormInResidual", "norm_in_residual", "norm_in_residual")
_wrong_decoder("DecoderSameNorm", "same_norm", "same_norm")
_wrong_decoder("DecoderNormsSwapped", "norms_swapped", "norms_swapped")
_wrong_decoder("DecoderKeysFromX", "keys_from_decoder", "keys_from_x")
_wrong_decoder("DecoderContextNormalised", "context_normalised", "context_normalised")
_wrong_decoder("DecoderMlpBeforeCross", "mlp_before_cross", "mlp_before_cross")
_wrong_decoder("DecoderNoNormMlp", "no_norm_mlp", "no_norm_mlp")
_wrong_decoder("DecoderCausalInCross", "causal_in_cross", "causal_in_cross")
_wrong_decoder("DecoderNoResidualSelf", "no_residual_self", "no_res_self")
_wrong_decoder("DecoderNoResidualCross", "no_residual_cross", "no_res_cross")
_wrong_decoder("DecoderNoResidualMlp", "no_residual_mlp", "no_res_mlp")
_wrong_decoder("DecoderDetachedMlpInput", "words: gradient of the parameter norm3", "detached_mlp")
_wrong_decoder("DecoderFloat32Context", "words: mixes float32 and float64", "float32")
_wrong_decoder("DecoderWithKVPerHead", "cross_kv_layout", "right", cross=CrossKVPerHead)
_wrong_decoder("DecoderWithUnscaledCross", "cross_no_scaling", "right",
               cross=next(c for c, e in WRONG["cross_attention"] if e == "no_scaling"))
