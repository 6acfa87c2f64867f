"""Answer banks of Chapter 7 (ViT): vit_forward, cross_entropy, label_smoothing.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from .ch06_patch_embedding import ConvPatchEmbedding
from .bank import right, says, solution, solution_value, variant, wrong
from .given import TransformerEncoderBlock


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("vit_forward")
class ViT(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10,
                 dim=128, depth=6, num_heads=4, mlp_dim=512):
        super().__init__()
        num_patches = (img_size // patch_size) ** 2
        self.patch_embed = nn.Sequential(                   # (B, C, H, W) -> (B, N, dim)
            nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size),
            Rearrange("b d gh gw -> b (gh gw) d"),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([
            TransformerEncoderBlock(dim, num_heads, mlp_dim=mlp_dim) for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x, return_attention=False):
        # x: (B, C, H, W)
        ### BEGIN SOLUTION
        tokens = self.patch_embed(x)                                         # (B, N, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)                      # (B, 1, dim)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed            # (B, N + 1, dim)
        attentions = []
        for block in self.blocks:
            tokens, weights = block(tokens, return_attention=True)           # weights (B, h, N+1, N+1)
            attentions.append(weights)
        logits = self.head(self.norm(tokens)[:, 0])                          # (B, num_classes)
        ### END SOLUTION
        return (logits, attentions) if return_attention else logits


@solution("cross_entropy")
def cross_entropy(logits, targets):
    """logits (B, C), targets (B,) integers in [0, C) -> mean loss (a 0-dim tensor)."""
    ### BEGIN SOLUTION
    shifted = logits - logits.amax(dim=-1, keepdim=True)                         # (B, C)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[torch.arange(logits.shape[0]), targets].mean()
    ### END SOLUTION


@solution("label_smoothing")
def smoothed_cross_entropy(logits, targets, smoothing=0.1):
    """logits (B, C), targets (B,) integers in [0, C) -> mean smoothed loss (a 0-dim tensor)."""
    B, C = logits.shape
    ### BEGIN SOLUTION
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))   # (B, C)
    q = torch.full_like(log_probs, smoothing / C)                                   # the smoothed targets
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * log_probs).sum(dim=-1).mean()
    ### END SOLUTION


initial_loss = solution_value("concept_initial_loss", 2.3)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- vit
@variant("vit_forward")
class ViTOtherStyle(nn.Module):
    """Separate q/k/v blocks, class token via repeat, attention maps as a tuple."""

    def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10, dim=128, depth=6, num_heads=4,
                 mlp_dim=512):
        super().__init__()
        self.patch_embed = ConvPatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(_BlockSeparate(dim, num_heads, mlp_dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([repeat(self.cls_token, "() n d -> b n d", b=x.shape[0]), x], dim=1) + self.pos_embed
        maps = []
        for block in self.blocks:
            x, weights = block(x)
            maps.append(weights)
        logits = self.head(self.norm(x[:, 0]))
        return (logits, tuple(maps)) if return_attention else logits


class _BlockSeparate(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.h = num_heads
        self.norm1 = nn.LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)

    def forward(self, x):
        y = self.norm1(x)
        q, k, v = (rearrange(f(y), "b n (h d) -> b h n d", h=self.h) for f in (self.q, self.k, self.v))
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
        x = x + self.o(rearrange(weights @ v, "b h n d -> b n (h d)"))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)))), weights


# ----------------------------------------------------------------- cross_entropy
@variant("cross_entropy")
def ce_logsumexp(logits, targets):
    picked = logits.gather(1, targets[:, None]).squeeze(1)
    return (torch.logsumexp(logits, dim=1) - picked).mean()


@variant("cross_entropy")
def ce_one_hot(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -(F.one_hot(targets, logits.shape[-1]) * log_probs).sum(-1).mean()


# ####################################################################################################
# realistic answers
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
        self.blocks = nn.ModuleList([TransformerEncoderBlock(dim, num_heads, mlp_dim=mlp_dim) for _ in range(depth)])
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


@wrong("vit_forward", says("the logits are right but the attention maps are not"))
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


@wrong("vit_forward", says("gradient of the parameter pos_embed"))
class ViTDetachedPositions(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed.detach()
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", says("gradient of the parameter cls_token"))
class ViTClsTokenData(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.data.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", says("mixes float32 and float64"))
class ViTFloat32(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x.float())                    # "images may come as uint8"
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", says("should return a tuple (logits, attentions)"))
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


@wrong("cross_entropy", says("not a torch tensor"))
def ce_numpy(logits, targets):
    x = logits.detach().numpy().astype(np.float64)
    t = targets.numpy()
    m = x.max(axis=1, keepdims=True)
    log_z = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return float(np.mean(log_z - x[np.arange(len(t)), t]))


@wrong("cross_entropy", says("not a torch tensor"))
def ce_item(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets].mean().item()


@wrong("cross_entropy", says("float32's precision only"))
def ce_float32(logits, targets):
    logits = logits.float()
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -log_probs[torch.arange(len(targets)), targets].mean()


# ####################################################################################################
# label_smoothing: realistic answers (new with the banks; written by hand, not with the catalogue's builders)
def _log_softmax(logits):
    shifted = logits - logits.max(dim=-1, keepdim=True).values
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


@right("label_smoothing")
def ls_soft_targets_scatter(logits, targets, smoothing=0.1):
    C = logits.shape[1]
    q = torch.full_like(logits, smoothing / C).scatter_add(
        1, targets[:, None], torch.full_like(logits[:, :1], 1 - smoothing))
    return (-q * _log_softmax(logits)).sum(dim=1).mean()


@right("label_smoothing")
def ls_two_terms_logsumexp(logits, targets, smoothing=0.1):
    log_p = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    nll = -log_p[torch.arange(len(targets)), targets]
    return ((1 - smoothing) * nll + smoothing * -log_p.mean(dim=1)).mean()


@wrong("label_smoothing", "no_smoothing")
def ls_forgot_smoothing(logits, targets, smoothing=0.1):
    log_p = _log_softmax(logits)
    return -log_p[torch.arange(len(targets)), targets].mean()


@wrong("label_smoothing", "spread_over_others")
def ls_eps_over_other_classes(logits, targets, smoothing=0.1):
    B, C = logits.shape
    q = torch.full_like(logits, smoothing / (C - 1))
    q[torch.arange(B), targets] = 1 - smoothing
    return -(q * _log_softmax(logits)).sum(dim=1).mean()


@wrong("label_smoothing", "uniform_not_averaged")
def ls_uniform_summed(logits, targets, smoothing=0.1):
    log_p = _log_softmax(logits)
    nll = -log_p.gather(1, targets.unsqueeze(1)).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_p.sum(dim=1)).mean()


@wrong("label_smoothing", "no_one_minus_eps")
def ls_target_weight_one(logits, targets, smoothing=0.1):
    B, C = logits.shape
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets] += 1
    return -(q * _log_softmax(logits)).sum(dim=1).mean()


@wrong("label_smoothing", "weights_swapped")
def ls_eps_on_target(logits, targets, smoothing=0.1):
    log_p = _log_softmax(logits)
    nll = -log_p[torch.arange(len(targets)), targets]
    return (smoothing * nll + (1 - smoothing) * -log_p.mean(dim=1)).mean()


@wrong("label_smoothing", "mixed_probabilities")
def ls_smoothed_probabilities(logits, targets, smoothing=0.1):
    p = _log_softmax(logits).exp()
    C = logits.shape[1]
    p_smooth = (1 - smoothing) * p + smoothing / C
    return -torch.log(p_smooth[torch.arange(len(targets)), targets]).mean()


@wrong("label_smoothing", "batch_sum")
def ls_sum_over_batch(logits, targets, smoothing=0.1):
    B, C = logits.shape
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * _log_softmax(logits)).sum()


@wrong("label_smoothing", "unstable_log_softmax")
def ls_log_of_exp(logits, targets, smoothing=0.1):
    B, C = logits.shape
    log_p = torch.log(logits.exp() / logits.exp().sum(dim=1, keepdim=True))
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * log_p).sum(dim=1).mean()


# ####################################################################################################
# classes of the instructor's hidden collection: the blocks applied in reverse order (the counterfactual
# "blocks_reversed"), a fresh random class token per call, label smoothing put on the wrong class, and a
# softmax over the batch
@wrong("vit_forward", "blocks_reversed")
class ViTBlocksReversed(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        attentions = []
        for block in reversed(self.blocks):
            x, w = block(x, return_attention=True)
            attentions.append(w)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", "blocks_reversed")
class ViTBlocksSlicedBackwards(_ViTBase):
    def forward(self, x, return_attention=False):
        tokens = self.patch_embed(x)
        tokens = torch.cat([self.cls_token.expand(len(tokens), -1, -1), tokens], dim=1) + self.pos_embed
        maps = []
        for block in self.blocks[::-1]:
            tokens, weights = block(tokens, return_attention=True)
            maps.append(weights)
        logits = self.head(self.norm(tokens[:, 0]))
        return (logits, maps) if return_attention else logits


@wrong("vit_forward", "blocks_reversed")
class ViTBlocksCountingDown(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([repeat(self.cls_token, "() n d -> b n d", b=x.shape[0]), x], dim=1) + self.pos_embed
        attentions = []
        for i in range(len(self.blocks) - 1, -1, -1):
            x, w = self.blocks[i](x, return_attention=True)
            attentions.append(w)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("vit_forward", ("class_token_not_parameter", says("self.cls_token")))
class ViTFreshClassToken(_ViTBase):
    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        cls = torch.randn(x.shape[0], 1, x.shape[-1], dtype=x.dtype) * 0.02        # a new token every call
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x, attentions = self.run_blocks(x)
        logits = self.head(self.norm(x)[:, 0])
        return (logits, attentions) if return_attention else logits


@wrong("label_smoothing", "smoothing_wrong_class")
def ls_target_columns_of_every_row(logits, targets, smoothing=0.1):
    C = logits.shape[1]
    q = torch.full_like(logits, smoothing / C)
    q[:, targets] += 1 - smoothing                        # every row gets every target of the batch
    return -(q * _log_softmax(logits)).sum(dim=1).mean()


@wrong("label_smoothing", "smoothing_wrong_class")
def ls_on_the_predicted_class(logits, targets, smoothing=0.1):
    B, C = logits.shape
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), logits.argmax(dim=1)] += 1 - smoothing
    return -(q * _log_softmax(logits)).sum(dim=1).mean()


@wrong("label_smoothing", "smoothing_wrong_class")
def ls_classes_counted_from_one(logits, targets, smoothing=0.1):
    B, C = logits.shape
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets - 1] += 1 - smoothing     # class 0 wraps around to the last column
    return -(q * _log_softmax(logits)).sum(dim=1).mean()


@wrong("label_smoothing", "softmax_over_batch")
def ls_log_softmax_over_batch(logits, targets, smoothing=0.1):
    log_p = logits - torch.logsumexp(logits, dim=0, keepdim=True)
    nll = -log_p[torch.arange(len(targets)), targets]
    return ((1 - smoothing) * nll - smoothing * log_p.mean(dim=1)).mean()


@wrong("label_smoothing", "softmax_over_batch")
def ls_shift_and_sum_over_dim0(logits, targets, smoothing=0.1):
    B, C = logits.shape
    shifted = logits - logits.max(dim=0, keepdim=True).values
    log_p = shifted - shifted.exp().sum(dim=0, keepdim=True).log()
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * log_p).sum(dim=1).mean()


@wrong("label_smoothing", "softmax_over_batch")
def ls_softmax_columns(logits, targets, smoothing=0.1):
    B, C = logits.shape
    exps = torch.exp(logits - logits.amax())
    probs = exps / exps.sum(dim=0)
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * torch.log(probs)).sum(dim=1).mean()
