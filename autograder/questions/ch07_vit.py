"""Chapter 7, the Vision Transformer: its forward pass (with attention maps) and cross-entropy.

Skeletons::

    class ViT(nn.Module):
        def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10,
                     dim=128, depth=6, num_heads=4, mlp_dim=512):
            super().__init__()
            num_patches = (img_size // patch_size) ** 2
            self.patch_embed = ConvPatchEmbedding(in_channels, patch_size, dim)   # (B, N, dim)
            self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
            self.blocks = nn.ModuleList([TransformerEncoderBlock(dim, num_heads, mlp_dim=mlp_dim)
                                         for _ in range(depth)])               # pre-LN blocks
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, x, return_attention=False):
            # patches -> prepend the class token -> add positions -> blocks (collect each block's
            # attention weights (B, heads, N+1, N+1)) -> final LayerNorm -> head on the class token
            ...
            return (logits, attentions) if return_attention else logits

    def cross_entropy(logits, targets):
        # logits (B, C), targets (B,) integers in [0, C) -> mean loss, a 0-dim tensor
        ...
"""
from __future__ import annotations


import numpy as np
import torch

from . import inputs as I
from .base import Case, Question, register
from .errors import CaseFailure
from .common import build_flexible, logits_and_targets, record_loss

# --------------------------------------------------------------------------- ViT forward

# Key projections' biases get a zero gradient by design (softmax ignores a constant shift of a
# query's scores): excluded from the parameter-gradient checks.
NO_KEY_BIAS = ("!key.bias", "!keys.bias", "!k.bias", "!k_proj.bias")


def _vit_case(label, cfg, B, seed, **extra):
    n1 = (cfg["img_size"] // cfg["patch_size"]) ** 2 + 1
    dims = {B: "B", cfg["num_classes"]: "num_classes", cfg["num_heads"]: "heads", n1: "N+1"}
    if len(dims) < 4:                     # names only for distinct sizes
        dims = {B: "B", cfg["num_classes"]: "num_classes"}
    return Case(label, {"cfg": cfg, "B": B, "seed": seed, **extra}, dims)


VIT_CASES = [
    _vit_case("ViT(img_size=8, patch_size=4, in_channels=3, num_classes=7, dim=16, depth=2, num_heads=2, "
              "mlp_dim=32), images (3, 3, 8, 8), with return_attention=True",
              dict(img_size=8, patch_size=4, in_channels=3, num_classes=7, dim=16, depth=2, num_heads=2,
                   mlp_dim=32), 3, 171),
    _vit_case("ViT(img_size=6, patch_size=2, in_channels=1, num_classes=3, dim=12, depth=1, num_heads=3, "
              "mlp_dim=24), images (1, 1, 6, 6), with return_attention=True",
              dict(img_size=6, patch_size=2, in_channels=1, num_classes=3, dim=12, depth=1, num_heads=3,
                   mlp_dim=24), 1, 172),
    _vit_case("ViT(img_size=8, patch_size=4, in_channels=2, num_classes=6, dim=8, depth=3, num_heads=4, "
              "mlp_dim=16) in float64, images (2, 2, 8, 8), with return_attention=True, gradients of the images "
              "and of every parameter",
              dict(img_size=8, patch_size=4, in_channels=2, num_classes=6, dim=8, depth=3, num_heads=4,
                   mlp_dim=16), 2, 173, dtype="float64", grads=True, param_grads=NO_KEY_BIAS, tests="grads"),
]


def _shape(value) -> str:
    shape = getattr(value, "shape", None)
    if type(value) is torch.Tensor and shape is not None:
        return f"a tensor of shape ({', '.join(str(int(s)) for s in shape)})"
    if type(value) in (list, tuple):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def _run_vit(answer, case, rec):
    p = case.params
    cfg = p["cfg"]
    model = build_flexible(rec, answer, tuple(cfg.values()), cfg, heads=cfg["num_heads"], head_width=cfg["dim"],
                           dtype=p.get("dtype"))
    size = cfg["img_size"]
    images = rec.tensor(I.randn((p["B"], cfg["in_channels"], size, size), p["seed"]), dtype=p.get("dtype"),
                        requires_grad=bool(p.get("grads")))
    logits = rec.call(model, images)
    rec.check_new_params(model)
    rec.output("logits", logits)
    result = rec.call(model, images, return_attention=True)
    logits2, attentions = rec.unpack(result, ("logits", "attentions"), "ViT.forward(x, return_attention=True)")
    rec.output("logits (return_attention=True)", logits2)
    if type(attentions) is torch.Tensor and attentions.dim() == 5 and attentions.shape[0] == cfg["depth"]:
        attentions = list(attentions.unbind(0))          # stacked (depth, B, heads, N+1, N+1)
    if type(attentions) not in (list, tuple):
        raise CaseFailure(f"the attention maps should be a list with one (B, heads, N+1, N+1) tensor per block, "
                          f"got {_shape(attentions)}")
    if len(attentions) != cfg["depth"]:
        raise CaseFailure(f"expected one attention map per block (depth={cfg['depth']}), got {len(attentions)}")
    for i, weights in enumerate(attentions):
        rec.output(f"attention map of block {i}", weights)
    if p.get("grads"):
        upstream = rec.tensor(I.randn((p["B"], cfg["num_classes"]), p["seed"] + 7))
        rec.grads(logits, upstream, {"images": images}, model, params=bool(p.get("param_grads")))


register(Question(id="vit_forward", chapter="07_vit", title="ViT forward pass with attention maps", points=3,
                  answer_name="ViT", kind="class", cases=VIT_CASES, run_case=_run_vit, forbidden=("attention",),
                  outputs={"logits": "(B, num_classes)", "logits (return_attention=True)": "(B, num_classes)",
                           **{f"attention map of block {i}": "(B, heads, N+1, N+1)" for i in range(3)},
                           "grad_images": "(B, C, H, W)"}))

# --------------------------------------------------------------------------- cross-entropy

CE_CASES = [
    Case("logits (4, 5), targets (4,)", {"B": 4, "C": 5, "seed": 181, "scale": 2.0}, {4: "B", 5: "C"}),
    Case("logits (1, 3), targets (1,)", {"B": 1, "C": 3, "seed": 182, "scale": 1.0}, {1: "B", 3: "C"}),
    Case("logits (3, 6) with values near +-1000 (overflow test)", {"B": 3, "C": 6, "seed": 183, "scale": 800.0,
                                                                   "unlikely_targets": True, "tests": "large"},
         {3: "B", 6: "C"}),
    Case("logits (6, 4), targets (6,)", {"B": 6, "C": 4, "seed": 184, "scale": 3.0}, {6: "B", 4: "C"}),
    Case("logits (2, 5) with values near +-1000, targets the largest logits", {"B": 2, "C": 5, "seed": 185,
                                                                               "scale": 800.0, "likely_targets": True,
                                                                               "tests": "large"},
         {2: "B", 5: "C"}),
    Case("logits (5, 5) in float64, targets (5,)", {"B": 5, "C": 5, "seed": 186, "scale": 2.0, "dtype": "float64"}),
    Case("logits (4, 6) in float64, targets (4,), gradient of the loss with respect to the logits",
         {"B": 4, "C": 6, "seed": 187, "scale": 2.0, "dtype": "float64", "grads": True, "tests": "grads"},
         {4: "B", 6: "C"}),
]


def _run_ce(answer, case, rec):
    p = case.params
    logits, targets = logits_and_targets(rec, p)
    value = rec.call(answer, logits, targets)
    record_loss(rec, value)
    if p.get("grads"):
        if type(value) is not torch.Tensor:
            raise CaseFailure(f"the loss is a {type(value).__name__}, not a torch tensor: training calls "
                              f"loss.backward() on it")
        if value.numel() != 1:
            raise CaseFailure(f"the loss should be a single number (the mean over the batch), got a tensor of "
                              f"shape {tuple(int(s) for s in value.shape)}")
        rec.grads(value, rec.tensor(np.ones((), dtype=np.float32)), {"logits": logits})

register(Question(id="cross_entropy", chapter="07_vit", title="Cross-entropy loss", points=2,
                  answer_name="cross_entropy", kind="function", cases=CE_CASES, run_case=_run_ce,
                  forbidden=("cross_entropy",), outputs={"loss": "a single number", "grad_logits": "(B, C)"}))
