"""The book's self-check questions, chapter by chapter, with their numbers computed by ``vitref``.

Every chapter ends with a "Check yourself" cell, ``chapter_quiz(N)``, tagged ``remove-input``:
the book shows the :class:`vitref.quiz.Quiz` it returns (the questions, a Check button, a
sentence for every answer), and the numbers in the questions and explanations are whatever the
functions below compute when the page is built. A question whose answer is decided by a
measurement marks its right choice with that measurement (``right=...``), so a change in
``vitref`` that made the question wrong fails the build instead of publishing a wrong answer.

The text lives here, not in the chapter's cell: the chapters are also read in Colab, where the
cell would show every answer, and the cells count towards the data the grader's static scan
allows in a notebook (tests/threats/test_embedded_data.py keeps the chapters well under it).
Each question is one function; a chapter's quiz lists them.

Not imported by ``import vitref`` and not graded (it is not in :data:`vitref.GRADED_MODULES`).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from einops import rearrange
from torch import nn

import vitref
import vitref.multihead as multihead
from vitref.finetune import resize_vit
from vitref.generation import BigramLM, beam_search
from vitref.presets import vit_parameter_count
from vitref.quiz import Choice, ChoiceQuestion, NumberQuestion, Question, Quiz


def chapter_quiz(chapter: int) -> Quiz:
    """The questions that end chapter ``chapter`` (1 to 8), built now."""
    if chapter not in CHAPTERS:
        raise ValueError(f"chapters with a quiz are {sorted(CHAPTERS)}, got {chapter!r}")
    return Quiz(f"ch{chapter:02d}", [question() for question in CHAPTERS[chapter]])


def _tokens(height: int, width: int, patch: int, channels: int = 3) -> torch.Size:
    """The shape ``(1, N, P*P*C)`` of one blank image cut by :func:`vitref.image_to_patches`."""
    return vitref.image_to_patches(torch.zeros(1, channels, height, width), patch).shape


# ----------------------------------------------------------------------------- 1. tokens


def _ch01_patch_count() -> NumberQuestion:
    _, n, length = _tokens(96, 96, 12)
    side = 96 // 12
    return NumberQuestion(
        "An STL-10 photo is 96 × 96 pixels in colour (C = 3). How many tokens N does `image_to_patches` make "
        "of it with patches of 12 × 12 pixels?",
        answer=n,
        why=f"The patch grid has 96/12 = {side} rows and {side} columns, and every cell of it is one token: "
            f"N = HW/P² = {n}.",
        wrong="Count the cells of the patch grid: H/P rows times W/P columns, N = HW/P².",
        mistakes={side: f"{side} is one side of the patch grid; the tokens fill the whole grid, {side} × {side} "
                        "of them.",
                  length: f"{length} = P²C is the length of one token (the numbers in one patch), not the number "
                          "of tokens.",
                  n + 1: "There is no class token yet: `image_to_patches` only cuts the image. The class token "
                         "comes in chapter 6."})


def _ch01_reading_order() -> NumberQuestion:
    marked = torch.zeros(1, 3, 224, 224)
    marked[:, :, 2 * 16:3 * 16, 3 * 16:4 * 16] = 1.0               # light up one patch: row 2, column 3
    index = int(vitref.image_to_patches(marked, 16).sum(-1).argmax())
    per_row = 224 // 16
    return NumberQuestion(
        "A 224 × 224 image is cut with P = 16 by the pattern `b c (h s1) (w s2) -> b (h w) (s1 s2 c)`. Counting "
        "from 0, which token holds the patch in grid row 2, column 3?",
        answer=index,
        why=f"`(h w)` numbers the patches in reading order, row by row: each grid row holds {per_row} patches, "
            f"so row 2, column 3 is token 2 × {per_row} + 3 = {index}.",
        wrong=f"Patches are numbered row by row: skip two full rows of {per_row} patches, then three more.",
        mistakes={3 * per_row + 2: "That numbers the patches column by column, the pattern `(w h)`; `(h w)` makes "
                                   "the row the slow index.",
                  2 * 16 + 3: "A grid row holds 224/16 patches, not 16: multiply the row by the number of "
                              "patches per row, not by the patch size."})


def _ch01_lookup() -> ChoiceQuestion:
    weight, ids = torch.randn(10, 4), torch.tensor([3, 0, 9, 3])    # (V, D), (N,)
    gap = (vitref.embedding_lookup(ids, weight) - vitref.one_hot_embedding(ids, weight)).abs().max().item()
    vocab, dim = 50_000, 768
    return ChoiceQuestion(
        "Why does `vitref.embedding_lookup` pick rows of W instead of multiplying a one-hot matrix by W?",
        [Choice("The lookup is more exact: the product adds rounding errors.",
                "Multiplying by exact zeros and ones reproduces the rows bit for bit: the largest difference "
                f"between the two is {gap:g}."),
         Choice("Both give the same token matrix, but the product does far more work for it.",
                f"For V = {vocab:,} and D = {dim}, a one-hot row times W costs {vocab * dim:,} multiply-adds, "
                f"where the lookup copies {dim} numbers.", right=gap == 0),
         Choice("The one-hot product only works for ids smaller than D.",
                "The one-hot matrix has V columns, one per id, so every id below V works; D plays no part in it."),
         Choice("Only a lookup table can be trained.",
                "It is the same W either way, and the gradient reaches the same rows: an embedding is a linear "
                "layer applied to a very sparse input.")])


def _ch01_halving() -> ChoiceQuestion:
    n16, n8 = _tokens(224, 224, 16)[1], _tokens(224, 224, 8)[1]
    return ChoiceQuestion(
        "With the image size fixed, you halve the patch size P. What happens to the number of tokens N and to the "
        "N × N matrix of attention scores?",
        [Choice("N doubles and the score matrix grows 4 times.",
                "N = HW/P² depends on the square of P: halving P multiplies N by 4, not 2."),
         Choice("N grows 4 times but the image loses half of its pixel values.",
                "The cut neither loses nor duplicates a pixel: N · P²C is HWC for every P that divides the image."),
         Choice(f"N grows {n8 // n16} times and the score matrix {(n8 // n16) ** 2} times.",
                f"At 224 × 224, P = 16 gives {n16} tokens and P = 8 gives {n8}; the scores grow with N², which "
                "is why ViT does not make every pixel a token.", right=True),
         Choice("N stays the same and each token gets shorter.",
                "Each token does get shorter (P²C numbers), but there are more of them: N = HW/P².")])


# ----------------------------------------------------------------------------- 2. positions


def _ch02_no_positions() -> ChoiceQuestion:
    return ChoiceQuestion(
        "Two sentences use the same words in a different order. Without positional encoding, both go through the "
        "same self-attention layer. How do the two output vectors of the word \"not\" compare?",
        [Choice("They differ, because \"not\" stands at a different index in each sentence.",
                "Nothing in the layer reads an index: a token's output depends on its own vector and on the set of "
                "the other tokens, which is the same in both sentences."),
         Choice("They are the same vector, up to float32 rounding.",
                "Attention compares every token with every other one and averages; neither step looks at "
                "positions, so the layer cannot tell the two sentences apart.", right=True),
         Choice("They differ, because the layer draws new random weights for every sentence.",
                "The weights are drawn once, when the layer is built; both sentences go through the same weights."),
         Choice("Both are zero, because the attention weights of a repeated word cancel.",
                "Attention weights are positive and sum to one per query; nothing cancels. The output is an "
                "average of value vectors.")])


def _ch02_pair_index() -> NumberQuestion:
    columns = vitref.sinusoidal_encoding(1, 6).shape[1]             # (N, D) = (1, 6)
    last_pair = columns // 2 - 1
    return NumberQuestion(
        "The encoding fills column 2i with a sine and column 2i + 1 with a cosine. With D = 6 columns, what is "
        "the largest pair index i?",
        answer=last_pair,
        why=f"Pair i fills columns 2i and 2i + 1, and the last column is D − 1 = {columns - 1}; so i runs from 0 "
            f"to D/2 − 1 = {last_pair}.",
        wrong="Pair i fills columns 2i and 2i + 1: find the pair whose second column is the last one, D − 1.",
        mistakes={columns // 2: f"i ≤ D/2 is one pair too many: pair {columns // 2} would need columns "
                                f"{columns} and {columns + 1}, past the last column {columns - 1}.",
                  columns - 1: f"{columns - 1} is the last column; i counts pairs of columns, half as many."})


def _ch02_self_dot() -> NumberQuestion:
    encoding = vitref.sinusoidal_encoding(50, 768).double()         # (N, D)
    self_dot = (encoding[17] @ encoding[17]).item()
    return NumberQuestion(
        "With D = 768, what is the dot product p(17) · p(17) of the encoding of position 17 with itself?",
        answer=round(self_dot, 6), tolerance=0.01,
        why=f"Each of the D/2 pairs contributes sin² + cos² = 1, whatever the position: D/2 = {self_dot:.0f}.",
        wrong="Group the sum by pairs of columns: sin²(x) + cos²(x) is the same for every angle.",
        mistakes={768: "That would need every entry to be ±1. Each (sin, cos) pair contributes sin² + cos² = 1, "
                       "and there are D/2 pairs.",
                  1: "The encoding is not scaled to unit length: each of the D/2 pairs has length 1, so the whole "
                     "vector has squared length D/2."})


def _ch02_shift() -> ChoiceQuestion:
    return ChoiceQuestion(
        "Every position k is moved to k + Δ. How does the sinusoidal encoding change?",
        [Choice("Every entry grows by Δ.",
                "The entries are sines and cosines, always between −1 and 1, whatever the position."),
         Choice("It changes in a way no linear layer can follow: the model must memorise each position.",
                "The change is linear: one fixed matrix M_Δ maps p(k) to p(k + Δ) for every k."),
         Choice("Each (sin, cos) pair turns by the angle ω_i Δ, the same for every k.",
                "The angle-addition formulas make the shift a rotation that does not depend on k, so "
                "p(k) · p(k + Δ) depends on the distance Δ only; RoPE uses the same rotation inside attention.",
                right=True)])


def _ch02_learned_table() -> ChoiceQuestion:
    table = vitref.LearnedPositionalEmbedding(197, 768)
    learned, fixed = vitref.count_parameters(table), vitref.count_parameters(
        vitref.SinusoidalPositionalEncoding(197, 768))
    try:
        table(torch.zeros(1, 198, 768))
        refused = ""
    except ValueError as error:
        refused = type(error).__name__
    return ChoiceQuestion(
        "ViT learns one position vector per position instead of using the formula. What happens when such a "
        "model gets a longer sequence than its table has rows?",
        [Choice("It fails: no vector exists beyond the table's last row.",
                f"A table built for 197 positions has {learned:,} trained numbers and nothing for a 198th token: "
                f"`vitref` raises {refused}. The formula gives a vector for every k.", right=bool(refused)),
         Choice("The table repeats from its first row, like the sine waves.",
                "Learned vectors follow no formula, so there is nothing to repeat; only the sinusoidal encoding "
                "is defined for every k."),
         Choice("Nothing: the learned table has no parameters, so its length does not matter.",
                f"It is the sinusoidal encoding that has no trainable parameters ({fixed}); the learned table for "
                f"197 positions of size 768 has {learned:,}.")])


# ----------------------------------------------------------------------------- 3. attention


def _ch03_shapes() -> ChoiceQuestion:
    out, weights = vitref.scaled_dot_product_attention(torch.randn(5, 8), torch.randn(7, 8), torch.randn(7, 3))
    return ChoiceQuestion(
        "Queries Q (5, 8), keys K (7, 8), values V (7, 3) go into `scaled_dot_product_attention`. What are the "
        "shapes of the weights and of the output?",
        [Choice("weights (7, 7), output (7, 3)",
                "There are 5 queries, and each gets one row of weights and one output row; 7 × 7 would be "
                "self-attention over the 7 keys."),
         Choice("weights (5, 7), output (5, 8)",
                "The output is a weighted average of the values, so it has their width d_v = 3, not the keys' "
                "d_k = 8."),
         Choice(f"weights {tuple(weights.shape)}, output {tuple(out.shape)}",
                "One row of weights per query, one column per key (T × S), and each output row is an average of "
                "the 3-wide values.", right=True),
         Choice("weights (5, 5), output (5, 3)",
                "The weights compare every query with every key: 5 queries by 7 keys. They are square only when "
                "T = S.")])


def _ch03_scaling() -> ChoiceQuestion:
    generator = torch.Generator().manual_seed(0)
    d_k, num_keys = 1024, 32
    q = torch.randn(256, 1, d_k, generator=generator)                # 256 queries
    k = torch.randn(256, num_keys, d_k, generator=generator)         # 32 keys for each
    dots = (q * k).sum(-1)                                           # (256, 32)
    top_unscaled = vitref.softmax(dots).max(-1).values.mean().item()
    top_scaled = vitref.softmax(dots / math.sqrt(d_k)).max(-1).values.mean().item()
    return ChoiceQuestion(
        "Queries and keys have entries of variance 1. What goes wrong as d_k grows if the scores are not divided "
        "by √d_k?",
        [Choice("The scores spread out, the softmax puts nearly all weight on one key, and its gradient almost "
                "vanishes.",
                f"Var(q · k) = d_k. At d_k = {d_k}, over {num_keys} keys, the largest weight averages "
                f"{top_unscaled:.2f} without the scaling and {top_scaled:.2f} with it.",
                right=top_unscaled > 2 * top_scaled),
         Choice("The scores shrink towards zero, so the weights become uniform.",
                "It is the other way round: a sum of d_k products has variance d_k, so the scores grow."),
         Choice("The softmax overflows and returns NaN.",
                "A softmax that subtracts the row's maximum cannot overflow. The trouble is saturation: valid "
                "numbers, but one key takes almost all the weight."),
         Choice("Nothing: the softmax does not change when its inputs are scaled.",
                "The softmax ignores a constant added to every score, not a factor multiplying them.")])


def _ch03_stable_softmax() -> NumberQuestion:
    top = vitref.softmax(torch.tensor([1000.0, 1001.0, 1002.0]))[-1].item()
    return NumberQuestion(
        "`vitref.softmax` is given the scores [1000, 1001, 1002]. What weight does it give the last one? (Three "
        "decimals are enough.)",
        answer=round(top, 6), tolerance=0.001,
        why=f"Subtracting the maximum gives [−2, −1, 0], whose softmax is the same: e⁰/(e⁻² + e⁻¹ + e⁰) = "
            f"{top:.3f}. Without the shift, exp(1000) is infinite in float32 and the result NaN.",
        wrong="Shift the scores by their maximum first (the softmax does not change), then compute "
              "e⁰ / (e⁻² + e⁻¹ + e⁰).",
        mistakes={1: "The largest score gets the most weight, not all of it: after the shift the scores are "
                     "[−2, −1, 0], and the other two keep e⁻² and e⁻¹ of the weight.",
                  0.333: "The weights would be equal only if the scores were; a gap of 1 between scores is a "
                         "factor e between weights."})


def _ch03_cost() -> ChoiceQuestion:
    n, d = 197, 768
    ratio = (n * n * d) / (n * d * d)
    return ChoiceQuestion(
        "For n = 197 tokens of width d = 768, which layer does more work: self-attention (n²d) or a recurrent "
        "layer (nd²)?",
        [Choice("Self-attention: its cost is quadratic.",
                f"Quadratic in n, but here n < d: n²d / nd² = n/d = {ratio:.2f}. The switch is at n = d."),
         Choice("The recurrent layer.",
                f"n²d / nd² = n/d = {ratio:.2f}: at ViT's sequence length attention is the cheaper one; it also "
                "needs one step, where the recurrent layer needs n in a row.", right=ratio < 1),
         Choice("Both do the same work.",
                f"They would only at n = d; here the ratio n/d is {ratio:.2f}.")])


def _ch03_fully_masked() -> ChoiceQuestion:
    blocked = torch.full((4,), float("-inf"))                       # a row whose 4 keys are all masked
    nans = int(torch.softmax(blocked, dim=-1).isnan().sum())
    return ChoiceQuestion(
        "Every key of one query is masked. Its scores are filled with −∞ by `masked_fill`, then `torch.softmax` "
        "is applied. What is that row of weights?",
        [Choice("All zeros.",
                f"That is what `vitref.softmax` defines for such a row ({vitref.softmax(blocked).tolist()}), by a "
                "guard of its own; the plain softmax divides 0 by 0."),
         Choice("1/S for each of the S keys.",
                "A large finite fill such as −10⁹ gives equal weights; with −∞ every exponential is 0 and the "
                "division is 0/0."),
         Choice("NaN, and the NaN reaches the loss even if that row is later multiplied by 0.",
                f"e^−∞ / Σ e^−∞ = 0/0: all {nans} weights of the row are NaN, and 0 × NaN is still NaN, so the "
                "loss and every gradient become NaN.", right=nans == 4),
         Choice("PyTorch raises an error.",
                "Nothing is raised: the NaN appears silently, which is what makes it dangerous.")])


# ----------------------------------------------------------------------------- 4. multi-head attention


def _ch04_parameters() -> NumberQuestion:
    count = vitref.count_parameters(vitref.MultiHeadAttention(512, 8))
    return NumberQuestion(
        "How many parameters does `vitref.MultiHeadAttention(512, 8)` have, biases included?",
        answer=count,
        why=f"Queries, keys and values are three E × E maps (fused in one E → 3E layer) and W^O a fourth, each "
            f"with E biases: 4(E² + E) = {count:,}.",
        wrong="Count the maps: queries, keys, values and the output projection, each E × E with a bias of length E.",
        mistakes={4 * 512**2: "That leaves out the biases: each of the four maps has E of them.",
                  3 * (512**2 + 512): "That counts queries, keys and values but not the output projection W^O, "
                                      "which mixes the heads."})


def _ch04_layout() -> NumberQuestion:
    slots = torch.arange(3 * 16)                                     # the 3E outputs of qkv, numbered
    first_key_of_head1 = int(rearrange(slots, "(qkv h d) -> qkv h d", qkv=3, h=4)[1, 1, 0])
    head_by_head = int(rearrange(slots, "(h qkv d) -> qkv h d", qkv=3, h=4)[1, 1, 0])
    return NumberQuestion(
        "The fused layer `qkv` of `MultiHeadAttention(16, 4)` returns 3E = 48 numbers per token in the layout "
        "`(qkv h d)`. Counting from 0, at which of the 48 places does the first key number of head 1 sit?",
        answer=first_key_of_head1,
        why=f"The first name is the slowest: all 16 query numbers come first, then the keys, head 0's d = 4 "
            f"numbers before head 1's: 16 + 4 = {first_key_of_head1}.",
        wrong="In `(qkv h d)` the first name changes slowest: skip all the query numbers, then head 0's key numbers.",
        mistakes={head_by_head: "That is the layout `(h qkv d)`, head by head as in the loop; the fused layer puts "
                                "all queries first, then all keys, then all values.",
                  5: "In `(qkv h d)` the head's d numbers are contiguous: head 1's keys start after all 16 query "
                     "numbers and head 0's 4 key numbers."})


def _shuffled_attention() -> dict:
    """Gaps between what a layer gives on 10 tokens and on the same tokens shuffled (no positions)."""
    torch.manual_seed(0)
    mha = vitref.MultiHeadAttention(32, 4).eval()
    x = torch.randn(1, 10, 32)                                       # (B, N, E)
    perm = torch.randperm(10)
    with torch.no_grad():
        (out, weights), (out_perm, weights_perm) = mha(x, return_attention=True), mha(x[:, perm], return_attention=True)
        causal, causal_perm = mha(x, causal=True), mha(x[:, perm], causal=True)
    return {"equivariance": (out_perm - out[:, perm]).abs().max().item(),
            "invariance": (out_perm - out).abs().max().item(),
            "first row": (out_perm[:, 0] - out[:, 0]).abs().max().item(),
            "weights": (weights_perm - weights).abs().max().item(),                # (B, h, N, N) as they come
            "mean": (out_perm.mean(1) - out.mean(1)).abs().max().item(),
            "causal mean": (causal_perm.mean(1) - causal.mean(1)).abs().max().item()}


def _rounding(gap: float) -> bool:
    """Whether a measured gap is float32 rounding: the two sides are the same numbers."""
    return gap < 1e-5


def _ch04_equivariance() -> ChoiceQuestion:
    gaps = _shuffled_attention()
    return ChoiceQuestion(
        "Self-attention without positions or mask gets its tokens shuffled by a permutation Π. Which is true?",
        [Choice("MHA(ΠX) = MHA(X): the output does not change.",
                f"The output rows move with their tokens: row for row the gap here is {gaps['invariance']:.2f}. "
                "That would be invariance, which self-attention does not have.", right=_rounding(gaps["invariance"])),
         Choice("MHA(ΠX) = Π MHA(X): the same output rows, shuffled the same way.",
                f"Permutation-equivariance: measured to {gaps['equivariance']:.0e}, float32 rounding. It is what "
                "the proof shows, layer by layer.", right=_rounding(gaps["equivariance"])),
         Choice("The outputs change in an unpredictable way.",
                "Every piece (linear maps, row-wise softmax, weighted sums) commutes with Π, so the change is "
                "exactly the same shuffle.")])


def _ch04_invariant() -> ChoiceQuestion:
    gaps = _shuffled_attention()
    measured = {     # choice: (the quantity's gap, why), each claim measured on the same layer and tokens
        "The first output row.":
            ("first row", "after the shuffle the first row belongs to whichever token landed first: the rows move"),
        "The attention matrix of a head.":
            ("weights", "it becomes Π A Πᵀ, the same numbers with rows and columns shuffled, not the same matrix"),
        "The mean of the output rows.":
            ("mean", "a mean ignores the order of what it averages; a class token kept in place is invariant for "
                     "the same reason"),
        "The mean of the output rows with a causal mask left in place.":
            ("causal mean", "a mask that stays while the tokens move breaks the symmetry: the proof needs the mask "
                            "shuffled along with the tokens")}
    return ChoiceQuestion(
        "In the same setting, which of these stays the same (to float32 rounding) when the input tokens are "
        "shuffled?",
        [Choice(text, f"Measured gap {gaps[key]:.1g}: {why}.", right=_rounding(gaps[key]))
         for text, (key, why) in measured.items()])


def _ch04_path() -> ChoiceQuestion:
    with_weights = multihead.use_fused_kernel(torch.device("cuda"), 10_000, None, True)
    without = multihead.use_fused_kernel(torch.device("cpu"), multihead.EXPLICIT_MAX_KEYS + 1, None, False)
    return ChoiceQuestion(
        "`vitref.MultiHeadAttention` is called with `return_attention=True` on a GPU, with 10,000 keys and no "
        "mask. Which attention runs?",
        [Choice("PyTorch's fused kernel, because the input is on a GPU.",
                f"The kernel does not return the weights; `use_fused_kernel` answers {with_weights} whenever they "
                "are asked for."),
         Choice("PyTorch's fused kernel, because there are more than `EXPLICIT_MAX_KEYS` keys.",
                "The number of keys decides only when no weights and no mask are asked for (then "
                f"`use_fused_kernel` answers {without} on a CPU past the threshold)."),
         Choice("The step-by-step computation in `forward`.",
                "A request for the weights, or a mask, always keeps the call on the step-by-step path: scores, "
                "softmax, weighted sum, with the weights kept.", right=not with_weights)])


# ----------------------------------------------------------------------------- 5. blocks


def _ch05_parameters() -> NumberQuestion:
    width = 256
    count = vitref.count_parameters(vitref.TransformerEncoderBlock(width, 8))
    return NumberQuestion(
        "How many parameters does `vitref.TransformerEncoderBlock(256, 8)` have (MLP of width 4E, two LayerNorms, "
        "biases included)?",
        answer=count,
        why=f"Attention 4E² + 4E, MLP 8E² + 5E, two LayerNorms 4E: 12E² + 13E = {count:,} for E = {width}.",
        wrong="Add the four E × E maps of attention, the two E × 4E maps of the MLP, every bias, and the scale and "
              "shift of both LayerNorms.",
        mistakes={12 * width**2: "That is the weight matrices only; the biases and the LayerNorms' scales and "
                                 "shifts add 13E.",
                  4 * width**2 + 6 * width: "That is the attention part (with its LayerNorm) alone; the MLP part "
                                            "comes on top.",
                  8 * width**2 + 7 * width: "That is the MLP part (with its LayerNorm) alone; attention adds its "
                                            "four E × E maps."})


def _ch05_pre_ln() -> ChoiceQuestion:
    return ChoiceQuestion(
        "Which pair of updates is the pre-LN encoder block that ViT uses?",
        [Choice("x ← LN(x + MSA(x)), then x ← LN(x + MLP(x))",
                "That is post-LN, the original Transformer's: it normalises after each addition, so the residual "
                "path passes through a LayerNorm twice per block."),
         Choice("x ← x + MSA(LN(x)), then x ← x + MLP(LN(x))",
                "Each sub-layer reads a normalised copy and adds its result to an untouched residual stream, which "
                "is why the ViT ends with one more LayerNorm before its head.", right=True),
         Choice("x ← MSA(LN(x)), then x ← MLP(LN(x))",
                "Without the `x +` there is no residual connection: the gradient must pass through every "
                "sub-layer on its way down."),
         Choice("x ← LN(x) + MSA(x), then x ← LN(x) + MLP(x)",
                "The sub-layers would see the raw stream and the stream itself would be replaced by its "
                "normalised copy: neither arrangement of the chapter.")])


def _ch05_layernorm() -> ChoiceQuestion:
    return ChoiceQuestion(
        "What must a LayerNorm written from its formula do to match `nn.LayerNorm`?",
        [Choice("Normalise each feature over the batch.",
                "That is BatchNorm. LayerNorm normalises each token vector over its own D features, so it does not "
                "depend on the batch."),
         Choice("Divide by the sample standard deviation (D − 1) and add ε to it.",
                f"That variant differs from `nn.LayerNorm` by the factor √((D − 1)/D) = {math.sqrt(767 / 768):.6f} "
                "for D = 768: small, systematic, and rejected by a check against PyTorch."),
         Choice("Normalise each token over its D features with the biased variance (divide by D), ε inside the "
                "square root, then scale and shift.",
                "(x − μ)/√(σ² + ε), with σ² averaged over D, then γ and β: that is the function `nn.LayerNorm` "
                "computes.", right=True)])


def _ch05_dropout() -> NumberQuestion:
    torch.manual_seed(0)
    after = nn.Dropout(p=0.2)(torch.ones(1000))                      # a new module is in training mode
    survivor = after[after != 0][0].item()
    return NumberQuestion(
        "A tensor of ones goes through `nn.Dropout(p=0.2)` in training mode. What value does a one that survives "
        "come out as?",
        answer=round(survivor, 6), tolerance=0.001,
        why=f"Survivors are divided by 1 − p: 1/0.8 = {survivor:g}. The expected value stays 1, so nothing needs "
            "rescaling in evaluation mode, where dropout does nothing.",
        wrong="Dropout keeps each value's expected size: a value survives with probability 1 − p, so what must it "
              "be multiplied by?",
        mistakes={0.8: "Multiplying by 1 − p would lower the mean to 0.64; survivors are divided by 1 − p.",
                  1: "That is evaluation mode. In training the survivors are scaled up to make up for the zeros.",
                  0.2: "p is the share of values set to zero, not a factor applied to the survivors."})


def _input_gradient(residual: bool, depth: int = 32, width: int = 64) -> float:
    """Root-mean-square gradient at the input of ``depth`` tanh layers, with or without residual connections."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]
    if residual:
        layers = [vitref.ResidualAdd(layer) for layer in layers]
    x = torch.randn(32, width, requires_grad=True)                   # (B, width)
    nn.Sequential(*layers)(x).sum().backward()
    assert x.grad is not None
    return x.grad.pow(2).mean().sqrt().item()


def _ch05_residual() -> ChoiceQuestion:
    plain, residual = _input_gradient(False), _input_gradient(True)
    return ChoiceQuestion(
        "Through 32 plain tanh layers the gradient reaching the input nearly vanishes; with a residual connection "
        "around each layer it does not. Why?",
        [Choice("The block's Jacobian is I + ∂F/∂x: the identity carries the gradient down unchanged, whatever the "
                "layers do.",
                "Each block adds its own Jacobian to the identity, so no product of small factors can wipe the "
                f"gradient out: here {residual:.1f} per entry with residual connections, against {plain:.1e} "
                "without.", right=residual > 100 * plain),
         Choice("The residual connection makes the tanh layers linear.",
                "The layers stay non-linear; the `x +` adds a path around them, it does not change them."),
         Choice("The residual connection normalises the gradient.",
                "Nothing is normalised: y = x + F(x) only adds the input to the output.")])


# ----------------------------------------------------------------------------- 6. patch embedding

PATCH_PATTERNS = {  # name: (pattern, why); the right one is the pattern whose values equal vitref's
    "slow_inside": ("b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)",
                    "Right shape, wrong numbers: with `(s1 h)` the index inside the patch is the slow one, so a "
                    "\"patch\" gathers pixels from all over the image, a thumbnail of it."),
    "column_by_column": ("b c (h s1) (w s2) -> b (w h) (s1 s2 c)",
                         "Right shape, wrong order: `(w h)` numbers the patches column by column."),
    "row_by_row": ("b c (h s1) (w s2) -> b (h w) (s1 s2 c)",
                   "Its values equal `vitref.image_to_patches`: inside each parenthesis the first name is the slow "
                   "index, so `(h w)` goes row by row and `(s1 s2 c)` pixel by pixel, channel fastest."),
    "channels_first": ("b c (h s1) (w s2) -> b (h w) (c s1 s2)",
                       "Right shape, wrong order: `(c s1 s2)` puts each channel's pixels together, the order of a "
                       "`Conv2d` kernel; converting between the two layers needs this rearrange."),
}


def _ch06_pattern() -> ChoiceQuestion:
    images = torch.randn(2, 3, 8, 12)                                # (B, C, H, W), not square
    reference = vitref.image_to_patches(images, 4)                   # (B, N, P*P*C)
    return ChoiceQuestion(
        "Which pattern cuts `(B, C, H, W)` images into the ViT's tokens: patches numbered row by row, each patch's "
        "pixels row by row, the colour values of a pixel side by side?",
        [Choice(f"`{pattern}`", why, right=torch.equal(rearrange(images, pattern, s1=4, s2=4), reference))
         for pattern, why in PATCH_PATTERNS.values()])


def _ch06_conv_parameters() -> NumberQuestion:
    count = vitref.count_parameters(nn.Conv2d(3, 768, kernel_size=16, stride=16))
    return NumberQuestion(
        "ViT-B/16's projection written as a convolution: `nn.Conv2d(3, 768, kernel_size=16, stride=16)`. How many "
        "parameters does it have, bias included?",
        answer=count,
        why=f"768 kernels of 3 × 16 × 16 weights plus 768 biases: {count:,}, exactly the `Linear(P²C, D)` on "
            "flattened patches, the same map.",
        wrong="Each of the D output channels has one weight for every number of a patch (P²C of them) and one bias.",
        mistakes={count - 768: "That leaves out the 768 biases, one per output channel.",
                  16 * 16 * 768 + 768: "Each kernel covers all 3 input channels: P²C weights per output channel, "
                                       "not P²."})


def _ch06_class_token() -> ChoiceQuestion:
    embed = vitref.PatchEmbedding(3, 16, 768, img_size=224)
    with torch.no_grad():
        first = embed(torch.rand(4, 3, 224, 224))[:, 0]              # (B, D): token 0 of 4 images
    shared = torch.allclose(first, first[:1].expand(4, -1))
    return ChoiceQuestion(
        "A batch of 4 different images goes through `PatchEmbedding`. What is token 0 of each image's output?",
        [Choice("The first patch of that image, top left.",
                "The patches start at token 1: token 0 is the class token put in front of them."),
         Choice("The same vector for all 4 images: the learned class token plus position 0.",
                "The class token has no pixels of its own; it is repeated over the batch and collects information "
                "from the patches in the blocks that follow.", right=shared),
         Choice("The mean of that image's patch tokens.",
                "Averaging the output tokens is an alternative to a class token, but `PatchEmbedding` prepends a "
                "learned vector."),
         Choice("A different random vector for every image.",
                "It is a parameter, learned once and shared by every image.")])


def _ch06_shuffled_patches() -> ChoiceQuestion:
    torch.manual_seed(0)
    model = nn.Sequential(vitref.PatchEmbedding(3, 16, 64, img_size=224, positions=None),
                          vitref.TransformerEncoderBlock(64, 4)).eval()
    photo = torch.rand(1, 3, 224, 224)
    shuffled = vitref.patches_to_image(vitref.image_to_patches(photo, 16)[:, torch.randperm(196)], 16,
                                       grid=(14, 14), channels=3)    # (1, 3, 224, 224)
    with torch.no_grad():
        change = (model(photo)[:, 0] - model(shuffled)[:, 0]).abs().max().item()
    return ChoiceQuestion(
        "A model with no position table sees a photo, then the same photo with its 196 patches shuffled. What "
        "happens to the class token's output?",
        [Choice("It changes, because every patch is in a new place.",
                "Without a position table nothing tells the model where a patch was: the class token attends to "
                "the patches as a set."),
         Choice("It stays the same, up to float32 rounding.",
                f"Measured here: it changes by {change:.0e}. Only the position table tells the model where each "
                "patch was.", right=change < 1e-4),
         Choice("It is shuffled the same way as the patches.",
                "One vector cannot be shuffled: the patch outputs move with their patches, and the class token's "
                "stays where it is.")])


# ----------------------------------------------------------------------------- 7. the Vision Transformer


def _small_vit_moved() -> tuple[vitref.ViT, vitref.ViT]:
    """A small ViT for 28 x 28 images (P = 7) and its copy for 42 x 42 (`resize_vit`)."""
    small = vitref.ViT(img_size=28, patch_size=7, in_channels=1, num_classes=10, dim=32, depth=1, num_heads=4,
                       mlp_dim=64)
    moved = resize_vit(small, 42)
    assert isinstance(moved, vitref.ViT)
    return small, moved


def _ch07_new_resolution() -> ChoiceQuestion:
    small, moved = _small_vit_moved()
    old = {name: tuple(p.shape) for name, p in small.named_parameters()}
    changed = [name for name, p in moved.named_parameters() if tuple(p.shape) != old[name]]
    return ChoiceQuestion(
        "A trained ViT is moved to larger images with the same patch size. Which of its parameters no longer fit?",
        [Choice("The patch embedding: larger images need a larger projection.",
                "The projection maps one P × P patch of C channels to D numbers: it depends on P and C, never on "
                "the image size."),
         Choice("The attention weights of every block, because there are more tokens.",
                "Attention's maps are D × D and act on each token; more tokens mean a larger score matrix, "
                "computed, not stored."),
         Choice("Only the position table.",
                "It has one row per patch plus the class token's, and the grid grows; it is the only tensor whose "
                f"shape changes ({', '.join(changed)} here). The ViT paper resamples it in 2-D.",
                right=changed == ["pos_embed"]),
         Choice("The classification head.",
                "The head depends on the number of classes only; it reads one D-dimensional token.")])


def _ch07_head() -> NumberQuestion:
    b16 = dict(img_size=224, patch_size=16, in_channels=3, dim=768, depth=12, num_heads=12, mlp_dim=3072)
    grown = vit_parameter_count(num_classes=10, **b16) - vit_parameter_count(num_classes=3, **b16)
    return NumberQuestion(
        "ViT-B/16 (D = 768) is given a head for 10 classes instead of 3. By how many parameters does the model "
        "grow?",
        answer=grown,
        why=f"Only the head changes: a Linear(768, K) has 768K weights and K biases, so 7 more classes add "
            f"7 × 769 = {grown:,}.",
        wrong="Only the head depends on the number of classes: count the weights and biases of 7 more outputs of a "
              "Linear(768, K).",
        mistakes={7 * 768: "That counts the weights of the 7 new outputs but not their biases.",
                  7: "Each new class needs a whole row of 768 weights in the head, plus its bias."})


def _ch07_table_rows() -> NumberQuestion:
    small, moved = _small_vit_moved()
    new_rows, old_rows, grid = moved.pos_embed.shape[1], small.pos_embed.shape[1], 42 // 7
    return NumberQuestion(
        "A ViT trained on 28 × 28 images with P = 7 is used at 42 × 42. How many rows must its position table have "
        "now?",
        answer=new_rows,
        why=f"The grid grows from {28 // 7} × {28 // 7} to {grid} × {grid} patches, plus one row for the class "
            f"token: {new_rows}. `resize_vit` resamples the old {old_rows} rows to that.",
        wrong="Count the patches of the new grid (42/7 per side), then remember the class token.",
        mistakes={grid**2: "That is the patches only; the class token has a row of the table too.",
                  old_rows: "That is the old table, for the 28 × 28 grid; the new grid has more patches.",
                  grid + 1: "The grid is square: 42/7 rows of 42/7 patches each."})


def _ch07_inductive_bias() -> ChoiceQuestion:
    return ChoiceQuestion(
        "What does a small CNN know in advance that a ViT must learn from data?",
        [Choice("Which patches are related, through attention between all of them.",
                "That is the ViT's own mechanism: global from the first block, and with no idea of neighbourhood "
                "built in."),
         Choice("Locality and translation equivariance: each output looks at a pixel's neighbours, with the same "
                "weights at every position.",
                "These assumptions are right for images, so the CNN need not learn them; the ViT, which only cuts "
                "patches locally, must, and that takes data or epochs.", right=True),
         Choice("The position of every patch, through its position table.",
                "A CNN has no position table; the ViT does, and must learn what it means."),
         Choice("Nothing: both start from random weights and learn everything.",
                "Both start from random weights, but the convolution's structure (small kernels shared across the "
                "image) is a built-in assumption.")])


def _ch07_interpolation() -> ChoiceQuestion:
    return ChoiceQuestion(
        "Why is a ViT's position table resized as a 2-D grid rather than stretched as a list of rows?",
        [Choice("The rows follow the patch grid row by row; stretching the list mixes the end of one grid row with "
                "the start of the next.",
                "The table is a D-channel image of the patch grid: resizing it in 2-D keeps neighbours neighbours, "
                "which a 1-D stretch of the row-major list does not.", right=True),
         Choice("A 1-D interpolation would change the class token's row.",
                "The class token's row is set aside and kept in both cases; the difference is in the patch rows."),
         Choice("It makes no difference; 2-D is just faster.",
                "They blend different rows: stretched as a list, the last patch of one grid row is blended with "
                "the first of the next, which lie on opposite sides of the image.")])


# ----------------------------------------------------------------------------- 8. the decoder


def _ch08_mask_after_softmax() -> ChoiceQuestion:
    torch.manual_seed(0)
    q, k = torch.randn(2, 6, 8).unbind(0)                            # (T, d) each
    after = torch.softmax(q @ k.T / math.sqrt(8), dim=-1) * vitref.causal_mask(6)   # the mistake
    smallest = after.sum(-1).min().item()
    return ChoiceQuestion(
        "A causal mask is applied after the softmax (the weights multiplied by the mask) instead of to the scores "
        "before it. What goes wrong?",
        [Choice("Nothing: the blocked weights are zero either way.",
                "They are zero, but the allowed weights were normalised over all keys, future ones included."),
         Choice("The rows of weights no longer sum to one.",
                "The softmax already spread each row over every key; zeroing the future leaves less than 1 (here "
                f"as little as {smallest:.2f}). Blocked scores must be −∞ before the softmax.",
                right=smallest < 0.99),
         Choice("Later tokens still leak into earlier outputs.",
                "The blocked weights are exactly zero after the multiplication, so no later value is read; the "
                "problem is the size of what remains."),
         Choice("The weights become NaN.",
                "NaN comes from a row with every score at −∞; multiplying by a mask only produces zeros.")])


def _ch08_cross_shapes() -> ChoiceQuestion:
    cross = vitref.CrossAttention(emb_size=16, num_heads=4, context_dim=32)
    with torch.no_grad():
        _, weights = cross(torch.randn(2, 3, 16), torch.randn(2, 7, 32), return_attention=True)
    shape = tuple(weights.shape)
    return ChoiceQuestion(
        "A decoder with T = 3 tokens of width 16 cross-attends to an encoder output of S = 7 tokens of width 32, "
        "with `CrossAttention(16, 4, context_dim=32)` and a batch of 2. What shape do the attention weights have?",
        [Choice("(2, 4, 3, 3)",
                "That is self-attention's shape. Here the keys come from the encoder: one column per encoder "
                "token."),
         Choice("(2, 4, 7, 7)",
                "The rows are the decoder's queries, 3 of them; the encoder only provides keys and values."),
         Choice("(2, 4, 7, 3)",
                "Rows and columns are swapped: one row per query (decoder token), one column per key (encoder "
                "token)."),
         Choice(f"{shape}",
                "Batch, heads, one row per decoder token and one column per encoder token: T × S, square only when "
                "the two sequences are equally long.", right=shape == (2, 4, 3, 7))])


def _ch08_cache() -> ChoiceQuestion:
    return ChoiceQuestion(
        "Why may a decoder-only model keep the keys and values of earlier tokens in a cache and reuse them when a "
        "new token is appended?",
        [Choice("Because of the causal mask: no earlier token attends to a later one, so its keys and values in "
                "every layer stay exactly what they were.",
                "Appending a token changes nothing for the earlier positions, so the cached keys and values are the "
                "ones a full recomputation would give; cached and full logits agree to rounding.", right=True),
         Choice("Because keys and values do not depend on the other tokens.",
                "In every layer above the first, a token's keys and values are computed from its input to that "
                "layer, which attention has mixed with earlier tokens."),
         Choice("It is an approximation that trades a little accuracy for speed.",
                "With the causal mask nothing is approximated: cached and full computations agree to rounding."),
         Choice("Because the model is in evaluation mode.",
                "Evaluation mode switches dropout off, but it is the mask that keeps earlier positions independent "
                "of later ones; without it the cache would be wrong.")])


def _ch08_beam() -> NumberQuestion:
    bos, a, b, c, d, end = range(6)
    table = torch.zeros(6, 6, dtype=torch.float64)                   # next-token probabilities
    table[bos, a], table[bos, b] = 0.55, 0.45
    table[a, c], table[a, d], table[a, end] = 0.4, 0.3, 0.3
    table[b, c], table[b, d] = 0.7, 0.3
    table[[c, d], end] = 1.0
    table[end, end] = 1.0
    model = BigramLM.from_probs(table)
    greedy = math.exp(beam_search(model, [bos], 1, 3, eos_id=end)[0].log_prob)
    two_beams = math.exp(beam_search(model, [bos], 2, 3, eos_id=end)[0].log_prob)

    def p(first: int, then: int) -> str:
        return f"{table[first, then].item():g}"

    return NumberQuestion(
        f"A bigram model: after BOS, A has probability {p(bos, a)} and B {p(bos, b)}; after A: C {p(a, c)}, "
        f"D {p(a, d)}, end {p(a, end)}; after B: C {p(b, c)}, D {p(b, d)}; C and D are followed by the end. What "
        "is the probability of the sequence that beam search with two beams returns? (Three decimals are enough.)",
        answer=round(two_beams, 6), tolerance=0.001,
        why=f"Two beams keep B alive after the first step, and B then C wins: {p(bos, b)} × {p(b, c)} = "
            f"{two_beams:.3f}, more than greedy decoding's A then C, {p(bos, a)} × {p(a, c)} = {greedy:.3f}.",
        wrong="Keep the two best prefixes after the first token, extend both, and compare the products of the "
              "probabilities along each sequence.",
        mistakes={round(greedy, 3): "That is greedy decoding's sequence, A then C. Greedy commits to A at the first "
                                    "step; the second beam keeps B, whose follower is much likelier.",
                  table[b, c].item(): "That is one step only; a sequence's probability is the product over its "
                                      "steps."})


def _ch08_temperature() -> ChoiceQuestion:
    logits = torch.tensor([2.0, 1.0, 0.0])
    top = {tau: torch.softmax(logits / tau, dim=-1).max().item() for tau in (0.5, 1.0, 2.0)}
    return ChoiceQuestion(
        "The next token is sampled with temperature τ, as softmax(z/τ). Which is true?",
        [Choice("τ < 1 sharpens the distribution towards greedy decoding; τ > 1 flattens it towards uniform.",
                f"For the logits [2, 1, 0] the largest probability is {top[0.5]:.2f} at τ = 0.5, {top[1.0]:.2f} at "
                f"τ = 1 and {top[2.0]:.2f} at τ = 2.", right=top[0.5] > top[1.0] > top[2.0]),
         Choice("τ > 1 makes the model more confident.",
                "Dividing the logits by a large τ shrinks their differences, so the probabilities move closer "
                "together."),
         Choice("The temperature changes which token is the most likely.",
                "Dividing every logit by the same positive τ keeps their order: the most likely token stays the "
                "same, only the spread changes.")])


CHAPTERS: dict[int, list[Callable[[], Question]]] = {
    1: [_ch01_patch_count, _ch01_reading_order, _ch01_lookup, _ch01_halving],
    2: [_ch02_no_positions, _ch02_pair_index, _ch02_self_dot, _ch02_shift, _ch02_learned_table],
    3: [_ch03_shapes, _ch03_scaling, _ch03_stable_softmax, _ch03_cost, _ch03_fully_masked],
    4: [_ch04_parameters, _ch04_layout, _ch04_equivariance, _ch04_invariant, _ch04_path],
    5: [_ch05_parameters, _ch05_pre_ln, _ch05_layernorm, _ch05_dropout, _ch05_residual],
    6: [_ch06_pattern, _ch06_conv_parameters, _ch06_class_token, _ch06_shuffled_patches],
    7: [_ch07_new_resolution, _ch07_head, _ch07_table_rows, _ch07_inductive_bias, _ch07_interpolation],
    8: [_ch08_mask_after_softmax, _ch08_cross_shapes, _ch08_cache, _ch08_beam, _ch08_temperature],
}
