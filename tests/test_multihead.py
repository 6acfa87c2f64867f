"""vitref.multihead: fused and loop-of-heads multi-head attention, cross-attention, vs torch."""
import pytest
import torch
import torch.nn as nn

import vitref


def torch_mha_from(mha, emb_size, num_heads):
    """nn.MultiheadAttention holding the same weights as a vitref.MultiHeadAttention.

    vitref's qkv rows are laid out (qkv h d), which is exactly torch's in_proj layout."""
    reference = nn.MultiheadAttention(emb_size, num_heads, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(mha.qkv.weight)
        reference.in_proj_bias.copy_(mha.qkv.bias)
        reference.out_proj.weight.copy_(mha.projection.weight)
        reference.out_proj.bias.copy_(mha.projection.bias)
    return reference.eval()


@pytest.mark.parametrize("batch,tokens,emb_size,num_heads", [(1, 5, 8, 2), (3, 7, 12, 3), (2, 4, 16, 1)])
def test_mha_equals_torch_multihead_attention(float64, batch, tokens, emb_size, num_heads):
    mha = vitref.MultiHeadAttention(emb_size, num_heads).eval()
    assert tuple(mha.qkv.weight.shape) == (3 * emb_size, emb_size)
    assert tuple(mha.projection.weight.shape) == (emb_size, emb_size)
    reference = torch_mha_from(mha, emb_size, num_heads)
    x = torch.randn(batch, tokens, emb_size)
    expected_out, expected_weights = reference(x, x, x, need_weights=True, average_attn_weights=False)
    out = mha(x)
    assert tuple(out.shape) == (batch, tokens, emb_size)
    torch.testing.assert_close(out, expected_out)
    out_again, weights = mha(x, return_attention=True)
    assert tuple(weights.shape) == (batch, num_heads, tokens, tokens)
    torch.testing.assert_close(out_again, expected_out)
    torch.testing.assert_close(weights, expected_weights)


def test_mha_with_mask_equals_torch_multihead_attention(float64):
    mha = vitref.MultiHeadAttention(12, 4).eval()
    reference = torch_mha_from(mha, 12, 4)
    x = torch.randn(2, 6, 12)
    mask = torch.rand(6, 6) > 0.5  # True = may attend
    mask[:, 3] = True
    # torch's boolean attn_mask means the opposite: True = NOT allowed
    expected_out, expected_weights = reference(x, x, x, attn_mask=~mask, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(mha(x, mask=mask), expected_out)
    out, weights = mha(x, mask=mask, return_attention=True)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(weights, expected_weights)
    causal = vitref.causal_mask(6)
    expected_causal, _ = reference(x, x, x, attn_mask=~causal, need_weights=False)
    torch.testing.assert_close(mha(x, mask=causal), expected_causal)


@pytest.mark.parametrize("return_attention", [False, True])
def test_mha_fully_blocked_query_gets_zero_attention_not_nan(return_attention):
    mha = vitref.MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nothing: its attention output is 0, so only the projection bias remains
    result = mha(x, mask=mask, return_attention=return_attention)
    out = result[0] if return_attention else result
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, 1], mha.projection.bias.expand(2, 8))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_mha_fused_path_equals_weights_path_float32():
    mha = vitref.MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 9, 32)
    out, weights = mha(x, return_attention=True)
    torch.testing.assert_close(mha(x), out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))


def test_mha_parameter_count():
    # the CIFAR ViT's block: Q, K, V projections 49,536 + output projection 16,512
    mha = vitref.MultiHeadAttention(128, 4)
    assert vitref.count_parameters(mha.qkv) == 49_536
    assert vitref.count_parameters(mha.projection) == 16_512
    assert vitref.count_parameters(mha) == 49_536 + 16_512


# ------------------------------------------------------------ loop of heads

def test_loop_mha_structure():
    loop = vitref.MultiHeadAttentionLoop(12, 3)
    assert len(loop.heads) == 3
    for head in loop.heads:
        assert isinstance(head, vitref.AttentionHead)
        assert tuple(head.query.weight.shape) == (4, 12)
    assert tuple(loop.projection.weight.shape) == (12, 12)


def test_loop_mha_concatenates_heads_then_projects(float64):
    loop = vitref.MultiHeadAttentionLoop(12, 3).eval()
    x = torch.randn(2, 5, 12)
    head_outputs = [head(x)[0] for head in loop.heads]  # each (B, N, E/h)
    expected = loop.projection(torch.cat(head_outputs, dim=-1))
    torch.testing.assert_close(loop(x), expected)
    out, weights = loop(x, return_attention=True)
    torch.testing.assert_close(out, expected)
    assert tuple(weights.shape) == (2, 3, 5, 5)
    torch.testing.assert_close(weights, torch.stack([head(x)[1] for head in loop.heads], dim=1))


@pytest.mark.parametrize("emb_size,num_heads", [(12, 3), (8, 8), (16, 2)])
def test_fused_from_loop_same_function(float64, emb_size, num_heads):
    loop = vitref.MultiHeadAttentionLoop(emb_size, num_heads).eval()
    fused = vitref.fused_from_loop(loop).eval()
    assert isinstance(fused, vitref.MultiHeadAttention)
    x = torch.randn(3, 6, emb_size)
    torch.testing.assert_close(fused(x), loop(x))
    mask = vitref.causal_mask(6)
    torch.testing.assert_close(fused(x, mask=mask), loop(x, mask=mask))
    fused_out, fused_weights = fused(x, return_attention=True)
    loop_out, loop_weights = loop(x, return_attention=True)
    torch.testing.assert_close(fused_weights, loop_weights)
    # the fused qkv rows are laid out (qkv h d): the query rows of head i come first within q
    head_dim = emb_size // num_heads
    rows = fused.qkv.weight.view(3, num_heads, head_dim, emb_size)
    for i, head in enumerate(loop.heads):
        torch.testing.assert_close(rows[0, i], head.query.weight)
        torch.testing.assert_close(rows[1, i], head.key.weight)
        torch.testing.assert_close(rows[2, i], head.value.weight)


@pytest.mark.parametrize("batch", [2, 3])
def test_fused_and_loop_agree_on_per_example_masks(float64, batch):
    # A (B, N, N) mask: one mask per example. The loop hands it to every head, where it
    # broadcasts against (B, N, N) scores. The fused module must either do the same or refuse
    # it with a ValueError; with B == num_heads it must not silently read it as one mask per head.
    loop = vitref.MultiHeadAttentionLoop(8, 2).eval()
    fused = vitref.fused_from_loop(loop).eval()
    x = torch.randn(batch, 4, 8)
    per_example = torch.stack([vitref.causal_mask(4) if b % 2 == 0 else torch.ones(4, 4, dtype=torch.bool)
                               for b in range(batch)])  # (B, N, N)
    expected = loop(x, mask=per_example)
    torch.testing.assert_close(expected[0], loop(x[:1], mask=vitref.causal_mask(4))[0])  # the loop's reading
    try:
        out = fused(x, mask=per_example)
    except ValueError:
        return
    torch.testing.assert_close(out, expected)


def test_fused_from_loop_copies_not_shares():
    loop = vitref.MultiHeadAttentionLoop(8, 2)
    fused = vitref.fused_from_loop(loop)
    x = torch.randn(1, 3, 8)
    before = fused(x).detach().clone()
    with torch.no_grad():
        for p in loop.parameters():
            p.add_(1.0)
    torch.testing.assert_close(fused(x), before)


# ------------------------------------------------------------ cross-attention

@pytest.mark.parametrize("context_dim", [None, 6])
def test_cross_attention_equals_torch(float64, context_dim):
    emb_size, num_heads, T, S = 8, 2, 3, 5
    cross = vitref.CrossAttention(emb_size, num_heads, context_dim=context_dim).eval()
    ctx_dim = emb_size if context_dim is None else context_dim
    assert tuple(cross.query.weight.shape) == (emb_size, emb_size)
    assert tuple(cross.key_value.weight.shape) == (2 * emb_size, ctx_dim)
    reference = nn.MultiheadAttention(emb_size, num_heads, kdim=ctx_dim, vdim=ctx_dim, batch_first=True).eval()
    with torch.no_grad():
        keys, values = cross.key_value.weight[:emb_size], cross.key_value.weight[emb_size:]  # (kv h d) rows
        if reference._qkv_same_embed_dim:
            reference.in_proj_weight.copy_(torch.cat([cross.query.weight, keys, values]))
        else:
            reference.q_proj_weight.copy_(cross.query.weight)
            reference.k_proj_weight.copy_(keys)
            reference.v_proj_weight.copy_(values)
        reference.in_proj_bias.copy_(torch.cat([cross.query.bias, cross.key_value.bias]))
        reference.out_proj.weight.copy_(cross.projection.weight)
        reference.out_proj.bias.copy_(cross.projection.bias)
    x = torch.randn(2, T, emb_size)
    context = torch.randn(2, S, ctx_dim)
    expected_out, expected_weights = reference(x, context, context, need_weights=True, average_attn_weights=False)
    out = cross(x, context)
    assert tuple(out.shape) == (2, T, emb_size)
    torch.testing.assert_close(out, expected_out)
    out_again, weights = cross(x, context, return_attention=True)
    assert tuple(weights.shape) == (2, num_heads, T, S)
    torch.testing.assert_close(out_again, expected_out)
    torch.testing.assert_close(weights, expected_weights)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)  # (T, S)
    expected_masked, _ = reference(x, context, context, attn_mask=~mask, need_weights=False)
    torch.testing.assert_close(cross(x, context, mask=mask), expected_masked)


# ------------------------------------------------------------ permutation equivariance

def test_self_attention_is_permutation_equivariant(float64):
    mha = vitref.MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7)
    assert not torch.equal(perm, torch.arange(7))
    torch.testing.assert_close(mha(x[:, perm]), mha(x)[:, perm])
    loop = vitref.MultiHeadAttentionLoop(16, 4).eval()
    torch.testing.assert_close(loop(x[:, perm]), loop(x)[:, perm])


def test_positions_break_permutation_equivariance(float64):
    mha = vitref.MultiHeadAttention(16, 4).eval()
    positions = vitref.SinusoidalPositionalEncoding(7, 16)
    x = torch.randn(2, 7, 16)
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6])
    assert not torch.allclose(mha(positions(x[:, perm])), mha(positions(x))[:, perm])


@pytest.mark.parametrize("tokens", [5, 17, 130])     # below and above EXPLICIT_MAX_KEYS: both CPU paths
@pytest.mark.parametrize("masked", [False, True])
def test_fast_paths_equal_from_scratch_attention_with_gradients(float64, tokens, masked):
    from vitref.multihead import EXPLICIT_MAX_KEYS

    assert 17 <= EXPLICIT_MAX_KEYS < 130
    mha = vitref.MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, tokens, 16, requires_grad=True)
    mask = None
    if masked:
        mask = torch.rand(3, tokens, tokens) > 0.3                     # per-example masks
        mask[0, 2] = False                                             # a query with nothing to attend to
    fast = mha(x, mask=mask)                                           # no weights requested: the fast path
    (grad_fast,) = torch.autograd.grad(fast.square().sum(), x)
    reference, _ = mha(x, mask=mask, return_attention=True)           # the from-scratch attention
    (grad_reference,) = torch.autograd.grad(reference.square().sum(), x)
    torch.testing.assert_close(fast, reference)
    torch.testing.assert_close(grad_fast, grad_reference)
    assert torch.isfinite(grad_fast).all()
