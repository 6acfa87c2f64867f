"""vitref.intuition: Nadaraya-Watson kernel regression, average pooling, additive and dot-product scores.

Every result is compared with an independent computation: plain Python loops over the
formulas in float64 (math.exp, math.tanh), not the vectorised code under test.
"""
import math

import numpy as np
import pytest
import torch

import vitref
from vitref import intuition


def loop_nadaraya_watson(x_query, x_keys, y_values, sigma):
    """f(x) = sum_s K(x - x_s) y_s / sum_s K(x - x_s), K(u) = exp(-u^2 / (2 sigma^2)), one query at a time."""
    predictions = []
    for x in x_query:
        kernel = [math.exp(-((x - xs) ** 2) / (2 * sigma**2)) for xs in x_keys]
        predictions.append(sum(kv * ys for kv, ys in zip(kernel, y_values)) / sum(kernel))
    return predictions


# ---------------------------------------------------------------- Nadaraya-Watson


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
def test_nadaraya_watson_matches_the_formula(sigma):
    x_keys = torch.rand(20, dtype=torch.float64) * 5
    y_values = torch.sin(x_keys) + 0.1 * torch.randn(20, dtype=torch.float64)
    x_query = torch.linspace(0, 5, 7, dtype=torch.float64)
    predictions, weights = intuition.nadaraya_watson(x_query, x_keys, y_values, bandwidth=sigma)
    expected = loop_nadaraya_watson(x_query.tolist(), x_keys.tolist(), y_values.tolist(), sigma)
    assert predictions.shape == (7,) and weights.shape == (7, 20)
    np.testing.assert_allclose(predictions.numpy(), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.sum(-1).numpy(), np.ones(7), rtol=1e-12)


def test_nadaraya_watson_vector_points_and_vector_values():
    keys = torch.randn(9, 3, dtype=torch.float64)                   # (S, d)
    queries = torch.randn(4, 3, dtype=torch.float64)                # (T, d)
    values = torch.randn(9, 2, dtype=torch.float64)                 # (S, d_v)
    predictions, weights = intuition.nadaraya_watson(queries, keys, values, bandwidth=0.7)
    assert predictions.shape == (4, 2)
    for t in range(4):
        kernel = [math.exp(-sum((a - b) ** 2 for a, b in zip(queries[t].tolist(), keys[s].tolist())) / (2 * 0.49))
                  for s in range(9)]
        total = sum(kernel)
        for s in range(9):
            assert weights[t, s].item() == pytest.approx(kernel[s] / total, rel=1e-10)


def test_wide_kernel_is_average_pooling_and_narrow_kernel_is_nearest_neighbour():
    x_keys = torch.tensor([0.0, 1.0, 2.5, 4.0], dtype=torch.float64)
    y_values = torch.tensor([3.0, -1.0, 2.0, 5.0], dtype=torch.float64)
    x_query = torch.tensor([0.2, 2.3, 3.9], dtype=torch.float64)
    average, average_weights = intuition.average_pooling(x_query, y_values)
    assert average.tolist() == pytest.approx([y_values.mean().item()] * 3)
    assert torch.all(average_weights == 0.25)
    wide, _ = intuition.nadaraya_watson(x_query, x_keys, y_values, bandwidth=1e4)
    np.testing.assert_allclose(wide.numpy(), average.numpy(), atol=1e-6)
    narrow, _ = intuition.nadaraya_watson(x_query, x_keys, y_values, bandwidth=0.01)
    assert narrow.tolist() == pytest.approx([3.0, 2.0, 5.0])        # the value of the closest key


def test_gaussian_weights_are_dot_product_attention_with_a_key_bias():
    """-|q - k|^2 / 2 = q.k - |k|^2 / 2 - |q|^2 / 2, and the last term is the same for a whole row."""
    q, k = torch.randn(5, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    sigma = 1.3
    scores = (q @ k.T - 0.5 * (k * k).sum(-1)) / sigma**2            # (T, S)
    torch.testing.assert_close(intuition.gaussian_kernel_weights(q, k, sigma), torch.softmax(scores, dim=-1))


def test_far_away_query_does_not_give_nan():
    weights = intuition.gaussian_kernel_weights(torch.tensor([1e4]), torch.tensor([0.0, 1.0]), bandwidth=0.1)
    assert torch.isfinite(weights).all() and weights.sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("call, message", [
    (lambda: intuition.gaussian_kernel_weights(torch.zeros(3), torch.zeros(4), bandwidth=0.0), "bandwidth"),
    (lambda: intuition.gaussian_kernel_weights(torch.zeros(3), torch.zeros(4), bandwidth=float("nan")), "bandwidth"),
    (lambda: intuition.gaussian_kernel_weights(torch.zeros(3, 2), torch.zeros(4, 3)), "same dimension"),
    (lambda: intuition.gaussian_kernel_weights(torch.zeros(3, 2, 1), torch.zeros(4)), r"\(n,\) scalars"),
    (lambda: intuition.gaussian_kernel_weights(torch.zeros(3), torch.zeros(0)), "at least one key"),
    (lambda: intuition.nadaraya_watson(torch.zeros(3), torch.zeros(4), torch.zeros(5)), "one per key"),
    (lambda: intuition.average_pooling(torch.zeros(3), torch.zeros(0)), "S >= 1"),
])
def test_kernel_regression_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- scores


def test_dot_product_scores_and_attention_from_scores_give_vitref_attention():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 4)
    mask = torch.rand(5, 6) > 0.3
    mask[1] = False                                                 # a fully masked row
    out, weights = intuition.attention_from_scores(intuition.dot_product_scores(q, k), v, mask)
    out_ref, weights_ref = vitref.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(weights, weights_ref)
    assert torch.all(weights[..., 1, :] == 0)


def test_unscaled_dot_product_scores_by_loop():
    q, k = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    scores = intuition.dot_product_scores(q, k, scaled=False)
    for t in range(3):
        for s in range(5):
            assert scores[t, s].item() == pytest.approx(sum(a * b for a, b in zip(q[t].tolist(), k[s].tolist())))
    torch.testing.assert_close(intuition.dot_product_scores(q, k), scores / 2)   # sqrt(4) = 2


def test_additive_score_matches_the_formula_pair_by_pair(float64):
    score = intuition.AdditiveScore(query_dim=3, key_dim=5, hidden_dim=4)
    q, k = torch.randn(2, 3, 3), torch.randn(2, 6, 5)                # d_q != d_k is allowed
    scores = score(q, k)
    assert scores.shape == (2, 3, 6)
    W_q, W_k = score.W_q.weight.tolist(), score.W_k.weight.tolist()  # (h, d_q), (h, d_k)
    w_v = score.w_v.weight[0].tolist()                               # (h,)
    for b in range(2):
        for t in range(3):
            for s in range(6):
                qt, ks = q[b, t].tolist(), k[b, s].tolist()
                hidden = [math.tanh(sum(W_q[j][i] * qt[i] for i in range(3)) + sum(W_k[j][i] * ks[i] for i in range(5)))
                          for j in range(4)]
                expected = sum(w * x for w, x in zip(w_v, hidden))
                assert scores[b, t, s].item() == pytest.approx(expected, rel=1e-10, abs=1e-12)
    # bounded by sum |w_v|, however large the inputs
    huge = score(1e6 * q, 1e6 * k)
    assert huge.abs().max().item() <= sum(abs(w) for w in w_v) + 1e-12


def test_additive_attention_weights_and_outputs():
    attention = intuition.AdditiveAttention(query_dim=4, key_dim=6, hidden_dim=8)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 7)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, :, 3:] = False                                           # padding keys in example 0
    mask[1, 2] = False                                               # a fully masked query
    out, weights = attention(q, k, v, mask)
    assert out.shape == (2, 3, 7) and weights.shape == (2, 3, 5)
    scores = attention.score(q, k)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    assert torch.all(weights[0, :, 3:] == 0) and torch.all(weights[1, 2] == 0)


@pytest.mark.parametrize("call, message", [
    (lambda: intuition.dot_product_scores(torch.zeros(2, 3), torch.zeros(4, 5)), "same size d"),
    (lambda: intuition.dot_product_scores(torch.zeros(3), torch.zeros(4, 3)), r"\(\.\.\., T, d\)"),
    (lambda: intuition.AdditiveScore(3, 0, 4), "key_dim must be positive"),
    (lambda: intuition.AdditiveScore(3, 5, 4)(torch.zeros(2, 4), torch.zeros(6, 5)), r"queries \(\.\.\., T, 3\)"),
    (lambda: intuition.AdditiveScore(3, 5, 4)(torch.zeros(2, 3), torch.zeros(6, 4)), r"keys \(\.\.\., S, 5\)"),
    (lambda: intuition.AdditiveScore(3, 5, 4)(torch.zeros(2, 2, 3), torch.zeros(3, 6, 5)), "batch dimensions"),
    (lambda: intuition.attention_from_scores(torch.zeros(2, 3), torch.zeros(4, 5)), "number of keys S"),
    (lambda: intuition.attention_from_scores(torch.zeros(2, 3), torch.zeros(3, 5), mask=torch.ones(4, 3)),
     "cannot be broadcast"),
])
def test_score_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
