"""vitref.attention: softmax, scaled dot-product attention, causal mask, one attention head."""
import math

import pytest
import torch
import torch.nn.functional as F

import vitref


def reference_weights(q, k, mask=None):
    """softmax(q k^T / sqrt(d_k)) with blocked entries removed, computed directly in float64."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    return torch.softmax(scores, dim=-1)


# ---------------------------------------------------------------- softmax

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_equals_torch(dim):
    x = torch.randn(4, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(vitref.softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_default_is_last_axis():
    x = torch.randn(3, 4)
    torch.testing.assert_close(vitref.softmax(x), torch.softmax(x, dim=-1))


@pytest.mark.parametrize("scale", [1000.0, 1e4])
def test_softmax_stable_on_large_logits(scale):
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0], [0.5, 0.5, -2.0]]) * scale
    out = vitref.softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    torch.testing.assert_close(out.sum(-1), torch.ones(3))


def test_softmax_stable_on_large_equal_logits():
    out = vitref.softmax(torch.full((2, 4), 1e4))
    torch.testing.assert_close(out, torch.full((2, 4), 0.25))


def test_softmax_handles_minus_inf_entries():
    x = torch.tensor([[0.0, float("-inf"), 0.0], [5.0, float("-inf"), float("-inf")]])
    torch.testing.assert_close(vitref.softmax(x), torch.tensor([[0.5, 0.0, 0.5], [1.0, 0.0, 0.0]]))


# ------------------------------------------------- scaled dot-product attention

SHAPES = [
    # (batch dims, T, S, d_k, d_v)
    ((1,), 3, 3, 4, 4),
    ((2,), 5, 7, 8, 3),
    ((2, 3), 4, 6, 5, 2),  # extra head dim: (B, heads, T, d)
    ((), 2, 9, 6, 7),  # no batch dim at all
]


@pytest.mark.parametrize("batch,T,S,d_k,d_v", SHAPES)
def test_attention_equals_torch_sdpa(batch, T, S, d_k, d_v):
    q = torch.randn(*batch, T, d_k, dtype=torch.float64)
    k = torch.randn(*batch, S, d_k, dtype=torch.float64)
    v = torch.randn(*batch, S, d_v, dtype=torch.float64)
    out, weights = vitref.scaled_dot_product_attention(q, k, v)
    assert tuple(out.shape) == (*batch, T, d_v)
    assert tuple(weights.shape) == (*batch, T, S)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights, reference_weights(q, k))
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, T, dtype=torch.float64))


@pytest.mark.parametrize("batch,T,S,d_k,d_v", SHAPES)
def test_attention_with_bool_mask_equals_torch_sdpa(batch, T, S, d_k, d_v):
    q = torch.randn(*batch, T, d_k, dtype=torch.float64)
    k = torch.randn(*batch, S, d_k, dtype=torch.float64)
    v = torch.randn(*batch, S, d_v, dtype=torch.float64)
    mask = torch.rand(T, S) > 0.4  # (T, S), broadcast over batch dims
    mask[:, 0] = True  # no fully blocked row here: older torch versions give NaN for those
    out, weights = vitref.scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights, reference_weights(q, k, mask))
    assert (weights[..., ~mask] == 0).all()


def test_attention_with_full_shape_mask():
    q = torch.randn(2, 4, 5, dtype=torch.float64)
    k = torch.randn(2, 6, 5, dtype=torch.float64)
    v = torch.randn(2, 6, 3, dtype=torch.float64)
    mask = torch.rand(2, 4, 6) > 0.5  # (B, T, S): a different mask per example
    mask[..., 2] = True
    out, weights = vitref.scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights, reference_weights(q, k, mask))


@pytest.mark.parametrize("dtype", [torch.long, torch.float32])
def test_attention_zero_one_mask_means_blocked_allowed(dtype):
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    bool_mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    expected = vitref.scaled_dot_product_attention(q, k, v, mask=bool_mask)
    got = vitref.scaled_dot_product_attention(q, k, v, mask=bool_mask.to(dtype))
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nothing
    out, weights = vitref.scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[:, 1] == 0).all()
    assert (out[:, 1] == 0).all()
    # the other rows are untouched
    expected_out, expected_weights = vitref.scaled_dot_product_attention(q[:, [0, 2]], k, v)
    torch.testing.assert_close(out[:, [0, 2]], expected_out)
    torch.testing.assert_close(weights[:, [0, 2]], expected_weights)


def test_attention_gradients_flow_without_nan_through_blocked_rows():
    q = torch.randn(1, 2, 4, requires_grad=True)
    k = torch.randn(1, 3, 4, requires_grad=True)
    v = torch.randn(1, 3, 4, requires_grad=True)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    out, _ = vitref.scaled_dot_product_attention(q, k, v, mask=mask)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


def test_attention_scales_by_sqrt_dk():
    # with equal keys except one, the weight ratio is exp(q.(k1 - k0) / sqrt(d_k))
    d_k = 16
    q = torch.ones(1, 1, d_k, dtype=torch.float64)
    k = torch.zeros(1, 2, d_k, dtype=torch.float64)
    k[0, 1] = 0.25
    v = torch.eye(2, dtype=torch.float64).unsqueeze(0)
    _, weights = vitref.scaled_dot_product_attention(q, k, v)
    ratio = weights[0, 0, 1] / weights[0, 0, 0]
    assert float(ratio) == pytest.approx(math.exp(d_k * 0.25 / math.sqrt(d_k)), rel=1e-12)


# ---------------------------------------------------------------- causal mask

@pytest.mark.parametrize("T", [1, 4, 7])
def test_causal_mask(T):
    mask = vitref.causal_mask(T)
    assert tuple(mask.shape) == (T, T)
    assert mask.dtype == torch.bool
    for t in range(T):
        for s in range(T):
            assert bool(mask[t, s]) == (s <= t)


def test_causal_mask_equals_torch_is_causal():
    q, k, v = torch.randn(3, 2, 6, 4, dtype=torch.float64).unbind(0)
    out, _ = vitref.scaled_dot_product_attention(q, k, v, mask=vitref.causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


# ---------------------------------------------------------------- one head

def test_attention_head_shapes_and_weights():
    head = vitref.AttentionHead(12, 5)
    for name in ("query", "key", "value"):
        layer = getattr(head, name)
        assert tuple(layer.weight.shape) == (5, 12), name
    x = torch.randn(3, 7, 12)
    out, weights = head(x)
    assert tuple(out.shape) == (3, 7, 5)
    assert tuple(weights.shape) == (3, 7, 7)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 7))


def test_attention_head_computes_attention_of_its_projections(float64):
    head = vitref.AttentionHead(8, 4)
    x = torch.randn(2, 5, 8)
    q, k, v = head.query(x), head.key(x), head.value(x)
    out, weights = head(x)
    expected_weights = reference_weights(q, k)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, expected_weights @ v)
    mask = vitref.causal_mask(5)
    out_masked, weights_masked = head(x, mask=mask)
    torch.testing.assert_close(weights_masked, reference_weights(q, k, mask))
    torch.testing.assert_close(out_masked, reference_weights(q, k, mask) @ v)
