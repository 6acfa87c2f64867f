"""vitref.decoder: masked self-attention, decoder block, ViT decoder, encoder-decoder Transformer."""
import pytest
import torch

import vitref


def randomize_(module, std=0.3):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)
    return module


def changed_positions(before, after):
    """Which token positions (dim 1) differ anywhere: list of bools."""
    return ((after - before).abs().amax(dim=(0, 2)) > 1e-12).tolist()


# ---------------------------------------------------------------- causal self-attention

def test_causal_mask_blocks_the_future_in_mha(float64):
    mha = randomize_(vitref.MultiHeadAttention(8, 2)).eval()
    x = torch.randn(2, 6, 8)
    later = x.clone()
    later[:, 3] += torch.randn(8)  # change token 3
    mask = vitref.causal_mask(6)
    assert changed_positions(mha(x, mask=mask), mha(later, mask=mask)) == [False, False, False, True, True, True]
    # without the mask every position sees the change
    assert all(changed_positions(mha(x), mha(later)))


def test_masked_mha_equals_mha_with_causal_mask(float64):
    masked = randomize_(vitref.MaskedMultiHeadAttention(8, 2)).eval()
    plain = vitref.MultiHeadAttention(8, 2).eval()
    plain.load_state_dict(masked.state_dict())
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(masked(x), plain(x, mask=vitref.causal_mask(5)))
    out, weights = masked(x, return_attention=True)
    torch.testing.assert_close(out, plain(x, mask=vitref.causal_mask(5)))
    assert (weights.triu(diagonal=1) == 0).all()  # no weight on later tokens
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 5))


# ---------------------------------------------------------------- decoder block

def test_decoder_block_shapes_and_attributes():
    block = vitref.DecoderBlock(16, 4, 32, context_dim=10).eval()
    for name in ("norm1", "self_attn", "norm2", "cross_attn", "norm3", "mlp"):
        assert hasattr(block, name), name
    x, context = torch.randn(2, 5, 16), torch.randn(2, 7, 10)
    assert tuple(block(x, context).shape) == (2, 5, 16)
    assert tuple(block(x, context, self_mask="causal").shape) == (2, 5, 16)
    assert tuple(block(x[:1], context[:1, :3]).shape) == (1, 5, 16)


def test_decoder_block_causal_self_mask_blocks_the_future(float64):
    block = randomize_(vitref.DecoderBlock(8, 2, 16, context_dim=6)).eval()
    x, context = torch.randn(2, 5, 8), torch.randn(2, 4, 6)
    later = x.clone()
    later[:, 2] += torch.randn(8)  # not a constant shift: LayerNorm would erase that
    before = block(x, context, self_mask="causal")
    after = block(later, context, self_mask="causal")
    assert changed_positions(before, after) == [False, False, True, True, True]
    # an explicit causal mask tensor means the same
    torch.testing.assert_close(block(x, context, self_mask=vitref.causal_mask(5)), before)
    # with no self mask the earlier tokens do see the change
    assert all(changed_positions(block(x, context), block(later, context)))


def test_decoder_block_output_depends_on_context(float64):
    block = randomize_(vitref.DecoderBlock(8, 2, 16)).eval()
    x, context = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    other = context.clone()
    other[1, 2] += torch.randn(8)  # change one context token of example 1
    before, after = block(x, context), block(x, other)
    torch.testing.assert_close(after[0], before[0])  # example 0 untouched
    assert (after[1] - before[1]).abs().amax(-1).gt(1e-9).all()  # every query of example 1 reads the context
    # the context is a set: permuting its tokens changes nothing
    torch.testing.assert_close(block(x, context[:, [3, 1, 0, 2]]), before)


def test_decoder_block_is_pre_ln(float64):
    block = randomize_(vitref.DecoderBlock(8, 2, 16, context_dim=6)).eval()
    x, context = torch.randn(2, 5, 8), torch.randn(2, 3, 6)
    mask = vitref.causal_mask(5)
    h = x + block.self_attn(block.norm1(x), mask=mask)
    h = h + block.cross_attn(block.norm2(h), context)
    expected = h + block.mlp(block.norm3(h))
    torch.testing.assert_close(block(x, context, self_mask="causal"), expected)
    result = block(x, context, self_mask="causal", return_attention=True)
    torch.testing.assert_close(result[0], expected)


# ---------------------------------------------------------------- ViT decoder

@pytest.mark.parametrize("causal", [False, True])
def test_vit_decoder_outputs_patches(causal):
    decoder = randomize_(
        vitref.ViTDecoder(img_size=8, patch_size=4, dim=16, num_heads=2, mlp_dim=32, depth=2, in_channels=3,
                          causal=causal)
    ).eval()
    context = torch.randn(2, 5, 16)  # e.g. ViT encoder output (B, N+1, D)
    patches = decoder(context)
    assert tuple(patches.shape) == (2, 4, 4 * 4 * 3)  # (B, N, P*P*C)
    other = context.clone()
    other[1] += torch.randn(5, 16)
    changed = decoder(other)
    torch.testing.assert_close(changed[0], patches[0])
    assert not torch.allclose(changed[1], patches[1])


def test_vit_decoder_causal_flag_is_used(float64):
    config = dict(img_size=8, patch_size=4, dim=16, num_heads=2, mlp_dim=32, depth=1, in_channels=3)
    parallel = randomize_(vitref.ViTDecoder(**config, causal=False)).eval()
    causal = vitref.ViTDecoder(**config, causal=True).eval()
    causal.load_state_dict(parallel.state_dict())
    context = torch.randn(2, 5, 16)
    block = causal.blocks[0]
    tokens = causal.pos_embed(causal.mask_token.expand(2, 4, -1))  # (B, N, D): mask token + positions
    h = tokens + block.self_attn(block.norm1(tokens), mask=vitref.causal_mask(4))
    h = h + block.cross_attn(block.norm2(h), context)
    h = h + block.mlp(block.norm3(h))
    torch.testing.assert_close(causal(context), causal.head(causal.norm(h)))
    assert not torch.allclose(causal(context), parallel(context))


def test_vit_decoder_patches_fold_back_to_an_image():
    decoder = vitref.ViTDecoder(img_size=8, patch_size=2, dim=8, num_heads=2, mlp_dim=16, depth=1, in_channels=1)
    patches = decoder(torch.randn(1, 3, 8))
    assert tuple(patches.shape) == (1, 16, 4)


# ---------------------------------------------------------------- encoder-decoder Transformer

def small_seq2seq():
    model = vitref.Seq2SeqTransformer(src_vocab=11, tgt_vocab=13, dim=16, depth=2, num_heads=2, mlp_dim=32, max_len=20)
    return randomize_(model, std=0.5).eval()


def test_seq2seq_logits_shape_and_causality():
    model = small_seq2seq()
    src = torch.randint(0, 11, (2, 7))
    tgt = torch.randint(0, 13, (2, 5))
    logits = model(src, tgt)
    assert tuple(logits.shape) == (2, 5, 13)
    changed_tgt = tgt.clone()
    changed_tgt[:, 3] = (tgt[:, 3] + 1) % 13
    assert changed_positions(logits, model(src, changed_tgt)) == [False, False, False, True, True]
    changed_src = src.clone()
    changed_src[:, 6] = (src[:, 6] + 1) % 11
    # the last source token reaches every target position
    assert all(changed_positions(logits, model(changed_src, tgt)))


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_seq2seq_greedy_decode_shape_determinism_and_argmax():
    model = small_seq2seq()
    src = torch.randint(0, 11, (3, 6))
    bos, steps = 1, 5
    out = model.greedy_decode(src, bos, steps)
    torch.testing.assert_close(model.greedy_decode(src, bos, steps), out, rtol=0, atol=0)
    assert out.dtype == torch.long and out.shape[0] == 3
    # spec leaves open whether the BOS token is returned; accept both, nothing else
    assert out.shape[1] in (steps, steps + 1)
    generated = out if out.shape[1] == steps else out[:, 1:]
    if out.shape[1] == steps + 1:
        assert (out[:, 0] == bos).all()
    prefix = torch.full((3, 1), bos, dtype=torch.long)
    with torch.no_grad():
        for t in range(steps):
            expected_next = model(src, prefix)[:, -1].argmax(-1)  # (B,)
            assert torch.equal(generated[:, t], expected_next), f"step {t}"
            prefix = torch.cat([prefix, expected_next[:, None]], dim=1)
