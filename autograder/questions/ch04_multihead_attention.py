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
                energy = energy.masked_fill(mask == 0, float("-inf"))
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
from .common import build_flexible, first_if_tuple

MHA_CASES = [
    Case("MultiHeadAttention(emb_size=8, num_heads=2), x (3, 5, 8)", {"E": 8, "h": 2, "x": (3, 5, 8), "seed": 61},
         {3: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=12, num_heads=3), x (1, 4, 12)",
         {"E": 12, "h": 3, "x": (1, 4, 12), "seed": 62}, {1: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttention(emb_size=16, num_heads=4), x (2, 3, 16)",
         {"E": 16, "h": 4, "x": (2, 3, 16), "seed": 63}, {2: "B", 3: "N", 16: "E"}),
]


def _run_mha(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]}, heads=p["h"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    out = first_if_tuple(rec.call(module, x))
    rec.check_new_params(module)
    rec.output("out", out)

register(Question(
    id="q5",
    chapter="04_multihead_attention",
    title="Q5 multi-head attention (einsum + rearrange)",
    points=3,
    answer_name="MultiHeadAttention",
    kind="class",
    signature="MultiHeadAttention(emb_size, num_heads, dropout=0.); forward(x (B, N, E)) -> (B, N, E)",
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
            energy = energy.masked_fill(mask == 0, float("-inf"))
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
]


def _run_loop(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]},
                            heads=p["h"], head_width=p["E"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    out = first_if_tuple(rec.call(module, x))
    rec.check_new_params(module)
    rec.output("out", out)

register(Question(
    id="mha_loop",
    chapter="04_multihead_attention",
    title="Multi-head attention as a loop of heads",
    points=2,
    answer_name="MultiHeadAttentionLoop",
    kind="class",
    signature="MultiHeadAttentionLoop(emb_size, num_heads); forward(x (B, N, E)) -> (B, N, E)",
    cases=LOOP_CASES,
    run_case=_run_loop,
    forbidden=("attention",),
    outputs={"out": "(B, N, E)"},
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
