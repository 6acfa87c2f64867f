"""Conceptual questions, one or two per chapter: predict a number, then run the code to see it.

Each answer is a plain number (``kind="value"``): a count, a ratio, a value read off a
table, or the number of a multiple-choice option. The recipe only records it; the correct
value and the catalogue of wrong values (each with a hint that teaches) live on the
grader's side only (:mod:`autograder.judging.catalogue.concepts`), never in this package.

A case's parameters say how the number is compared: ``options`` (an option number in
``1..options``, compared exactly), or ``atol`` / ``rtol`` (absolute / relative tolerance;
counts use neither and are compared exactly).
"""
from __future__ import annotations

from .base import Case, Question, register


def _run_value(answer, case, rec):
    rec.output("answer", answer)


def concept(qid: str, chapter: str, title: str, answer_name: str, what: str, **compare) -> Question:
    """Register a value question: ``what`` says in words what the number is (for messages)."""
    return register(Question(
        id=qid,
        chapter=chapter,
        title=title,
        points=1,
        answer_name=answer_name,
        kind="value",
        cases=[Case("your answer", dict(compare))],
        run_case=_run_value,
        outputs={"answer": what},
    ))


concept("concept_patch_numbers", "01_tokens", "Predict: numbers per patch token", "numbers_per_token",
        "how many numbers one patch token of a 32 x 32 RGB image holds, with patch size 8")
concept("concept_sinusoid_value", "02_positional_encoding", "Predict: one entry of the sinusoidal table",
        "table_entry", "P[5, 2] of getPositionEncoding(seq_len=8, d=4, n=100), to 2 decimals", atol=0.006)
concept("concept_masked_row", "03_attention", "Predict: the weights of a fully masked row",
        "masked_row_weight", "the weight of each key in a fully masked row (-1e9 fill, S = 5 keys)", atol=0.001)
concept("concept_heads_params", "04_multihead_attention", "Predict: parameters and the number of heads",
        "heads_param_factor", "how many times as many parameters MultiHeadAttention(64, 8) has as "
        "MultiHeadAttention(64, 4)", rtol=0.001)
concept("concept_mlp_share", "05_blocks", "Predict: where the parameters of an encoder block are",
        "mlp_to_attention", "the parameters of the feed-forward block divided by those of the attention, "
        "emb_size 768, expansion 4, to two decimals", atol=0.006)
concept("concept_warmup", "05_blocks", "Why post-LN needs a warm-up (multiple choice)", "warmup_option",
        "the number of the right option", options=4)
concept("concept_position_rows", "06_patch_embedding", "Predict: the rows of the position table",
        "position_rows", "how many rows the position table of PatchEmbedding(img_size=224, patch_size=16) has")
concept("concept_initial_loss", "07_vit", "Predict: the loss of an untrained classifier", "initial_loss",
        "the cross-entropy of 10 equal logits (natural log), to 2 decimals", atol=0.006)
concept("concept_decoding_work", "08_decoder", "Predict: the work a cache saves", "keys_without_cache",
        "how many key vectors (per layer and head) 10 decoding steps compute without a cache")
concept("concept_augmentation", "09_training", "Why ViTs need data (multiple choice)", "data_option",
        "the number of the right option", options=4)
