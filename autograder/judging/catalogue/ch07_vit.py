"""The references and the catalogue of known mistakes of ch07_vit (grader side)."""
from __future__ import annotations



import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..model import Mistake
from . import add
from ._common import parts, vitref
from ...questions.ch07_vit import (  # noqa: F401
    CE_CASES,
    VIT_CASES,
    _run_ce,
    _run_vit,
)


def _vit_reference():
    v = vitref()

    class Reference(v.ViT):
        def __init__(self, **cfg):
            super().__init__(**cfg, norm_eps=1e-5)
    return [Reference]


def _vit(mode):
    def build(parts):
        Block = parts.TransformerEncoderBlock

        class ViT(nn.Module):
            def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10, dim=128, depth=6,
                         num_heads=4, mlp_dim=512):
                super().__init__()
                num_patches = (img_size // patch_size) ** 2
                self.patch_embed = nn.Module()
                self.patch_embed.proj = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
                self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
                self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
                self.blocks = nn.ModuleList([Block(dim, num_heads, mlp_dim=mlp_dim) for _ in range(depth)])
                self.norm = nn.LayerNorm(dim)
                self.head = nn.Linear(dim, num_classes)

            def forward(self, x, return_attention=False):
                tokens = rearrange(self.patch_embed.proj(x), "b d h w -> b (h w) d")
                cls = self.cls_token.expand(x.shape[0], -1, -1)
                tokens = torch.cat([cls, tokens], dim=1)
                if mode != "no_positions":
                    tokens = tokens + self.pos_embed
                attentions = []
                for block in self.blocks:
                    tokens, weights = block(tokens, return_attention=True)
                    attentions.append(weights)
                if mode != "no_final_norm":
                    tokens = self.norm(tokens)
                if mode == "mean_pool":
                    features = tokens.mean(dim=1)
                elif mode == "last_token":
                    features = tokens[:, -1]
                elif mode == "patch_mean":
                    features = tokens[:, 1:].mean(dim=1)
                else:
                    features = tokens[:, 0]
                logits = self.head(features)
                return (logits, attentions) if return_attention else logits
        return ViT
    return build


_VIT_PARTS = ("TransformerEncoderBlock",)

VIT_MISTAKES = [
    Mistake("mean_pool", "classified from the mean of all tokens",
            "The head reads the class token only: self.head(self.norm(x)[:, 0]).", _vit("mean_pool"), _VIT_PARTS),
    Mistake("patch_mean", "classified from the mean of the patch tokens",
            "The head reads the class token only: self.head(self.norm(x)[:, 0]).", _vit("patch_mean"), _VIT_PARTS),
    Mistake("last_token", "classified from the last token instead of the class token",
            "The class token is token 0: self.head(x[:, 0]).", _vit("last_token"), _VIT_PARTS),
    Mistake("no_final_norm", "the final LayerNorm is missing",
            "Pre-LN blocks leave the residual stream un-normalised: apply self.norm before the head.",
            _vit("no_final_norm"), _VIT_PARTS),
    Mistake("no_positions", "position embeddings not added",
            "Add self.pos_embed (1, N+1, dim) after prepending the class token.", _vit("no_positions"), _VIT_PARTS),
]


def _vit_block_part():
    v = vitref()

    def TransformerEncoderBlock(dim, num_heads, mlp_dim):
        return v.TransformerEncoderBlock(dim, num_heads, mlp_dim=mlp_dim)
    return TransformerEncoderBlock

add('vit_forward', references=_vit_reference, catalogue=VIT_MISTAKES, reference_parts=parts(TransformerEncoderBlock=_vit_block_part))


def _ce_reference():
    def cross_entropy(logits, targets):
        # torch's own loss, run here in the grader in float64 (vitref has no separate function)
        return F.cross_entropy(logits, targets)
    return [cross_entropy]


def _ce(fn):
    def build(parts):
        def cross_entropy(logits, targets):
            return fn(logits, targets)
        return cross_entropy
    return build


def _log_softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def _pick(values, targets):
    return values[torch.arange(values.shape[0]), targets]


CE_MISTAKES = [
    Mistake("no_log_softmax", "the logits used directly, without log-softmax",
            "The loss of one example is -log softmax(logits)[target] = logsumexp(logits) - logits[target].",
            _ce(lambda x, t: -_pick(x, t).mean())),
    Mistake("sum_not_mean", "summed over the batch instead of averaged",
            "The loss is the mean over the batch: .mean(), not .sum().",
            _ce(lambda x, t: -_pick(_log_softmax(x), t).sum())),
    Mistake("not_stable", "not numerically stable: exp of large logits overflows",
            "log(softmax(x)) with exp(1000) gives inf/NaN; subtract the maximum first (or use logsumexp).",
            _ce(lambda x, t: -torch.log(_pick(torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), t)).mean())),
    Mistake("log_of_softmax", "log of the softmax probabilities: underflows for large logits",
            "softmax(x) of a very unlikely class is exactly 0 in floating point and log(0) = -inf; compute "
            "the log-probabilities directly: x - max - log(sum(exp(x - max))).",
            _ce(lambda x, t: -torch.log(_pick(torch.exp(_log_softmax(x)), t)).mean())),
    Mistake("no_minus", "missing minus sign",
            "Cross-entropy is the *negative* log-probability of the target class.",
            _ce(lambda x, t: _pick(_log_softmax(x), t).mean())),
    Mistake("mean_over_classes", "averaged over all classes, ignoring the targets",
            "Pick the log-probability of each example's target class, then average over the batch.",
            _ce(lambda x, t: -_log_softmax(x).mean())),
    Mistake("softmax_over_batch", "log-softmax over the batch axis",
            "Normalise each example over its classes: log-softmax along dim=-1.",
            _ce(lambda x, t: -_pick(_log_softmax(x, dim=0), t).mean())),
    Mistake("rows_indexed_by_target", "log-probabilities indexed as log_probs[targets]",
            "log_probs[targets] picks whole rows; pick one entry per example: "
            "log_probs[torch.arange(B), targets].", _ce(lambda x, t: -_log_softmax(x)[t].mean())),
    Mistake("columns_indexed_by_target", "log-probabilities indexed as log_probs[:, targets]",
            "log_probs[:, targets] is a (B, B) matrix; pick one entry per example: "
            "log_probs[torch.arange(B), targets].", _ce(lambda x, t: -_log_softmax(x)[:, t].mean())),
    Mistake("probabilities_not_log", "probabilities instead of log-probabilities",
            "Take the log: the loss is -log p(target), not -p(target).",
            _ce(lambda x, t: -_pick(torch.exp(_log_softmax(x)), t).mean())),
]

add('cross_entropy', references=_ce_reference, catalogue=CE_MISTAKES)
