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


from . import inputs as I
from .base import Case, Question, register
from .common import build_flexible
from .errors import CaseFailure

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


def _hw(p):
    """(H, W) of the case's images: square img x img unless the case gives H and W."""
    return p.get("H", p["img"]), p.get("W", p["img"])


def _images(rec, p):
    return rec.tensor(I.randn((p["B"], p["C"], *_hw(p)), p["seed"]),   # (B, C, H, W)
                      dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))


def _backward(rec, p, module, images, tokens, extra_tokens=1):
    """Gradient cases: backpropagate a random upstream gradient through the tokens."""
    if not p.get("grads"):
        return
    h, w = _hw(p)
    n = (h // p["P"]) * (w // p["P"])
    upstream = rec.tensor(I.randn((p["B"], n + extra_tokens, p["E"]), p["seed"] + 7))   # (B, N [+1], E)
    rec.grads(tokens, upstream, {"images": images}, module, params=bool(p.get("param_grads")))


def _dims(p):
    h, w = _hw(p)
    n = (h // p["P"]) * (w // p["P"])
    dims = {p["B"]: "B", n: "N", p["E"]: "emb_size", p["P"] * p["P"] * p["C"]: "P*P*C"}
    dims.setdefault(n + 1, "N+1")
    return dims


def _case(note: str = "", sized: bool = False, **p) -> Case:
    """A case, labelled from its parameters as the module is built and called (``sized``: with
    ``img_size``), then ``note`` (what else the case checks)."""
    height, width = _hw(p)
    size = f", img_size={p['img']}" if sized else ""
    kind = "float64 " if p.get("dtype") == "float64" else ""
    label = (f"PatchEmbedding(in_channels={p['C']}, patch_size={p['P']}, emb_size={p['E']}{size}), "
             f"{kind}images ({p['B']}, {p['C']}, {height}, {width}){note}")
    return Case(label, {"biases": True, **p}, _dims(p))


# --------------------------------------------------------------------------- q2 projection

Q2_CASES = [
    _case(C=3, P=4, E=10, img=8, B=2, seed=131),
    _case(C=1, P=2, E=6, img=6, B=1, seed=132),
    _case(C=2, P=2, E=6, img=4, B=3, seed=133),
    _case(" (not square): the output and the gradients of the images and of the projection's parameters",
          C=2, P=2, E=10, img=4, H=4, W=6, B=2, seed=134, dtype="float64", grads=True, param_grads=True),
]


def _run_q2(answer, case, rec):
    p = case.params
    module = _build_patch_embedding(rec, answer, p)
    if p.get("dtype"):
        module = module.double()
    images = _images(rec, p)
    projection = getattr(module, "projection", None)
    if projection is None:
        raise CaseFailure(f"{type(module).__name__} has no attribute projection: Q2 asks for self.projection = "
                          f"nn.Sequential(Rearrange(...), nn.Linear(...))")
    out = rec.call(projection, images)
    rec.check_new_params(module)
    rec.output("patch_embeddings", out)
    if p.get("grads"):
        _backward(rec, p, projection, images, out, extra_tokens=0)

register(Question(id="q2", chapter="06_patch_embedding",
                  title="Q2 patch embedding projection (Rearrange + Linear)", points=2,
                  answer_name="PatchEmbedding", kind="class", cases=Q2_CASES, run_case=_run_q2,
                  outputs={"patch_embeddings": "(B, N, emb_size)"}))


# --------------------------------------------------------------------------- q3 class token

# The outputs of the float64 cases of Q3/Q4 compared to float64 precision (the judge's
# ``float64_outputs``): the gradients, not the tokens, because correct answers add a table
# of positions computed in float32 (the skeleton's .float(), vitref's sinusoidal_encoding).
TABLE_FREE = ("grad_images", "param_grads")

Q3_CASES = [
    _case(sized=True, C=3, P=4, E=10, img=8, B=1, seed=141),
    _case(sized=True, C=3, P=4, E=10, img=8, B=3, seed=142),
    _case(sized=True, C=1, P=2, E=6, img=6, B=2, seed=143),
    _case(", gradients of the images and of every parameter", sized=True, C=2, P=2, E=6, img=4, B=2, seed=144,
          dtype="float64", grads=True, param_grads=("cls", "class", "proj", "weight", "bias"),
          float64_outputs=TABLE_FREE),
]


def _run_tokens(answer, case, rec, need_img_size=False):
    p = case.params
    module = _build_patch_embedding(rec, answer, p, need_img_size=need_img_size)
    if p.get("dtype"):
        module = module.double()
    images = _images(rec, p)
    out = rec.call(module, images)
    rec.check_new_params(module)
    rec.output("tokens", out)
    _backward(rec, p, module, images, out)


def _run_q3(answer, case, rec):
    _run_tokens(answer, case, rec)

register(Question(id="q3", chapter="06_patch_embedding", title="Q3 class token (repeat per batch)", points=1,
                  answer_name="PatchEmbedding", kind="class", cases=Q3_CASES, run_case=_run_q3,
                  outputs={"tokens": "(B, N+1, emb_size)"}))

# --------------------------------------------------------------------------- q4 sinusoidal positions

Q4_CASES = [
    _case(sized=True, C=3, P=4, E=10, img=8, B=2, seed=151),
    _case(sized=True, C=1, P=2, E=6, img=8, B=1, seed=152),
    _case(", gradients of the images and of the class token and projection", sized=True,
          C=2, P=2, E=6, img=4, B=3, seed=153,
          dtype="float64", grads=True, param_grads=("cls", "class", "proj", "weight", "bias"),
          float64_outputs=TABLE_FREE),
]


def _run_q4(answer, case, rec):
    _run_tokens(answer, case, rec, need_img_size=True)


register(Question(id="q4", chapter="06_patch_embedding", title="Q4 sinusoidal positions (getPositionEncoding)",
                  points=1, answer_name="PatchEmbedding", kind="class", cases=Q4_CASES, run_case=_run_q4,
                  outputs={"tokens": "(B, N+1, emb_size)"}))

# --------------------------------------------------------------------------- Conv2d patch embedding

CONV_CASES = [
    Case("ConvPatchEmbedding(in_channels=3, patch_size=4, emb_size=10), images (2, 3, 8, 12)",
         {"C": 3, "P": 4, "E": 10, "x": (2, 3, 8, 12), "seed": 161, "biases": True}, {2: "B", 6: "N", 10: "emb_size"}),
    Case("ConvPatchEmbedding(in_channels=1, patch_size=2, emb_size=5), images (1, 1, 6, 4)",
         {"C": 1, "P": 2, "E": 5, "x": (1, 1, 6, 4), "seed": 162, "biases": True}, {1: "B", 6: "N", 5: "emb_size"}),
    Case("ConvPatchEmbedding(in_channels=2, patch_size=2, emb_size=4), float64 images (3, 2, 4, 6): the output "
         "and the gradients of the images and of the convolution's parameters",
         {"C": 2, "P": 2, "E": 4, "x": (3, 2, 4, 6), "seed": 163, "biases": True, "dtype": "float64", "grads": True,
          "param_grads": True}, {3: "B", 6: "N", 4: "emb_size"}),
]


def _run_conv(answer, case, rec):
    p = case.params
    module = rec.build(answer, p["C"], p["P"], p["E"], dtype=p.get("dtype"))
    images = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    out = rec.call(module, images)
    rec.check_new_params(module)
    rec.output("patch_embeddings", out)
    if p.get("grads"):
        b, _, h, w = p["x"]
        upstream = rec.tensor(I.randn((b, (h // p["P"]) * (w // p["P"]), p["E"]), p["seed"] + 7))   # (B, N, E)
        rec.grads(out, upstream, {"images": images}, module, params=bool(p.get("param_grads")))

register(Question(id="conv_patch_embedding", chapter="06_patch_embedding", title="Patch embedding with Conv2d",
                  points=2, answer_name="ConvPatchEmbedding", kind="class", cases=CONV_CASES, run_case=_run_conv,
                  outputs={"patch_embeddings": "(B, N, emb_size)"}))
