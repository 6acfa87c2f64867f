"""Bad input gets a ValueError that says what was expected, with the numbers involved."""
import re

import pytest
import torch

import vitref


def mentions(*words, text=()):
    """A regex for pytest.raises(match=...): every number in ``words`` as a whole number ("30" is not
    found in "300" but is in "32x30"), and every fragment of ``text`` (case-insensitive), in any order."""
    numbers = "".join(rf"(?=.*(?<![\d.]){re.escape(str(w))}(?!\d))" for w in words)
    fragments = "".join(rf"(?=.*{fragment})" for fragment in text)
    return "(?si)" + numbers + fragments


def test_mentions_helper():
    assert re.search(mentions(30, 4), "image size 30 is not divisible by patch size 4")
    assert not re.search(mentions(30, 4), "image size 30 is not divisible by patch size 40")
    assert not re.search(mentions(30, 4), "image size 30 is not divisible by patch size 0.4")
    assert re.search(mentions(30, 32), "image size 32x30")
    assert not re.search(mentions(3), "got 30 channels")
    assert re.search(mentions(3, 1, text=["channel"]), "expected 3 Channels, got 1")
    assert not re.search(mentions(3, 1, text=["channel"]), "expected 3, got 1")


# ---------------------------------------------------------------- patches and images

def test_image_not_divisible_by_patch():
    with pytest.raises(ValueError, match=mentions(30, 4)):
        vitref.image_to_patches(torch.zeros(1, 3, 30, 30), 4)
    with pytest.raises(ValueError, match=mentions(30, 4)):
        vitref.ConvPatchEmbedding(3, 4, 8)(torch.zeros(1, 3, 30, 30))
    with pytest.raises(ValueError, match=mentions(30, 4)):
        vitref.LinearPatchEmbedding(3, 4, 8)(torch.zeros(1, 3, 30, 30))


def test_non_square_image_not_divisible_by_patch():
    with pytest.raises(ValueError, match=mentions(30, 4)):
        vitref.image_to_patches(torch.zeros(1, 3, 32, 30), 4)


@pytest.mark.parametrize("make", [
    lambda: vitref.PatchEmbedding(in_channels=3, patch_size=4, emb_size=8, img_size=30),
    lambda: vitref.ViT(img_size=30, patch_size=4, in_channels=3, num_classes=2, dim=8, depth=1, num_heads=2, mlp_dim=8),
], ids=["PatchEmbedding", "ViT"])
def test_model_for_image_not_divisible_by_patch(make):
    with pytest.raises(ValueError, match=mentions(30, 4)):
        make()


def test_wrong_number_of_channels():
    model = vitref.ViT(img_size=8, patch_size=4, in_channels=3, num_classes=2, dim=8, depth=1, num_heads=2, mlp_dim=8)
    with pytest.raises(ValueError, match=mentions(3, 1, text=["channel"])):
        model(torch.zeros(2, 1, 8, 8))
    with pytest.raises(ValueError, match=mentions(3, 1, text=["channel"])):
        vitref.PatchEmbedding(in_channels=3, patch_size=4, emb_size=8, img_size=8)(torch.zeros(2, 1, 8, 8))
    with pytest.raises(ValueError, match=mentions(1, 3, text=["channel"])):
        vitref.ConvPatchEmbedding(1, 4, 8)(torch.zeros(2, 3, 8, 8))


def test_wrong_image_size_for_model():
    model = vitref.ViT(img_size=32, patch_size=4, in_channels=3, num_classes=2, dim=8, depth=1, num_heads=2, mlp_dim=8)
    with pytest.raises(ValueError, match=mentions(32, 28)):
        model(torch.zeros(1, 3, 28, 28))


def test_images_must_be_4d():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        vitref.image_to_patches(torch.zeros(3, 8, 8), 4)


# ---------------------------------------------------------------- heads

@pytest.mark.parametrize("make", [
    lambda: vitref.MultiHeadAttention(10, 3),
    lambda: vitref.MultiHeadAttentionLoop(10, 3),
    lambda: vitref.CrossAttention(10, 3),
    lambda: vitref.TransformerEncoderBlock(10, 3),
    lambda: vitref.ViT(img_size=8, patch_size=4, in_channels=3, num_classes=2, dim=10, depth=1, num_heads=3, mlp_dim=8),
], ids=["MultiHeadAttention", "MultiHeadAttentionLoop", "CrossAttention", "TransformerEncoderBlock", "ViT"])
def test_embedding_dim_not_divisible_by_heads(make):
    with pytest.raises(ValueError, match=mentions(10, 3)):
        make()


# ---------------------------------------------------------------- masks

def test_attention_mask_of_wrong_shape():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=mentions(4, 5, text=["mask"])):
        vitref.scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=mentions(text=["mask"])):
        vitref.scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool))


def test_mha_mask_of_wrong_shape():
    mha = vitref.MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    for module_call in (lambda m: mha(x, mask=m), lambda m: mha(x, mask=m, return_attention=True)):
        with pytest.raises(ValueError, match=mentions(6, text=["mask"])):
            module_call(vitref.causal_mask(6))
    block = vitref.TransformerEncoderBlock(8, 2)
    with pytest.raises(ValueError, match=mentions(text=["mask"])):
        block(x, mask=vitref.causal_mask(4))


# ---------------------------------------------------------------- positions

def test_sequence_longer_than_positional_table():
    with pytest.raises(ValueError, match=mentions(5, 4)):
        vitref.LearnedPositionalEmbedding(4, 8)(torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match=mentions(7, 6)):
        vitref.SinusoidalPositionalEncoding(6, 8)(torch.zeros(2, 7, 8))


def test_seq2seq_sequence_longer_than_max_len():
    model = vitref.Seq2SeqTransformer(src_vocab=5, tgt_vocab=5, dim=8, depth=1, num_heads=2, mlp_dim=8, max_len=6)
    with pytest.raises(ValueError, match=mentions(9, 6)):
        model(torch.zeros(1, 9, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))


def test_odd_d_model_for_sinusoidal_encoding():
    with pytest.raises(ValueError, match=mentions(5, text=["even"])):
        vitref.sinusoidal_encoding(4, 5)


def test_odd_width_and_bad_shapes_for_apply_rope():
    with pytest.raises(ValueError, match=mentions(7, text=["even", "D"])):
        vitref.apply_rope(torch.zeros(2, 3, 7))
    with pytest.raises(ValueError, match=mentions(text=["shape", "T, D"])):
        vitref.apply_rope(torch.zeros(6))
    with pytest.raises(ValueError, match=mentions(0, text=["base"])):
        vitref.apply_rope(torch.zeros(2, 3, 4), base=0)


# ---------------------------------------------------------------- attention shapes

def test_query_key_dim_mismatch():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=mentions(4, 6, text=["d_k"])):
        vitref.scaled_dot_product_attention(q, k, v)


def test_key_value_length_mismatch():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 6, 7)
    with pytest.raises(ValueError, match=mentions(5, 6)):
        vitref.scaled_dot_product_attention(q, k, v)


def test_mha_input_width_mismatch():
    with pytest.raises(ValueError, match=mentions(8, 6)):
        vitref.MultiHeadAttention(8, 2)(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=mentions(8, 6)):
        vitref.AttentionHead(8, 4)(torch.randn(2, 5, 6))


def test_cross_attention_context_width_mismatch():
    cross = vitref.CrossAttention(8, 2, context_dim=6)
    with pytest.raises(ValueError, match=mentions(6, 5)):
        cross(torch.randn(2, 3, 8), torch.randn(2, 4, 5))


def test_embedding_token_out_of_range():
    with pytest.raises(ValueError, match=mentions(7, 5)):
        vitref.embedding_lookup(torch.tensor([1, 7]), torch.randn(5, 3))
