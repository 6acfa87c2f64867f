"""The references and the catalogue of known mistakes of ch04_multihead_attention (grader side)."""
from __future__ import annotations




import vitref

from ..model import Mistake
from ._entry import add
from ._attention import finite_fill_loop, finite_fill_mha, head_class, loop_class, masking_mistakes, mha_class
from ._common import parts
from ..diagnosis import View
from ._changes import values_from_keys
from ._symptoms import RETURNS_TUPLE
from .ch03_attention import ATTENTION_SYMPTOMS


def _mha(**kwargs):
    def build(parts):
        return mha_class(**kwargs)
    return build


def _reshape_without_permute(out):
    b, h, n, d = out.shape
    return out.reshape(b, n, h * d)


def _transpose_last_axes(out):
    b, h, n, d = out.shape
    return out.transpose(2, 3).reshape(b, n, h * d)


SCALE_AFTER_HINT = ("Divide the energy by sqrt(head_dim) before F.softmax; dividing the weights afterwards means "
                    "they no longer sum to 1.")

MHA_MISTAKES = [
    Mistake("merge_d_h", "heads merged in the wrong order, (d h)",
            "Put the heads back side by side: rearrange(out, 'b h n d -> b n (h d)'); '(d h)' interleaves "
            "the features of different heads.", _mha(merge="b h n d -> b n (d h)")),
    Mistake("reshape_without_permute", "reshape of (B, h, N, d) to (B, N, h*d) without moving the heads axis",
            "out.reshape(B, N, h*d) on a (B, h, N, d) tensor mixes tokens and heads; move the axes first "
            "(rearrange 'b h n d -> b n (h d)', or permute(0, 2, 1, 3) then reshape).",
            _mha(merge_fn=_reshape_without_permute)),
    Mistake("transpose_wrong_axes", "transpose(2, 3) before the reshape: tokens and features swapped",
            "To put the heads side by side, move the heads axis next to the features: out.transpose(1, 2) "
            "(B, N, h, d), then reshape to (B, N, h*d); or rearrange 'b h n d -> b n (h d)'.",
            _mha(merge_fn=_transpose_last_axes)),
    Mistake("einsum_wrong_axis", "einsum sums over the queries axis",
            "In 'bhal, bhlv -> bhav' the weights att[b, h, a, l] of query a are summed over the keys l; "
            "the result keeps the query axis a.", _mha(einsum="bhla, bhlv -> bhav")),
    Mistake("einsum_keeps_keys", "einsum output keeps the keys axis, 'bhal, bhlv -> bhlv'",
            "Sum over the keys l and keep the queries a: 'bhal, bhlv -> bhav'.",
            _mha(einsum="bhal, bhlv -> bhlv")),
    Mistake("scale_after_softmax", "scaling applied after the softmax", SCALE_AFTER_HINT,
            _mha(scale_after=True, scale="emb")),
    Mistake("scale_after_softmax_head", "scaling applied after the softmax", SCALE_AFTER_HINT,
            _mha(scale_after=True)),
    Mistake("scale_by_emb", "scaled by sqrt(emb_size) instead of sqrt(head_dim)",
            "Each head's dot products have head_dim = emb_size // num_heads terms: divide by sqrt(head_dim).",
            _mha(scale="emb")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide the energy by sqrt(head_dim) before the softmax.", _mha(scale=None)),
    Mistake("no_projection", "the output projection is missing",
            "After merging the heads, apply self.projection (W^O).", _mha(project=False)),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the keys: softmax(dim=-1).", _mha(softmax_dim=-2)),
    *masking_mistakes(_mha, fill_zero=False),
    Mistake("dropout_in_eval", "dropout applied in eval mode too (F.dropout without training=)",
            "F.dropout(att, p) drops weights even after model.eval(): use self.att_drop(att) (nn.Dropout "
            "follows the module's mode) or F.dropout(att, p, training=self.training).",
            _mha(dropout_mode="functional")),
    Mistake("dropout_missing", "the attention dropout is never applied",
            "Apply self.att_drop to the attention weights right after the softmax: att = self.att_drop(att).",
            _mha(dropout_mode="missing")),
    Mistake("dropout_on_output", "dropout applied to the output instead of the attention weights",
            "The exercise's dropout acts on the attention weights (att = self.att_drop(att)), before they "
            "multiply the values, not on the projected output.", _mha(dropout_mode="output")),
    Mistake("dropout_before_softmax", "dropout applied to the energy before the softmax",
            "Drop attention weights, not energies: att = self.att_drop(F.softmax(energy / scaling, dim=-1)).",
            _mha(dropout_at="scores")),
    Mistake("dropout_on_values", "dropout applied to the values instead of the attention weights",
            "Apply self.att_drop to att (the weights after the softmax), not to the values.",
            _mha(dropout_at="values")),
    Mistake("no_bias", "the linear layers built without a bias (bias=False)",
            "Keep the exercise's layers: nn.Linear(emb_size, 3 * emb_size) has a bias.", _mha(bias=False)),
]

add('q5', references=lambda: [vitref.MultiHeadAttention, finite_fill_mha()],
    catalogue=[*MHA_MISTAKES, values_from_keys(), RETURNS_TUPLE, *ATTENTION_SYMPTOMS])


def _loop(head=None, finite=False, **kwargs):
    """A wrong loop over the grader's heads (``parts.AttentionHead``; ``finite``: a right head
    that fills -1e9, like the notebook's given head), or over a wrong head built by
    :func:`head_class` with the ``head`` keyword arguments."""
    def build(parts):
        if head is not None:
            cls = head_class(**head)
        else:
            cls = head_class() if finite else parts.AttentionHead
        return loop_class(cls, **kwargs)
    return build


def _loop_mistake(key, title, hint, ask="", **kwargs):
    """A loop mistake over the parts' head, also over a head that fills -1e9 (fully masked
    rows uniform, as the notebook's given head computes them); a combination of the head
    outputs that changes their width also with the exercise's projection Linear(E, E), which
    then raises."""
    forms = [_loop(finite=True, **kwargs)]
    if kwargs.get("combine") in ("cat_tokens", "mean"):
        forms += [_loop(exercise_projection=True, **kwargs), _loop(finite=True, exercise_projection=True, **kwargs)]
    return Mistake(key, title, hint, _loop(**kwargs), ("AttentionHead",), also=tuple(forms), ask=ask)


LOOP_MISTAKES = [
    _loop_mistake("no_projection", "the output projection is missing",
            "After concatenating the heads, apply self.projection (W^O).", project=False),
    _loop_mistake("concat_tokens", "heads concatenated along the tokens axis",
            "Concatenate the head outputs feature-wise: torch.cat(outputs, dim=-1) gives (B, N, h*d).",
            combine="cat_tokens"),
    _loop_mistake("heads_averaged", "heads averaged instead of concatenated",
            "Each head contributes its own d = emb_size // num_heads features: concatenate, then project.",
            combine="mean"),
    _loop_mistake("heads_reversed", "heads concatenated in reverse order",
            "Concatenate the head outputs in head order: torch.cat([head_0, head_1, ...], dim=-1).",
            combine="reversed"),
    _loop_mistake("full_width_heads", "every head has emb_size features",
            "Split the width: each head maps emb_size -> emb_size // num_heads, so the concatenation has "
            "emb_size features.", head_width="full"),
    _loop_mistake("same_head_repeated", "the first head used for every head",
            "Loop over self.heads: each head has its own query/key/value weights.",
            same_head=True),
    _loop_mistake("mask_ignored", "the mask is not passed to the heads",
            "Call every head with the mask: head(x, mask).", pass_mask=False),
    Mistake("nan_fully_masked", "fully masked rows give NaN",
            "A query whose keys are all blocked gets softmax over all -inf = 0/0 = NaN: fill with -1e9, not -inf.",
            _loop(head={"fill": float("-inf")})),
    _loop_mistake("weights_stacked_dim0", "attention weights stacked on the first axis, (h, B, N, N)",
            "Stack the heads' weights on axis 1: torch.stack(weights, dim=1) gives (B, h, N, N).",
            weights="stack0"),
    _loop_mistake("weights_stacked_last", "attention weights stacked on the last axis, (B, N, N, h)",
            "Stack the heads' weights on axis 1: torch.stack(weights, dim=1) gives (B, h, N, N).",
            weights="stack_last"),
    _loop_mistake("weights_concatenated", "attention weights concatenated, (B, N, h*N)",
            "Stack the heads' weights on a new axis 1 (torch.stack(weights, dim=1), (B, h, N, N)), do not "
            "concatenate them.", weights="cat"),
    _loop_mistake("weights_averaged", "attention weights averaged over the heads",
            "Return every head's weights, stacked as (B, h, N, N): torch.stack(weights, dim=1), no mean.",
            weights="mean"),
    _loop_mistake("weights_of_last_head", "only the last head's attention weights returned",
            "Collect the weights of every head in the loop and stack them: torch.stack(weights, dim=1).",
            weights="last"),
    _loop_mistake("return_attention_ignored", "return_attention=True still returns only the output",
            "With return_attention=True return a pair: (out, weights) with weights (B, h, N, N).",
            honours_return_attention=False),
    _loop_mistake("return_attention_always_tuple", "(out, weights) returned even with return_attention=False",
            "Return the pair only when return_attention=True; otherwise return the output tensor alone: "
            "return (out, weights) if return_attention else out.", always_pair=True,
            ask="A caller that writes out = attention(x) gets a tuple from yours: when does the exercise ask "
                "forward for the weights as well?"),
]

def _per_head_projection(view: View) -> str | None:
    """Read off the parameters the student's module declares (wording only: such a module fits no
    reference, so it scores 0 whatever they say): a layer outside the heads that takes one head's
    head_dim features instead of the emb_size of the concatenated heads."""
    for case, student_case in view.cases:
        E, h = case.params["E"], case.params["h"]
        for record in student_case.get("modules") or []:
            outside = [(str(name), tuple(shape)) for name, shape, _ in record.get("params") or []
                       if not str(name).startswith("heads.") and len(shape) == 2]
            per_head = [(name, shape) for name, shape in outside if shape[-1] == E // h and shape != (E, E)]
            if per_head:
                name, shape = per_head[0]
                return (f"the output projection is applied to each head inside the loop: your {name} {shape} takes "
                        f"one head's head_dim = {E // h} features; project once, after the loop, the concatenated "
                        f"heads ({E} = emb_size features) with one nn.Linear(emb_size, emb_size)")
    return None


PER_HEAD_PROJECTION = Mistake(
    "per_head_projection", "an output projection per head, inside the loop",
    "Concatenate the heads' outputs first, then apply one self.projection = nn.Linear(emb_size, emb_size) to the "
    "(B, N, emb_size) result.",
    ask="Your loop projects each head's output on its own: does the output projection mix the heads, and when can "
        "it see all of them?", detect=_per_head_projection)

add('mha_loop', references=lambda: [vitref.MultiHeadAttentionLoop, finite_fill_loop()],
    catalogue=[*LOOP_MISTAKES, values_from_keys(), RETURNS_TUPLE, PER_HEAD_PROJECTION, *ATTENTION_SYMPTOMS],
    reference_parts=parts(AttentionHead=lambda: vitref.AttentionHead))
