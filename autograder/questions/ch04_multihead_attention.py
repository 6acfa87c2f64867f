"""Chapter 4, multi-head attention: the slides' Q5 (fused, einsum) and a loop of heads.

Skeleton of Q5 (the slides' MultiHeadAttention, blanks in the last lines)::

    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size=768, num_heads=8, dropout=0.):
            super().__init__()
            self.emb_size, self.num_heads = emb_size, num_heads
            self.qkv = nn.Linear(emb_size, emb_size * 3)       # queries, keys, values of all heads
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None):
            qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]     # each (B, h, N, d)
            energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)
            if mask is not None:
                energy = energy.masked_fill(mask == 0, -1e9)
            scaling = (self.emb_size // self.num_heads) ** 0.5
            att = F.softmax(energy / scaling, dim=-1)
            att = self.att_drop(att)
            # Q5. sum up over the third axis, then rearrange the heads back and project
            out = torch.einsum('bhal, bhlv -> ...', att, values)
            out = rearrange(out, "...")
            out = self.projection(out)
            return out

Correct answers may also lay the fused projection out as ``(h d qkv)`` or use three
separate linear layers: the checker loads the same weights either way.
"""
from __future__ import annotations

from . import inputs as I
from .base import Case, Question, register
from .ch03_attention import NO_KEY_BIAS, case_mask
from .common import build_flexible, call_with_mask, first_if_tuple

MHA_CASES = [
    Case("MultiHeadAttention(emb_size=8, num_heads=2), x (3, 5, 8)", {"E": 8, "h": 2, "x": (3, 5, 8), "seed": 61},
         {3: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=12, num_heads=3), x (1, 4, 12)",
         {"E": 12, "h": 3, "x": (1, 4, 12), "seed": 62}, {1: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttention(emb_size=16, num_heads=4), x (2, 3, 16)",
         {"E": 16, "h": 4, "x": (2, 3, 16), "seed": 63}, {2: "B", 3: "N", 16: "E"}),
    Case("MultiHeadAttention(emb_size=8, num_heads=2), x (2, 5, 8), causal mask (5, 5)",
         {"E": 8, "h": 2, "x": (2, 5, 8), "causal": 5, "seed": 64, "tests": "mask"}, {2: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=12, num_heads=3), x (2, 4, 12), mask (2, 1, 4, 4) with a fully masked row",
         {"E": 12, "h": 3, "x": (2, 4, 12), "mask": (2, 1, 4, 4), "full_rows": [(1, 0, 2)], "seed": 65,
          "tests": "mask"}, {2: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttention(emb_size=8, num_heads=2, dropout=0.5) in float64 and eval mode, x (2, 3, 8) "
         "(dropout must be off in eval mode)",
         {"E": 8, "h": 2, "x": (2, 3, 8), "dropout": 0.5, "dtype": "float64", "seed": 66, "tests": "dropout_eval"},
         {2: "B", 3: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=8, num_heads=4, dropout=1.0) in float64 and train mode, x (2, 3, 8) "
         "(every attention weight dropped)",
         {"E": 8, "h": 4, "x": (2, 3, 8), "dropout": 1.0, "train": True, "dtype": "float64", "seed": 67,
          "tests": "dropout_all"},
         {2: "B", 3: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=12, num_heads=2, dropout=0.5) in float64 and train mode, x (2, 4, 12), "
         "torch.manual_seed(0) before the call (dropout on the attention weights)",
         {"E": 12, "h": 2, "x": (2, 4, 12), "dropout": 0.5, "train": True, "dtype": "float64", "seed": 68,
          "tests": "dropout_seeded"}, {2: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttention(emb_size=8, num_heads=2) in float64, x (2, 3, 8), causal mask (3, 3), gradients of "
         "x and of every parameter",
         {"E": 8, "h": 2, "x": (2, 3, 8), "causal": 3, "dtype": "float64", "grads": True, "param_grads": NO_KEY_BIAS,
          "seed": 69, "tests": "grads"}, {2: "B", 3: "N", 8: "E"}),
]


def _mask(rec, p):
    """The case's mask: causal (N, N), or random with fully masked rows; None without one."""
    mask = case_mask(p)
    return None if mask is None else rec.tensor(mask)


def _input(rec, p):
    return rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))


def _backward(rec, p, module, x, out):
    if p.get("grads"):
        upstream = rec.tensor(I.randn(p["x"], p["seed"] + 7))                      # (B, N, E)
        rec.grads(out, upstream, {"x": x}, module, params=bool(p.get("param_grads")))


def _run_mha(answer, case, rec):
    p = case.params
    kwargs = {"emb_size": p["E"], "num_heads": p["h"]}
    args = (p["E"], p["h"])
    if "dropout" in p:
        kwargs["dropout"], args = p["dropout"], args + (p["dropout"],)
    module = build_flexible(rec, answer, args, kwargs, heads=p["h"], train=bool(p.get("train")),
                            dtype=p.get("dtype"))
    x = _input(rec, p)
    if "dropout" in p:
        rec.seed(0)                   # dropout masks drawn the same way on both sides (float64 inputs)
    out = first_if_tuple(call_with_mask(rec, module, x, mask=_mask(rec, p), mask_name="mask"))
    rec.check_new_params(module)
    rec.output("out", out)
    _backward(rec, p, module, x, out)

register(Question(
    id="q5",
    chapter="04_multihead_attention",
    title="Q5 multi-head attention (einsum + rearrange)",
    points=3,
    answer_name="MultiHeadAttention",
    kind="class",
    signature="MultiHeadAttention(emb_size, num_heads, dropout=0.); forward(x (B, N, E), mask=None) -> (B, N, E)",
    cases=MHA_CASES,
    run_case=_run_mha,
    forbidden=("attention",),
    outputs={"out": "(B, N, E)"},
    skeleton='''class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)   # queries, keys and values of all heads
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]             # each (B, h, N, d)
        energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)  # (B, h, N, N)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        att = self.att_drop(att)
        # Q5. Fill in the blanks of einsum: sum up over the third axis,
        # then rearrange the heads back into one vector per token and apply the projection.
        out = torch.einsum('bhal, bhlv -> ...', att, values)
        out = rearrange(out, "...")
        out = self.projection(out)
        return out
''',
))

# --------------------------------------------------------------------------- loop of heads

LOOP_CASES = [
    Case("MultiHeadAttentionLoop(emb_size=8, num_heads=2), x (3, 5, 8)",
         {"E": 8, "h": 2, "x": (3, 5, 8), "seed": 71}, {3: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), x (1, 4, 12)",
         {"E": 12, "h": 3, "x": (1, 4, 12), "seed": 72}, {1: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), x (2, 5, 12), return_attention=True",
         {"E": 12, "h": 3, "x": (2, 5, 12), "seed": 73, "return_attention": True, "tests": "weights"},
         {2: "B", 3: "h", 5: "N", 12: "E"}),
    Case("MultiHeadAttentionLoop(emb_size=8, num_heads=2) in float64, x (3, 4, 8), mask (3, 4, 4) with fully "
         "masked rows, return_attention=True",
         {"E": 8, "h": 2, "x": (3, 4, 8), "mask": (3, 4, 4), "full_rows": [(0, 3), (2, 1)], "seed": 74,
          "dtype": "float64", "return_attention": True, "tests": "mask"}, {3: "B", 2: "h", 4: "N", 8: "E"}),
    Case("MultiHeadAttentionLoop(emb_size=8, num_heads=4) in float64, x (2, 3, 8), causal mask (3, 3), "
         "gradients of x and of every parameter",
         {"E": 8, "h": 4, "x": (2, 3, 8), "causal": 3, "dtype": "float64", "grads": True, "param_grads": NO_KEY_BIAS,
          "seed": 75, "tests": "grads"}, {2: "B", 3: "N", 8: "E"}),
]


def _run_loop(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]},
                            heads=p["h"], head_width=p["E"], dtype=p.get("dtype"))
    x = _input(rec, p)
    mask = _mask(rec, p)
    if p.get("return_attention"):
        kwargs = {"return_attention": True} if mask is None else {"mask": mask, "return_attention": True}
        result = rec.call(module, x, **kwargs)
        out, weights = rec.unpack(result, ("out", "weights"),
                                  "MultiHeadAttentionLoop.forward(x, mask, return_attention=True)")
    else:
        out, weights = first_if_tuple(call_with_mask(rec, module, x, mask=mask, mask_name="mask")), None
    rec.check_new_params(module)
    rec.output("out", out)
    if weights is not None:
        rec.output("weights", weights)
    _backward(rec, p, module, x, out)

register(Question(
    id="mha_loop",
    chapter="04_multihead_attention",
    title="Multi-head attention as a loop of heads",
    points=2,
    answer_name="MultiHeadAttentionLoop",
    kind="class",
    signature="MultiHeadAttentionLoop(emb_size, num_heads); forward(x (B, N, E), mask=None, "
              "return_attention=False) -> out (B, N, E), or (out, weights (B, h, N, N))",
    cases=LOOP_CASES,
    run_case=_run_loop,
    forbidden=("attention",),
    outputs={"out": "(B, N, E)", "weights": "(B, h, N, N)"},
    skeleton='''class MultiHeadAttentionLoop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        # x: (B, N, emb_size); each head gives (out (B, N, head_dim), weights (B, N, N))
        ...
        return (out, weights) if return_attention else out   # out (B, N, emb_size), weights (B, h, N, N)
''',
))
