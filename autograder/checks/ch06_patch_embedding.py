"""Chapter 6, patch embedding: the slides' Q2-Q4 (one PatchEmbedding class, three blanks)
and the Conv2d patch embedding.

Q2, Q3 and Q4 each check one part of the *same* class, so they also pass on the final
version of the notebook (and Q2/Q3 on the earlier versions, built without ``img_size``):

* q2: ``module.projection(images)`` is Rearrange('b c (h s1) (w s2) -> b (h w) (s1 s2 c)') + Linear;
* q3: ``module(images)`` starts with the class token, repeated for every image of the batch
  (positions may already be added: none, the sinusoidal table or the learned one);
* q4: ``module(images)`` adds the sinusoidal table ``getPositionEncoding(N + 1, emb_size)``.

Skeleton (the slides' Q2-Q4)::

    class PatchEmbedding(nn.Module):
        def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
            self.patch_size = patch_size
            super().__init__()
            self.projection = nn.Sequential(
                # Q2. break-down the image in s1 x s2 patches and flat them,
                # then project the dimension to the emb_size.
                Rearrange('b c (h s1) (w s2) -> ...', s1=patch_size, s2=patch_size),
                nn.Linear(..., ...)
            )
            self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
            self.learnable_positions = nn.Parameter(torch.randn((img_size // patch_size) ** 2 + 1, emb_size))
            # Q4. the positional embedding from getPositionEncoding: fill in its parameters
            self.sinusoids_positions = torch.from_numpy(getPositionEncoding(...)).float()

        def forward(self, x):
            b = x.shape[0]
            x = self.projection(x)
            # Q3. the cls_token repeated as much as the batch size
            cls_tokens = repeat(self.cls_token, '...', b=b)
            x = torch.cat([cls_tokens, x], dim=1)
            x += self.sinusoids_positions
            return x
"""
from __future__ import annotations

import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from .. import inputs as I
from ..core import Case, Mistake, Question, register
from ._common import build_flexible, parts, vitref

PATCH = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"

# --------------------------------------------------------------------------- shared helpers


def _build_patch_embedding(rec, answer, p, need_img_size=False):
    """PatchEmbedding(in_channels, patch_size, emb_size, img_size); the earlier versions of the
    class (before Q4) take no img_size; other parameter names get the values positionally."""
    kwargs = {"in_channels": p["C"], "patch_size": p["P"], "emb_size": p["E"]}
    args = (p["C"], p["P"], p["E"])
    try:
        return build_flexible(rec, answer, args + (p["img"],), {**kwargs, "img_size": p["img"]})
    except TypeError as error:
        if need_img_size or ("img_size" not in str(error) and "positional argument" not in str(error)):
            raise
    return build_flexible(rec, answer, args, kwargs)


def _images(rec, p):
    return rec.tensor(I.randn((p["B"], p["C"], p["img"], p["img"]), p["seed"]))   # (B, C, H, W)


def _dims(p):
    n = (p["img"] // p["P"]) ** 2
    dims = {p["B"]: "B", n: "N", p["E"]: "emb_size", p["P"] * p["P"] * p["C"]: "P*P*C"}
    dims.setdefault(n + 1, "N+1")
    return dims


def _case(label, **p):
    return Case(label, p, _dims(p))


# --------------------------------------------------------------------------- q2 projection

Q2_CASES = [
    _case("PatchEmbedding(in_channels=3, patch_size=4, emb_size=10), images (2, 3, 8, 8)",
          C=3, P=4, E=10, img=8, B=2, seed=131),
    _case("PatchEmbedding(in_channels=1, patch_size=2, emb_size=6), images (1, 1, 6, 6)",
          C=1, P=2, E=6, img=6, B=1, seed=132),
    _case("PatchEmbedding(in_channels=2, patch_size=2, emb_size=6), images (3, 2, 4, 4)",
          C=2, P=2, E=6, img=4, B=3, seed=133),
]


def _run_q2(answer, case, rec):
    p = case.params
    module = _build_patch_embedding(rec, answer, p)
    out = rec.call(module.projection, _images(rec, p))
    rec.output("patch_embeddings", out)


def _projection_reference():
    v = vitref()

    class ProjectionOnly(nn.Module):
        def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=None):
            super().__init__()
            self.projection = v.PatchEmbedding(in_channels, patch_size, emb_size, img_size or patch_size,
                                               positions=None).projection
    return [ProjectionOnly]


def _q2(pattern=PATCH, in_features="ppc", swapped=False):
    def build(parts):
        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                features = {"ppc": patch_size * patch_size * in_channels, "pp": patch_size * patch_size}[in_features]
                linear = nn.Linear(emb_size, features) if swapped else nn.Linear(features, emb_size)
                self.projection = nn.Sequential(Rearrange(pattern, s1=patch_size, s2=patch_size), linear)

            def forward(self, x):
                return self.projection(x)
        return PatchEmbedding
    return build


Q2_MISTAKES = [
    Mistake("channels_first", "channels first inside each patch, (c s1 s2)",
            "Use the slides' pattern 'b c (h s1) (w s2) -> b (h w) (s1 s2 c)': channels last in a patch.",
            _q2(pattern="b c (h s1) (w s2) -> b (h w) (c s1 s2)")),
    Mistake("transposed_patch", "pixels inside a patch taken column by column, (s2 s1 c)",
            "Inside a patch go row by row: (s1 s2 c).", _q2(pattern="b c (h s1) (w s2) -> b (h w) (s2 s1 c)")),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Number the patches row by row: (h w).", _q2(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)")),
    Mistake("in_features_without_channels", "Linear input size P*P instead of P*P*C",
            "A flattened patch has patch_size * patch_size * in_channels numbers.", _q2(in_features="pp")),
    Mistake("linear_swapped", "nn.Linear(emb_size, P*P*C): input and output sizes swapped",
            "nn.Linear(in_features, out_features): from P*P*C to emb_size.", _q2(swapped=True)),
]

register(Question(
    id="q2", chapter="06_patch_embedding", title="Q2 patch embedding projection (Rearrange + Linear)", points=2,
    answer_name="PatchEmbedding", kind="class",
    signature="PatchEmbedding(in_channels, patch_size, emb_size[, img_size]); .projection(images) -> (B, N, E)",
    cases=Q2_CASES, run_case=_run_q2, references=_projection_reference, catalogue=Q2_MISTAKES,
    outputs={"patch_embeddings": "(B, N, emb_size)"},
    skeleton='''class PatchEmbedding(nn.Module):
    def __init__(self, in_channels: int = 3, patch_size: int = 16, emb_size: int = 768):
        self.patch_size = patch_size
        super().__init__()
        self.projection = nn.Sequential(
            # Q2. Fill in the blanks below.
            # The layer should perform
            # break-down the image in s1 x s2 patches and flat them
            # The linear layer should project the dimension to the emb_size.
            Rearrange('b c (h s1) (w s2) -> ', s1=patch_size, s2=patch_size),
            nn.Linear( , )
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.projection(x)
        return x
''',
))

def _pe_part():
    import numpy as np

    def getPositionEncoding(seq_len, d, n=10000):
        if d % 2:
            # vitref refuses odd widths; only the catalogue's swapped-arguments answer asks for
            # one, and there only the table's shape matters (adding it fails).
            return np.zeros((seq_len, d))
        return vitref().sinusoidal_encoding(seq_len, d, n).double().numpy()
    return getPositionEncoding


# --------------------------------------------------------------------------- q3 class token

Q3_CASES = [
    _case("PatchEmbedding(in_channels=3, patch_size=4, emb_size=10, img_size=8), images (1, 3, 8, 8)",
          C=3, P=4, E=10, img=8, B=1, seed=141),
    _case("PatchEmbedding(in_channels=3, patch_size=4, emb_size=10, img_size=8), images (3, 3, 8, 8)",
          C=3, P=4, E=10, img=8, B=3, seed=142),
    _case("PatchEmbedding(in_channels=1, patch_size=2, emb_size=6, img_size=6), images (2, 1, 6, 6)",
          C=1, P=2, E=6, img=6, B=2, seed=143),
]


def _run_tokens(answer, case, rec, need_img_size=False):
    p = case.params
    module = _build_patch_embedding(rec, answer, p, need_img_size=need_img_size)
    out = rec.call(module, _images(rec, p))
    rec.check_new_params(module)
    rec.output("tokens", out)


def _run_q3(answer, case, rec):
    _run_tokens(answer, case, rec)


def _tokens_references(*kinds):
    def make():
        v = vitref()
        refs = []
        for kind in kinds:
            class Reference(v.PatchEmbedding):
                positions_kind = kind

                def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=None):
                    super().__init__(in_channels, patch_size, emb_size, img_size or patch_size,
                                     positions=self.positions_kind)
            refs.append(Reference)
        return refs
    return make


def _q3(cls_mode, positions=None):
    """A wrong class token; ``positions`` (None, "sinusoidal", "learned") as the final
    version of the class adds them after the class token."""
    def build(parts):
        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                self.projection = nn.Sequential(Rearrange(PATCH, s1=patch_size, s2=patch_size),
                                                nn.Linear(patch_size * patch_size * in_channels, emb_size))
                self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
                num_tokens = (img_size // patch_size) ** 2 + 1
                if positions == "learned":
                    self.learnable_positions = nn.Parameter(torch.randn(num_tokens, emb_size))
                elif positions == "sinusoidal":
                    table = torch.as_tensor(parts.getPositionEncoding(num_tokens, emb_size)).float()
                    self.register_buffer("sinusoids_positions", table)

            def forward(self, x):
                b = x.shape[0]
                x = self.projection(x)
                if cls_mode == "not_repeated":
                    x = torch.cat([self.cls_token, x], dim=1)
                else:
                    cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
                    if cls_mode == "at_end":
                        x = torch.cat([x, cls_tokens], dim=1)
                    elif cls_mode == "added":
                        x = x + cls_tokens
                    else:
                        raise ValueError(cls_mode)
                if positions == "learned":
                    x = x + self.learnable_positions[:x.shape[1]]
                elif positions == "sinusoidal":
                    x = x + self.sinusoids_positions[:x.shape[1]]
                return x
        return PatchEmbedding
    return build


def _q3_mistake(key, title, hint, cls_mode):
    return Mistake(key, title, hint, _q3(cls_mode), ("getPositionEncoding",),
                   also=(_q3(cls_mode, "sinusoidal"), _q3(cls_mode, "learned")))


Q3_MISTAKES = [
    _q3_mistake("cls_not_repeated", "class token not repeated over the batch",
                "repeat(self.cls_token, '() n e -> b n e', b=b) gives one class token per image; without it "
                "torch.cat fails for batches larger than 1.", "not_repeated"),
    _q3_mistake("cls_at_end", "class token appended after the patches",
                "The class token is token 0: torch.cat([cls_tokens, x], dim=1).", "at_end"),
    _q3_mistake("cls_added", "class token added to every patch instead of prepended",
                "Concatenate it as an extra token (N + 1 tokens), do not add it.", "added"),
]

register(Question(
    id="q3", chapter="06_patch_embedding", title="Q3 class token (repeat per batch)", points=1,
    answer_name="PatchEmbedding", kind="class",
    signature="PatchEmbedding(in_channels, patch_size, emb_size[, img_size]); forward(images) -> (B, N+1, E)",
    cases=Q3_CASES, run_case=_run_q3, references=_tokens_references(None, "sinusoidal", "learned"),
    catalogue=Q3_MISTAKES, outputs={"tokens": "(B, N+1, emb_size)"}, reference_parts=parts(getPositionEncoding=_pe_part),
    skeleton='''def forward(self, x: Tensor) -> Tensor:
    x = self.projection(x)
    # Q3. Fill in the blank in the repeat function.
    # The cls_token should be repeated as much as the batch size.
    cls_tokens = repeat(self.cls_token, \'\'\'Fill Here.\'\'\')
    x = torch.cat([cls_tokens, x], dim=1)
    return x
''',
))

# --------------------------------------------------------------------------- q4 sinusoidal positions

Q4_CASES = [
    _case("PatchEmbedding(in_channels=3, patch_size=4, emb_size=10, img_size=8), images (2, 3, 8, 8)",
          C=3, P=4, E=10, img=8, B=2, seed=151),
    _case("PatchEmbedding(in_channels=1, patch_size=2, emb_size=6, img_size=8), images (1, 1, 8, 8)",
          C=1, P=2, E=6, img=8, B=1, seed=152),
]


def _run_q4(answer, case, rec):
    _run_tokens(answer, case, rec, need_img_size=True)


def _q4(mode):
    def build(parts):
        getPositionEncoding = parts.getPositionEncoding

        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                num_patches = (img_size // patch_size) ** 2
                self.projection = nn.Sequential(Rearrange(PATCH, s1=patch_size, s2=patch_size),
                                                nn.Linear(patch_size * patch_size * in_channels, emb_size))
                self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
                self.learnable_positions = nn.Parameter(torch.randn(num_patches + 1, emb_size))
                if mode == "swapped":
                    table = getPositionEncoding(emb_size, num_patches + 1)
                elif mode in ("num_patches", "before_cls"):
                    table = getPositionEncoding(num_patches, emb_size)
                else:
                    table = getPositionEncoding(num_patches + 1, emb_size)
                self.register_buffer("sinusoids_positions", torch.as_tensor(table).float())

            def forward(self, x):
                b = x.shape[0]
                x = self.projection(x)
                if mode == "before_cls":
                    x = x + self.sinusoids_positions
                cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
                x = torch.cat([cls_tokens, x], dim=1)
                if mode == "learned":
                    return x + self.learnable_positions
                if mode in ("none", "before_cls"):
                    return x
                return x + self.sinusoids_positions
        return PatchEmbedding
    return build


Q4_MISTAKES = [
    Mistake("learned_positions", "the learnable positions were added, not the sinusoids",
            "Q4 asks for the fixed table: add self.sinusoids_positions built with getPositionEncoding.",
            _q4("learned"), ("getPositionEncoding",)),
    Mistake("no_positions", "no positional encoding added",
            "Add the (N + 1, emb_size) sinusoidal table to the tokens after the class token is prepended.",
            _q4("none"), ("getPositionEncoding",)),
    Mistake("positions_before_cls", "positions added before the class token was prepended (offset by one)",
            "Prepend the class token first, then add getPositionEncoding(N + 1, emb_size): the class "
            "token gets row 0 and patch k row k + 1.", _q4("before_cls"), ("getPositionEncoding",)),
    Mistake("swapped_arguments", "getPositionEncoding(emb_size, N + 1): arguments swapped",
            "The table has one row per token: getPositionEncoding(seq_len=N + 1, d=emb_size).",
            _q4("swapped"), ("getPositionEncoding",)),
    Mistake("seq_len_num_patches", "a table for N positions instead of N + 1",
            "With the class token there are N + 1 tokens: seq_len = (img_size // patch_size) ** 2 + 1.",
            _q4("num_patches"), ("getPositionEncoding",)),
]


register(Question(
    id="q4", chapter="06_patch_embedding", title="Q4 sinusoidal positions (getPositionEncoding)", points=1,
    answer_name="PatchEmbedding", kind="class",
    signature="PatchEmbedding(in_channels, patch_size, emb_size, img_size); forward(images) -> (B, N+1, E)",
    cases=Q4_CASES, run_case=_run_q4, references=_tokens_references("sinusoidal"), catalogue=Q4_MISTAKES,
    outputs={"tokens": "(B, N+1, emb_size)"}, reference_parts=parts(getPositionEncoding=_pe_part),
    skeleton='''self.cls_token = nn.Parameter(torch.randn(1,1,emb_size))
self.learnable_positions = nn.Parameter(torch.randn((img_size // patch_size) **2 + 1, emb_size))
#Q4. Define the positional embedding using the getPositionEncoding Function.
# Fill in the parameters for the getPositionEncoding function.
self.sinusoids_positions = torch.from_numpy(getPositionEncoding(\'\'Fill Here.\'\'))
''',
))

# --------------------------------------------------------------------------- Conv2d patch embedding

CONV_CASES = [
    Case("ConvPatchEmbedding(in_channels=3, patch_size=4, emb_size=10), images (2, 3, 8, 12)",
         {"C": 3, "P": 4, "E": 10, "x": (2, 3, 8, 12), "seed": 161}, {2: "B", 6: "N", 10: "emb_size"}),
    Case("ConvPatchEmbedding(in_channels=1, patch_size=2, emb_size=5), images (1, 1, 6, 4)",
         {"C": 1, "P": 2, "E": 5, "x": (1, 1, 6, 4), "seed": 162}, {1: "B", 6: "N", 5: "emb_size"}),
]


def _run_conv(answer, case, rec):
    p = case.params
    module = rec.build(answer, p["C"], p["P"], p["E"])
    out = rec.call(module, rec.tensor(I.randn(p["x"], p["seed"])))
    rec.check_new_params(module)
    rec.output("patch_embeddings", out)


def _conv(stride="patch", flatten="b e h w -> b (h w) e"):
    def build(parts):
        class ConvPatchEmbedding(nn.Module):
            def __init__(self, in_channels, patch_size, emb_size):
                super().__init__()
                self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size,
                                      stride=patch_size if stride == "patch" else 1)

            def forward(self, images):
                grid = self.proj(images)
                if flatten is None:
                    return grid.flatten(2)
                return rearrange(grid, flatten)
        return ConvPatchEmbedding
    return build


CONV_MISTAKES = [
    Mistake("stride_one", "stride 1: overlapping patches",
            "Non-overlapping patches need stride = kernel_size = patch_size.", _conv(stride=1)),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Flatten the grid row by row: 'b e h w -> b (h w) e'.", _conv(flatten="b e h w -> b (w h) e")),
    Mistake("channels_not_last", "(B, emb_size, N): the embedding axis is not last",
            "Conv2d gives (B, E, H/P, W/P); flatten the grid and move E last: 'b e h w -> b (h w) e'.",
            _conv(flatten=None)),
]

register(Question(
    id="conv_patch_embedding", chapter="06_patch_embedding", title="Patch embedding with Conv2d", points=2,
    answer_name="ConvPatchEmbedding", kind="class",
    signature="ConvPatchEmbedding(in_channels, patch_size, emb_size); forward(images (B, C, H, W)) -> (B, N, E)",
    cases=CONV_CASES, run_case=_run_conv, references=lambda: [vitref().ConvPatchEmbedding],
    catalogue=CONV_MISTAKES, outputs={"patch_embeddings": "(B, N, emb_size)"},
    skeleton='''class ConvPatchEmbedding(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(...)   # one output vector per non-overlapping P x P patch

    def forward(self, images):
        # images (B, C, H, W) -> (B, N, emb_size), patches row by row
        ...
''',
))
