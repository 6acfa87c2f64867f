"""Counterfactual mistakes many questions share (grader side): the question's own reference run
with one part changed (:class:`autograder.judging.diagnosis.Change`). Each function here returns a
:class:`~autograder.judging.model.Mistake` whose ``change`` applies wherever the reference has the
part it changes (a module with a ``value`` layer, a LayerNorm, a GELU, a residual branch...), so
one entry names the mistake in every question that lists it.

A surgery changes a built reference in place (forward hooks, a submodule or a buffer swapped),
never its parameters: the student's parameter values load into it as into the reference, and the
gradients reach the same parameters.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch
from einops import rearrange
from einops.layers.torch import Rearrange
from torch import nn

import vitref

from ..diagnosis import Alteration, change
from ..model import Mistake


def changed(key: str, title: str, hint: str, ask: str, *forms: Alteration) -> Mistake:
    return Mistake(key, title, hint, ask=ask, change=change(*forms))


def _first(output):
    """The tensor of a module's output (the first item of a tuple)."""
    return output[0] if isinstance(output, tuple) else output


def _with_first(output, tensor):
    return (tensor, *output[1:]) if isinstance(output, tuple) else tensor


def act_as(module: nn.Module, other: nn.Module) -> None:
    """``module`` computes what ``other`` computes on the same inputs (with ``other``'s parameters)."""
    def hook(mod, args, kwargs, output):
        return type(other).forward(other, *args, **kwargs)
    module.register_forward_hook(hook, with_kwargs=True)


def _parent(root: nn.Module, name: str) -> tuple[nn.Module, str]:
    owner, _, leaf = name.rpartition(".")
    return (root.get_submodule(owner) if owner else root), leaf


# --------------------------------------------------------------------------- values from keys


def _values_from_keys(module: nn.Module) -> bool:
    """Every attention inside ``module`` uses its keys as values: a ``value`` layer returns the
    ``key`` layer's output; a fused ``qkv`` (laid out (qkv h d)) or ``key_value`` ((kv h d)) layer
    repeats its keys where its values are."""
    found = False
    for sub in list(module.modules()):
        value, key = getattr(sub, "value", None), getattr(sub, "key", None)
        qkv, key_value = getattr(sub, "qkv", None), getattr(sub, "key_value", None)
        if isinstance(value, nn.Linear) and isinstance(key, nn.Linear):
            act_as(value, key)
        elif isinstance(qkv, nn.Linear):           # (..., 3E): queries, keys, values
            qkv.register_forward_hook(lambda mod, args, out: torch.cat(
                [out[..., :2 * out.shape[-1] // 3], out[..., out.shape[-1] // 3:2 * out.shape[-1] // 3]], dim=-1))
        elif isinstance(key_value, nn.Linear):     # (..., 2E): keys, values
            key_value.register_forward_hook(lambda mod, args, out: torch.cat([out[..., :out.shape[-1] // 2]] * 2,
                                                                             dim=-1))
        else:
            continue
        found = True
    return found


def values_from_keys() -> Mistake:
    return changed(
        "values_from_keys", "the keys used as the values",
        "The output mixes the value vectors: weights @ v, with v from the value projection (its own weights), "
        "not the keys.",
        "The weights say how much of each position to take: what should be taken from each position, the key "
        "vector or the value vector?",
        Alteration("", surgery=_values_from_keys,
                   call=lambda reference, q, k, v, mask=None: reference(q, k, k, mask)))


# --------------------------------------------------------------------------- activations and norms


def _relu_for_gelu(module: nn.Module) -> bool:
    found = False
    for name, sub in list(module.named_modules()):
        if isinstance(sub, nn.GELU):
            owner, leaf = _parent(module, name)
            setattr(owner, leaf, nn.ReLU())
            found = True
    return found


def relu_for_gelu() -> Mistake:
    return changed(
        "relu_for_gelu", "ReLU where the exercise's MLP has GELU",
        "The feed-forward block's activation is nn.GELU() (the exact, erf form), between its two linear layers.",
        "Your MLP is right except for what happens between its two linear layers: which activation does the "
        "exercise use there?",
        Alteration("", surgery=_relu_for_gelu))


def _layer_norms(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, sub) for name, sub in module.named_modules() if isinstance(sub, (nn.LayerNorm, vitref.LayerNorm))]


def _swap(first: str, second: str):
    def surgery(module: nn.Module) -> bool:
        names = dict(_layer_norms(module))
        if first not in names or second not in names:
            return False
        a, b = names[first], names[second]
        act_as(a, b)
        act_as(b, a)
        return True
    return surgery


def norms_swapped(pairs=(("norm1", "norm2"),)) -> Mistake:
    return changed(
        "norms_swapped", "the two LayerNorms swapped",
        "Each sub-layer has its own LayerNorm, in the order the block declares them: norm1 with the first "
        "sub-layer (the attention), norm2 with the second, norm3 with the third.",
        "Both sub-layers are normalised, but each with the other one's LayerNorm: which norm belongs to which "
        "sub-layer?",
        *(Alteration(f"({a} and {b})", surgery=_swap(a, b)) for a, b in pairs))


def _normalised(x, dims, weight, bias, eps):
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def _norm_over(dims: tuple):
    def surgery(module: nn.Module) -> bool:
        norms = _layer_norms(module)
        for _, norm in norms:
            eps = norm.eps
            norm.register_forward_hook(
                lambda mod, args, out, eps=eps: _normalised(args[0], dims, mod.weight, mod.bias, eps)
                if args[0].dim() > max(-d - 1 if d < 0 else d for d in dims) else out)
        return bool(norms)
    return surgery


def norm_over_tokens() -> Mistake:
    return changed(
        "norm_over_tokens", "normalised over the tokens instead of each token's features",
        "Each token vector is normalised on its own: the mean and the variance over the last axis (dim=-1, "
        "keepdim=True).",
        "Which numbers should one mean and one variance be taken over: the features of one token, or one feature "
        "across the tokens?",
        Alteration("(over dim=-2)", surgery=_norm_over((-2,))), Alteration("(over dim=1)", surgery=_norm_over((1,))))


# --------------------------------------------------------------------------- residual connections


def _branches(module: nn.Module) -> list[tuple[str, nn.Module, nn.Module]]:
    """(name, the module whose input is the residual stream, the module whose output is added back:
    after the branch's dropout) of every residual branch of a vitref block or ResidualAdd."""
    if isinstance(module, vitref.TransformerEncoderBlock):
        if module.norm_first:
            return [("attention", module.norm1, module.drop1), ("feed-forward block", module.norm2, module.drop2)]
        return [("attention", module.attn, module.drop1), ("feed-forward block", module.mlp, module.drop2)]
    if isinstance(module, vitref.ResidualAdd):
        return [("", module.fn, module.fn)]
    return []


COMBINE = {
    "dropped": lambda x, f: f,
    "multiplies": lambda x, f: x * f,
    "subtracts": lambda x, f: x - f,
    "subtracts_input": lambda x, f: f - x,
}


def _residual(combine: str, which: str | None):
    """Every residual branch (or the one named ``which``) combines its input ``x`` and its output
    ``f`` as ``COMBINE[combine]`` instead of ``x + f``."""
    def surgery(module: nn.Module) -> bool:
        branches = [b for b in _branches(module) if which is None or b[0] == which]
        for _, source, sublayer in branches:
            stream: dict = {}
            source.register_forward_pre_hook(lambda mod, args, stream=stream: stream.__setitem__("x", args[0]))
            sublayer.register_forward_hook(
                lambda mod, args, out, stream=stream: _with_first(
                    out, COMBINE[combine](stream["x"], _first(out)) - stream["x"]))
        return bool(branches)
    return surgery


def _residual_forms(combine: str, names: tuple, both: bool = True) -> list[Alteration]:
    forms = [Alteration(f"(around the {name})" if name else "", surgery=_residual(combine, name)) for name in names]
    if both and len(names) > 1:
        forms.append(Alteration("(around both sub-layers)", surgery=_residual(combine, None)))
    return forms


def residual_dropped(names=("attention", "feed-forward block")) -> Mistake:
    """Around one sub-layer (the blocks' catalogues name both missing as ``no_residual``)."""
    return changed(
        "residual_dropped", "a residual connection is missing",
        "Each sub-layer's input is added back to its output: x = x + sublayer(...), for every sub-layer.",
        "Your block keeps a sub-layer's output but loses what came in: what should be added to it?",
        *_residual_forms("dropped", names, both=False))


def residual_multiplies(names=("attention", "feed-forward block")) -> Mistake:
    return changed(
        "residual_multiplies", "the residual connection multiplies instead of adding",
        "A residual connection adds: x + sublayer(x), so the input passes through unchanged when the sub-layer "
        "gives zero.",
        "What should come out of a residual connection when the sub-layer outputs zeros, and does yours give that?",
        *_residual_forms("multiplies", names))


def residual_subtracts(names=("attention", "feed-forward block")) -> Mistake:
    forms = _residual_forms("subtracts", names) + _residual_forms("subtracts_input", names)
    return changed(
        "residual_subtracts", "the residual connection subtracts instead of adding",
        "A residual connection adds the sub-layer's output to its input: x + sublayer(x).",
        "Your residual connection combines the input and the sub-layer's output, but with which sign?",
        *forms)


# --------------------------------------------------------------------------- blocks


def _blocks_reversed(module: nn.Module) -> bool:
    blocks = getattr(module, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        return False
    for block, other in zip(blocks, list(blocks)[::-1]):
        if block is not other:
            act_as(block, other)
    return True


def blocks_reversed() -> Mistake:
    return changed(
        "blocks_reversed", "the blocks applied in reverse order",
        "Run the blocks in the order of the list: for block in self.blocks, from the first to the last.",
        "Each block is right, but the result is not: in which order do the tokens go through your blocks?",
        Alteration("", surgery=_blocks_reversed))


# --------------------------------------------------------------------------- patches

RIGHT_PATCH = ("h w", "s1 s2 c")
# the orders the patch questions' catalogues name with a sentence of their own: channels first, pixels
# column by column, patches column by column (chapter 1's PATCH_MISTAKES, reused by chapter 6)
NAMED_ORDERS = (("h w", "c s1 s2"), ("h w", "s2 s1 c"), ("w h", "s1 s2 c"))
PATCH_ORDERS = [(grid, " ".join(inner)) for grid in ("h w", "w h")
                for inner in itertools.permutations(("s1", "s2", "c"))
                if (grid, " ".join(inner)) not in (RIGHT_PATCH, *NAMED_ORDERS)]


def _pattern(grid: str, inner: str) -> str:
    return f"b c (h s1) (w s2) -> b ({grid}) ({inner})"


def _repatterned(grid: str, inner: str):
    def surgery(module: nn.Module) -> bool:
        found = False
        for name, sub in list(module.named_modules()):
            if isinstance(sub, Rearrange) and "s1" in sub.axes_lengths:
                owner, leaf = _parent(module, name)
                setattr(owner, leaf, Rearrange(_pattern(grid, inner), **sub.axes_lengths))
                found = True
        return found
    return surgery


def patch_order() -> Mistake:
    forms = [Alteration(f"(your order: '{_pattern(grid, inner)}')", surgery=_repatterned(grid, inner),
                        call=lambda reference, images, patch_size, grid=grid, inner=inner: rearrange(
                            images, _pattern(grid, inner), s1=patch_size, s2=patch_size))
             for grid, inner in PATCH_ORDERS]
    return changed(
        "patch_order", "the patches flattened in another order",
        "Use the slides' order 'b c (h s1) (w s2) -> b (h w) (s1 s2 c)': patches row by row, and inside a "
        "patch the pixels row by row, the C values of a pixel side by side.",
        "Your tokens hold the right numbers in another order: in which order should the rows, the columns and the "
        "channels of a patch be read?", *forms)


# --------------------------------------------------------------------------- sinusoidal tables


def sinusoid(seq_len: int, d: int, n: float, start: int = 0, form: str = "sin_cos") -> np.ndarray:
    """vitref's table for positions ``start, ..., start + seq_len - 1``; ``form`` "sines" (the sine in
    both columns of a pair) or "cosines"."""
    table = vitref.sinusoidal_encoding(seq_len + start, d, n).double().numpy()[start:]      # (seq_len, d)
    if form == "sines":
        table[:, 1::2] = table[:, 0::2]
    elif form == "cosines":
        table[:, 0::2] = table[:, 1::2]
    return table


# (key, title, hint, ask, forms): each form (detail, table(seq_len, d, n, tokens) -> the wrong table)
TABLE_MISTAKES = (
    ("table_other_base", "a sinusoidal table with another base n",
     "The denominator is n^(2i/d) with the base the exercise gives (the argument n, 10000 by default).",
     "Your table is sinusoidal, but its frequencies fall at another rate: which number is raised to the power "
     "2i/d, and where does it come from?",
     [(f"(n = {base})", lambda t, d, n, base=base: sinusoid(t, d, base)) for base in (10, 100, 1000, 10000, 100000)]),
    ("table_other_width", "a sinusoidal table whose exponent divides by another width",
     "The exponent is 2i/d, with d the model dimension (the table's number of columns).",
     "Your table is sinusoidal, but its frequencies fall at another rate: what is the d of the exponent 2i/d?",
     [(f"(2i/{label} in the exponent)", lambda t, d, n, f=f: sinusoid(t, d, float(n) ** (d / f(t, d))))
      for label, f in (("(d+1)", lambda t, d: d + 1), ("(d-1)", lambda t, d: d - 1), ("(2d)", lambda t, d: 2 * d),
                       ("(d/2)", lambda t, d: d / 2), ("seq_len", lambda t, d: t))]),
    ("table_positions_shifted", "a sinusoidal table of other positions",
     "Row k of the table is position k, from 0: the first token gets sin(0) = 0 and cos(0) = 1.",
     "Your table has the right frequencies: which position does its first row stand for?",
     [(f"(rows start at position {start})", lambda t, d, n, start=start: sinusoid(t, d, n, start))
      for start in (1, 2)]),
    ("table_sines_only", "sines (or cosines) in both columns of a pair",
     "Column 2i holds the sine and column 2i+1 the cosine of the same angle.",
     "Look at one pair of columns of your table: are they two different functions of the same angle?",
     [("(sines only)", lambda t, d, n: sinusoid(t, d, n, form="sines")),
      ("(cosines only)", lambda t, d, n: sinusoid(t, d, n, form="cosines"))]),
)


def _table_call(make):
    """A q1 reference called with the table ``make`` gives instead (its n, its shape)."""
    def call(reference, seq_len, d, n=10000):
        if d % 2:
            return reference(seq_len, d, n)
        return torch.as_tensor(make(seq_len, d, n), dtype=torch.float64)
    return call


def _positions_surgery(make):
    """A PatchEmbedding reference whose sinusoidal positions (N + 1, E) are ``make``'s table."""
    def surgery(module: nn.Module) -> bool:
        positions = getattr(module, "positions", None)
        if not isinstance(positions, torch.Tensor) or isinstance(positions, nn.Parameter) or positions.dim() != 2:
            return False
        rows, d = positions.shape
        module.positions = torch.as_tensor(make(int(rows), int(d), 10000), dtype=positions.dtype)
        return True
    return surgery


def table_mistakes(where: str, named=()) -> list[Mistake]:
    """The sinusoidal-table mistakes, for the table itself (``where="table"``: q1's function) or for
    the positions a PatchEmbedding adds (``where="positions"``); ``named``: the forms (details) the
    question's catalogue already names with an entry of its own, left out."""
    found = []
    for key, title, hint, ask, forms in TABLE_MISTAKES:
        alterations = [Alteration(detail, call=_table_call(make)) if where == "table"
                       else Alteration(detail, surgery=_positions_surgery(make))
                       for detail, make in forms if detail not in named]
        if alterations:
            found.append(changed(key, title, hint, ask, *alterations))
    return found
