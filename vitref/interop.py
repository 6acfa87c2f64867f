"""Load a timm ``VisionTransformer``'s weights into :class:`vitref.ViT`.

With a pretrained timm model (online, e.g. in Colab)::

    timm_model = timm.create_model("vit_tiny_patch16_224", pretrained=True)
    model = vitref.from_timm(timm_model)      # same logits, your own code

Only the plain ViT that :class:`~vitref.vit.ViT` implements is accepted: class token,
``global_pool="token"``, learned positions covering the class token, pre-LN blocks with
GELU MLPs. Anything else raises a ``ValueError`` naming the feature.
"""
from __future__ import annotations

import torch
from torch import nn

from .vit import ViT


def _require(condition: bool, feature: str) -> None:
    if not condition:
        raise ValueError(f"from_timm: unsupported timm model feature: {feature} (vitref.ViT is a plain ViT)")


def _is_identity(module) -> bool:
    return module is None or isinstance(module, nn.Identity)


def _describe(timm_vit) -> dict:
    """Read the configuration of a timm VisionTransformer, refusing what ViT cannot express."""
    _require(hasattr(timm_vit, "patch_embed") and hasattr(timm_vit, "blocks"), "not a timm VisionTransformer")
    _require(getattr(timm_vit, "cls_token", None) is not None, "no class token")
    _require(getattr(timm_vit, "global_pool", "token") == "token", f"global_pool={timm_vit.global_pool!r}")
    _require(getattr(timm_vit, "num_reg_tokens", 0) == 0, "register tokens")
    _require(not getattr(timm_vit, "no_embed_class", False), "position embedding without the class token")
    _require(getattr(timm_vit, "attn_pool", None) is None, "attention pooling")
    _require(not getattr(timm_vit, "dynamic_img_size", False), "dynamic image size")
    for name in ("norm_pre", "fc_norm", "patch_embed.norm"):
        obj = timm_vit
        for part in name.split("."):
            obj = getattr(obj, part, None)
        _require(_is_identity(obj), f"{name} layer")
    _require(isinstance(timm_vit.head, nn.Linear), "no linear classification head (num_classes=0)")
    conv = timm_vit.patch_embed.proj
    _require(isinstance(conv, nn.Conv2d) and conv.kernel_size == conv.stride, "overlapping patch projection")
    img_size = timm_vit.patch_embed.img_size
    _require(img_size[0] == img_size[1] and conv.kernel_size[0] == conv.kernel_size[1], "non-square images or patches")
    first = timm_vit.blocks[0]
    dim, mlp_dim = conv.out_channels, first.mlp.fc1.out_features
    for i, block in enumerate(timm_vit.blocks):
        attn = block.attn
        for sub in ("ls1", "ls2", "drop_path1", "drop_path2"):
            sub_module = getattr(block, sub, None)
            _require(_is_identity(sub_module) or sub.startswith("drop_path"), f"block {i} {sub} (layer scale)")
        for sub in ("q_norm", "k_norm", "norm"):
            _require(_is_identity(getattr(attn, sub, None)), f"block {i} attn.{sub}")
        _require(getattr(attn, "gate", None) is None, f"block {i} gated attention")
        _require(attn.qkv.out_features == 3 * dim, f"block {i} attention width != embedding width")
        _require(type(block.mlp).__name__ == "Mlp" and isinstance(block.mlp.act, nn.GELU)
                 and block.mlp.act.approximate == "none", f"block {i} MLP is not Linear-GELU-Linear")
        _require(_is_identity(getattr(block.mlp, "norm", None)), f"block {i} mlp.norm")
        _require(block.mlp.fc1.out_features == mlp_dim, f"block {i} MLP width differs")
        _require(isinstance(block.norm1, nn.LayerNorm) and isinstance(block.norm2, nn.LayerNorm),
                 f"block {i} norm type")
    _require(isinstance(timm_vit.norm, nn.LayerNorm), "final norm is not LayerNorm")
    return dict(img_size=img_size[0], patch_size=conv.kernel_size[0], in_channels=conv.in_channels,
                num_classes=timm_vit.head.out_features, dim=dim, depth=len(timm_vit.blocks),
                num_heads=first.attn.num_heads, mlp_dim=mlp_dim, norm_eps=timm_vit.norm.eps)


@torch.no_grad()
def from_timm(timm_vit) -> ViT:
    """A :class:`~vitref.vit.ViT` with ``timm_vit``'s weights: identical outputs in eval mode."""
    model = ViT(**_describe(timm_vit))
    source = timm_vit.state_dict()
    mapping = {"cls_token": "cls_token", "pos_embed": "pos_embed",
               "patch_embed.proj.weight": "patch_embed.proj.weight", "patch_embed.proj.bias": "patch_embed.proj.bias",
               "norm.weight": "norm.weight", "norm.bias": "norm.bias", "head.weight": "head.weight",
               "head.bias": "head.bias"}
    for i in range(len(model.blocks)):
        for timm_name, ours in (("norm1", "norm1"), ("attn.qkv", "attn.qkv"), ("attn.proj", "attn.projection"),
                                ("norm2", "norm2"), ("mlp.fc1", "mlp.0"), ("mlp.fc2", "mlp.3")):
            for kind in ("weight", "bias"):
                mapping[f"blocks.{i}.{timm_name}.{kind}"] = f"blocks.{i}.{ours}.{kind}"
    target = model.state_dict()
    converted = {}
    for timm_name, ours in mapping.items():
        if timm_name in source:
            converted[ours] = source[timm_name]
        else:  # e.g. qkv_bias=False: the bias is absent in timm, zero in vitref
            converted[ours] = torch.zeros_like(target[ours])
    model.load_state_dict(converted)
    dtype = next(timm_vit.parameters()).dtype
    return model.to(dtype=dtype, device=timm_vit.cls_token.device).train(timm_vit.training)


__all__ = ["from_timm"]
