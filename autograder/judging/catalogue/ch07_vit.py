"""The references and the catalogue of known mistakes of ch07_vit (grader side)."""
from __future__ import annotations



import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

import vitref

from ..model import Mistake
from ._entry import add
from ._common import function_answer, parts
from ..diagnosis import View
from ._changes import blocks_reversed
from ._symptoms import (FLOAT_MIX, FRESH_CLASS_TOKEN, PROPERTIES, RECIPE_SAYS, by_tag, first_wrong_output,
                        gradient_differs, symptom)


def _vit_reference():

    class Reference(vitref.ViT):
        def __init__(self, **cfg):
            super().__init__(**cfg, norm_eps=1e-5)
    return [Reference]


def _with_class_token(tokens, cls_token, mode):
    """The class token joined to the patch tokens ``(B, N, D)`` as a student may write it (the
    same forms as q3's catalogue: prepended, appended, added, not repeated over the batch)."""
    if mode == "not_repeated":
        return torch.cat([cls_token, tokens], dim=1)
    cls = cls_token.expand(tokens.shape[0], -1, -1)
    if mode == "at_end":
        return torch.cat([tokens, cls], dim=1)
    if mode == "added":
        return tokens + cls
    return torch.cat([cls, tokens], dim=1)


def _vit_tokens(model, x, cls, positions):
    """The tokens ``(B, N+1, D)`` a student's ViT feeds its blocks: patches, class token, positions."""
    tokens = rearrange(model.patch_embed.proj(x), "b d h w -> b (h w) d")
    if positions == "patches_only":
        tokens = tokens + model.pos_embed[:, 1:]
    tokens = _with_class_token(tokens, model.cls_token, cls)
    if positions == "after_cls":
        tokens = tokens + model.pos_embed
    elif positions == "sliced":
        tokens = tokens + model.pos_embed[:, :tokens.shape[1]]
    elif positions == "sliced_tail":
        tokens = tokens + model.pos_embed[:, 1:]
    return tokens


def _vit_features(model, tokens, positions, norm, pool):
    """The features ``(B, D)`` the head reads from the encoder's tokens ``(B, N+1, D)``."""
    if positions == "after_encoder":
        tokens = tokens + model.pos_embed
    if norm == "final":
        tokens = model.norm(tokens)
    if pool == "mean":
        features = tokens.mean(dim=1)
    elif pool == "last":
        features = tokens[:, -1]
    elif pool == "patch_mean":
        features = tokens[:, 1:].mean(dim=1)
    else:
        features = tokens[:, 0]
    if norm == "after_pool":
        features = model.norm(features)
    return features


def _vit_maps(attentions, weights):
    """The attention maps a student's ViT returns, from each block's ``(B, H, N+1, N+1)``."""
    if weights == "stack_batch_first":
        return torch.stack(attentions, dim=1)
    if weights == "mean_heads":
        return [w.mean(dim=1) for w in attentions]
    if weights == "last_tensor":
        return attentions[-1]
    if weights == "last_list":
        return attentions[-1:]
    return attentions


def _vit(mode=None, cls="prepend", positions="after_cls", norm="final", pool="cls", weights="list"):
    """A ViT forward as a student may write it. ``positions``: "after_cls" (right), "none",
    "after_encoder", "patches_only" (pos_embed[:, 1:] added before the class token, which gets
    none), "sliced" (pos_embed[:, :tokens]), "sliced_tail" (pos_embed[:, 1:] after the class
    token was added); ``norm``: "final", "none", "before_blocks", "after_pool"; ``pool``: "cls",
    "mean", "patch_mean", "last"; ``weights`` (returned attention maps): "list", "stack_batch_first",
    "mean_heads", "last_tensor", "last_list"."""
    legacy = {"no_positions": dict(positions="none"), "no_final_norm": dict(norm="none"),
              "mean_pool": dict(pool="mean"), "last_token": dict(pool="last"), "patch_mean": dict(pool="patch_mean")}
    if mode is not None:
        return _vit(**legacy[mode])

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
                tokens = _vit_tokens(self, x, cls, positions)
                if norm == "before_blocks":
                    tokens = self.norm(tokens)
                attentions = []
                for block in self.blocks:
                    if weights == "same_block":
                        block = self.blocks[0]
                    tokens, w = block(tokens, return_attention=True)
                    attentions.append(w)
                logits = self.head(_vit_features(self, tokens, positions, norm, pool))
                if not return_attention:
                    return logits
                return logits, _vit_maps(attentions, weights)
        return ViT
    return build


_VIT_PARTS = ("TransformerEncoderBlock",)
_CLS_HINT = "Prepend it: torch.cat([self.cls_token.expand(B, -1, -1), tokens], dim=1) gives (B, N+1, dim)."


def _vit_mistake(key, title, hint, *forms):
    return Mistake(key, title, hint, _vit(**forms[0]), _VIT_PARTS, also=tuple(_vit(**f) for f in forms[1:]))


VIT_MISTAKES = [
    Mistake("mean_pool", "classified from the mean of all tokens",
            "The head reads the class token only: self.head(self.norm(x)[:, 0]).", _vit("mean_pool"), _VIT_PARTS,
            also=(_vit(pool="mean", norm="after_pool"),)),
    Mistake("patch_mean", "classified from the mean of the patch tokens",
            "The head reads the class token only: self.head(self.norm(x)[:, 0]).", _vit("patch_mean"), _VIT_PARTS),
    Mistake("last_token", "classified from the last token instead of the class token",
            "The class token is token 0: self.head(x[:, 0]).", _vit("last_token"), _VIT_PARTS),
    Mistake("no_final_norm", "the final LayerNorm is missing",
            "Pre-LN blocks leave the residual stream un-normalised: apply self.norm before the head.",
            _vit("no_final_norm"), _VIT_PARTS),
    Mistake("no_positions", "position embeddings not added",
            "Add self.pos_embed (1, N+1, dim) after prepending the class token.", _vit("no_positions"), _VIT_PARTS),
    _vit_mistake("cls_added", "class token added to every patch instead of prepended",
                 "Concatenate it as an extra token (N + 1 tokens), do not add it. " + _CLS_HINT,
                 dict(cls="added"), dict(cls="added", positions="sliced"), dict(cls="added", positions="sliced_tail")),
    _vit_mistake("cls_at_end", "class token appended after the patches",
                 "The class token is token 0, the one the head reads. " + _CLS_HINT,
                 dict(cls="at_end"), dict(cls="at_end", pool="last")),
    _vit_mistake("cls_not_repeated", "class token not repeated over the batch",
                 "self.cls_token is (1, 1, dim): expand it to (B, 1, dim) before torch.cat, or batches larger than "
                 "1 fail.", dict(cls="not_repeated")),
    _vit_mistake("positions_after_encoder", "position embeddings added after the blocks",
                 "Positions are part of the input: add self.pos_embed right after prepending the class token, before "
                 "the first block.", dict(positions="after_encoder")),
    _vit_mistake("positions_before_cls", "positions added to the patches only, before the class token",
                 "Prepend the class token first, then add all N + 1 rows of self.pos_embed (the class token has a "
                 "position too).", dict(positions="patches_only")),
    _vit_mistake("norm_before_blocks", "the final LayerNorm applied before the blocks",
                 "self.norm comes after the last block, just before the head.", dict(norm="before_blocks")),
    _vit_mistake("same_block_repeated", "the first block applied depth times",
                 "Run every block once, in order: for block in self.blocks: x, w = block(x, return_attention=True).",
                 dict(weights="same_block")),
    _vit_mistake("weights_stacked_batch_first", "attention maps stacked as (B, depth, heads, N+1, N+1)",
                 "Return a list with one (B, heads, N+1, N+1) tensor per block (or torch.stack on dim 0).",
                 dict(weights="stack_batch_first")),
    _vit_mistake("weights_averaged", "attention maps averaged over the heads",
                 "Keep every head: each block's weights are (B, heads, N+1, N+1).", dict(weights="mean_heads")),
    _vit_mistake("weights_last_block", "only the last block's attention maps returned",
                 "Collect the weights of every block in the loop: a list of depth tensors.",
                 dict(weights="last_tensor"), dict(weights="last_list")),
]


def _vit_outputs(which: str):
    """Which output is first wrong: the attention maps of block 0 depend only on the tokens
    entering the blocks; the logits on everything."""
    def detect(view: View) -> str | None:
        found = first_wrong_output(view)
        if found is None:
            return None
        wrong = found[1]
        maps = [name for name in wrong if name.startswith("attention map")]
        logits = [name for name in wrong if name.startswith("logits")]
        if maps and not logits:
            seen = "maps"
        elif "attention map of block 0" in wrong:
            seen = "tokens"
        elif logits and not maps:
            seen = "logits_only" if logits == ["logits (return_attention=True)"] else "head"
        else:
            return None
        return _VIT_OUTPUTS[seen] if seen == which else None
    return detect


_VIT_OUTPUTS = {
    "maps": ("the logits are right but the attention maps are not: return each block's weights (B, heads, N+1, "
             "N+1), in block order, as a list"),
    "tokens": ("the tokens entering the first block are wrong (its attention maps differ): check the patch "
               "embedding, the class token (prepended as token 0, one copy per image) and the positions (added "
               "to all N + 1 tokens)"),
    "head": ("the blocks see the right tokens (every attention map is right) but the logits are wrong: after the "
             "last block apply self.norm, then self.head to the class token (position 0)"),
    "logits_only": "the logits with return_attention=True differ from those without it: "
                   "both calls must compute the same",
}


VIT_SYMPTOMS = (
    *PROPERTIES[1:], FLOAT_MIX, FRESH_CLASS_TOKEN, PROPERTIES[0],
    gradient_differs("the images and every parameter"),
    symptom("attention_maps_wrong", "right logits, wrong attention maps",
            "Return each block's weights (B, heads, N+1, N+1), in block order, as a list.",
            "Your logits are right: what exactly should the list of attention maps hold, and in which order?",
            _vit_outputs("maps")),
    symptom("tokens_before_blocks_wrong", "the tokens entering the first block are wrong",
            "Patch embedding, then the class token prepended (token 0, one per image), then the positions added "
            "to all N + 1 tokens.",
            "The first block's attention maps already differ: which of the steps before the blocks (patches, class "
            "token, positions) gives other tokens?", _vit_outputs("tokens")),
    symptom("head_wrong", "the blocks are right, the classification is not",
            "After the last block apply self.norm, then self.head to the class token (position 0).",
            "Every attention map is right, the logits are not: what happens to the tokens after the last block?",
            _vit_outputs("head")),
    symptom("return_attention_changes_logits", "other logits with return_attention=True",
            "Both calls compute the same logits; return_attention only adds the maps.",
            "Why would asking for the attention maps change the logits?", _vit_outputs("logits_only")),
    *RECIPE_SAYS,
)


def _vit_block_part():

    def TransformerEncoderBlock(dim, num_heads, mlp_dim):
        return vitref.TransformerEncoderBlock(dim, num_heads, mlp_dim=mlp_dim)
    return TransformerEncoderBlock

add('vit_forward', references=_vit_reference, catalogue=[*VIT_MISTAKES, blocks_reversed(), *VIT_SYMPTOMS],
    reference_parts=parts(TransformerEncoderBlock=_vit_block_part))


def _ce_reference():
    def cross_entropy(logits, targets):
        # torch's own loss, run here in the grader in float64 (vitref has no separate function)
        return F.cross_entropy(logits, targets)
    return [cross_entropy]


def _ce(fn):
    """A ``cross_entropy(logits, targets)`` that returns ``fn(logits, targets)``."""
    return function_answer("cross_entropy", fn)


def _log_softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def _pick(values, targets):
    return values[torch.arange(values.shape[0]), targets]


def _global_max_shift(x, t):
    # in float32, as the student's code runs on the large-logit inputs (exp underflows at -104 there,
    # at -745 in the grader's float64)
    shifted = (x - x.max()).float()
    return -_pick(shifted - torch.log(torch.exp(shifted).sum(-1, keepdim=True)), t).mean().to(x.dtype)


def _shift(x):
    return x - x.amax(dim=-1, keepdim=True)


CE_MISTAKES = [
    Mistake("no_log_softmax", "the logits used directly, without log-softmax",
            "The loss of one example is -log softmax(logits)[target] = logsumexp(logits) - logits[target].",
            _ce(lambda x, t: -_pick(x, t).mean())),
    Mistake("sum_not_mean", "summed over the batch instead of averaged",
            "The loss is the mean over the batch: .mean(), not .sum().",
            _ce(lambda x, t: -_pick(_log_softmax(x), t).sum())),
    Mistake("not_stable", "not numerically stable: exp of large logits overflows",
            "log(softmax(x)) with exp(1000) gives inf/NaN; subtract the maximum first (or use logsumexp).",
            _ce(lambda x, t: -torch.log(_pick(torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), t)).mean()),
            also=(_ce(lambda x, t: -_pick(x - torch.log(torch.exp(x).sum(-1, keepdim=True)), t).mean()),)),
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
    Mistake("global_max_shift", "shifted by the largest logit of the whole batch, not of each row",
            "x - x.max() leaves rows whose logits are far below the batch's maximum with exp(...) = 0 and "
            "log(0) = -inf; subtract each row's own maximum: x.amax(dim=-1, keepdim=True).",
            _ce(_global_max_shift)),
    Mistake("normaliser_over_batch", "log-sum-exp over the whole batch instead of each row",
            "Each example has its own normaliser: sum over the classes only, .sum(dim=-1, keepdim=True).",
            _ce(lambda x, t: -_pick(_shift(x) - torch.log(torch.exp(_shift(x)).sum()), t).mean())),
    Mistake("no_keepdim", "max or log-sum-exp without keepdim=True: (B,) broadcast against (B, C)",
            "A per-row value of shape (B,) lines up with the class axis of (B, C); keep the axis: "
            "keepdim=True gives (B, 1).",
            _ce(lambda x, t: -_pick(x - torch.logsumexp(x, dim=-1), t).mean()),
            also=(_ce(lambda x, t: -_pick(_log_softmax(x - x.max(dim=-1).values), t).mean()),
                  _ce(lambda x, t: -_pick(_shift(x) - torch.log(torch.exp(_shift(x)).sum(dim=-1)), t).mean()))),
    Mistake("one_hot_mean_over_all", "one-hot product averaged over all B * C entries",
            "(one_hot * log_probs) has one nonzero per row: sum over the classes, then average over the batch: "
            ".sum(dim=-1).mean().",
            _ce(lambda x, t: -(F.one_hot(t, x.shape[-1]).to(x.dtype) * _log_softmax(x)).mean())),
    Mistake("one_hot_without_num_classes", "F.one_hot(targets) without num_classes",
            "F.one_hot(targets) has max(targets) + 1 columns, fewer than C when the largest class is absent from "
            "the batch: pass num_classes=logits.shape[-1].",
            _ce(lambda x, t: -(F.one_hot(t).to(x.dtype) * _log_softmax(x)).sum(-1).mean())),
    Mistake("gather_wrong_axis", "gather along the batch axis",
            "log_probs.gather(1, targets[:, None]) picks column targets[b] of row b; gather(0, ...) picks rows.",
            _ce(lambda x, t: -_log_softmax(x).gather(0, t[:, None]).squeeze(1).mean())),
    Mistake("max_not_added_back", "the maximum subtracted inside the exp but not added back",
            "log(sum(exp(z))) = max(z) + log(sum(exp(z - max(z)))): with the shifted sum, use the shifted logits "
            "too (z - max - log(sum(exp(z - max)))).",
            _ce(lambda x, t: -_pick(x - torch.log(torch.exp(_shift(x)).sum(-1, keepdim=True)), t).mean())),
    Mistake("divided_by_classes", "divided by the number of classes instead of the batch size",
            "The mean is over the batch: divide the sum of the B picked values by B = logits.shape[0].",
            _ce(lambda x, t: -_pick(_log_softmax(x), t).sum() / x.shape[1])),
    Mistake("no_mean", "the loss of each example returned, not their mean",
            "Return one number: the mean over the batch, .mean().",
            _ce(lambda x, t: -_pick(_log_softmax(x), t))),
]


def _ce_shape(view: View) -> str | None:
    for case, loss in view.outputs("loss"):
        if np.shape(loss) not in ((), (1,)):
            return (f"the loss should be a single number (the mean over the batch), got shape {np.shape(loss)} "
                    f"on input {case.label}")
    return None


def _ce_ratio(view: View) -> str | None:
    """The same factor between the student's loss and the reference's on every moderate input."""
    ratios = []
    for row in view.rows:
        loss = (row.student.get("outputs") or {}).get("loss")
        if row.case.params.get("tests") == "large" or loss is None or np.size(loss) != 1 or not row.references:
            continue
        want = float(np.ravel(row.references[0]["loss"])[0])
        if abs(want) < 1e-6:
            continue
        ratios.append(float(np.ravel(loss)[0]) / want)
    if len(ratios) >= 3 and all(abs(r - ratios[0]) < 1e-4 * max(1.0, abs(ratios[0])) for r in ratios) \
            and abs(ratios[0] - 1) > 1e-3:
        return (f"the loss is {ratios[0]:.4g} times the expected one on every input: check the sign and what "
                f"you divide by (the mean over the B examples of -log p(target))")
    return None


def _ce_not_finite(view: View) -> str | None:
    for case, loss in view.outputs("loss"):
        if not np.all(np.isfinite(np.asarray(loss, dtype=np.float64))):
            return (f"the loss is {float(np.ravel(loss)[0])} on input {case.label}: the log-softmax overflows or "
                    f"underflows; subtract each row's maximum before exp and never take log(softmax)")
    return None


CE_SYMPTOMS = (
    *PROPERTIES, FLOAT_MIX,
    by_tag("large_logits_fail", "large", "right for moderate logits, wrong near +-1000",
           "the loss is right for moderate logits but not for logits near +-1000: the log-softmax overflows or "
           "underflows; compute it as z - max(z) - log(sum(exp(z - max(z)))) with the maximum of each row",
           "Your loss is right for moderate logits only: what does exp give for a logit of 1000, or of -1000?"),
    by_tag("gradient_differs", "grads", "right loss, wrong gradient",
           "the loss is right but its gradient with respect to the logits is not: compute it with torch operations "
           "on the logits (no .detach(), .data, numpy or .item())",
           "Your loss is right and its gradient is not: where does autograd lose the path from the logits?"),
    symptom("loss_not_scalar", "the loss is not a single number",
            "Return the mean over the batch: a 0-dim tensor.",
            "What should a loss over a batch be: one number per example, or one number?", _ce_shape),
    symptom("loss_not_finite", "an infinite or NaN loss",
            "Subtract each row's maximum before exp and never take log(softmax).",
            "Your loss is not a finite number: which step overflows or takes the log of 0?", _ce_not_finite),
    symptom("loss_scaled", "the loss off by a constant factor",
            "The loss is the mean over the B examples of -log p(target).",
            "Your loss is the expected one times the same number on every input: what do you divide by, and with "
            "which sign?", _ce_ratio),
    *RECIPE_SAYS,
)

add('cross_entropy', references=_ce_reference, catalogue=[*CE_MISTAKES, *CE_SYMPTOMS])
