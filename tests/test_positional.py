"""vitref.positional: sinusoidal table, position modules, embeddings as one-hot x W."""
import math

import pytest
import torch
import torch.nn as nn

import vitref


# The slides' table: d_model = 4, n = 100, the four tokens of "I am a robot",
# printed to two decimals. Rows are token positions k = 0..3.
SLIDES_PE_TABLE = [
    [0.00, 1.00, 0.00, 1.00],  # I
    [0.84, 0.54, 0.10, 1.00],  # am
    [0.91, -0.42, 0.20, 0.98],  # a
    [0.14, -0.99, 0.30, 0.96],  # robot
]


def test_slides_table_to_two_decimals():
    table = vitref.sinusoidal_encoding(4, 4, n=100)
    assert tuple(table.shape) == (4, 4)
    rounded = [[round(float(v), 2) for v in row] for row in table]
    assert rounded == SLIDES_PE_TABLE


def test_slides_table_exactly_matches_sin_cos():
    table = vitref.sinusoidal_encoding(4, 4, n=100)
    for k in range(4):
        for i in range(2):
            angle = k / 100 ** (2 * i / 4)
            assert float(table[k, 2 * i]) == pytest.approx(math.sin(angle), abs=1e-6)
            assert float(table[k, 2 * i + 1]) == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("seq_len,d_model,n", [(10, 8, 10000), (7, 6, 50), (60, 64, 10000)])
def test_sinusoidal_formula(seq_len, d_model, n):
    table = vitref.sinusoidal_encoding(seq_len, d_model, n=n)
    assert tuple(table.shape) == (seq_len, d_model)
    assert table.is_floating_point()
    expected = torch.empty(seq_len, d_model, dtype=torch.float64)
    for k in range(seq_len):
        for i in range(d_model // 2):
            angle = k / n ** (2 * i / d_model)
            expected[k, 2 * i] = math.sin(angle)
            expected[k, 2 * i + 1] = math.cos(angle)
    torch.testing.assert_close(table.double(), expected, atol=1e-5, rtol=0)


def test_sinusoidal_default_base_is_10000():
    torch.testing.assert_close(vitref.sinusoidal_encoding(12, 8), vitref.sinusoidal_encoding(12, 8, n=10000))
    assert not torch.allclose(vitref.sinusoidal_encoding(12, 8), vitref.sinusoidal_encoding(12, 8, n=100))


def test_learned_positional_embedding_adds_first_rows():
    pos = vitref.LearnedPositionalEmbedding(6, 8)
    assert vitref.count_parameters(pos) == 6 * 8
    x = torch.randn(3, 4, 8)
    out = pos(x)
    assert out.shape == x.shape
    offset = out - x  # (B, N, D): the same position vector for every example
    torch.testing.assert_close(offset[0], offset[1])
    torch.testing.assert_close(offset[0], offset[2])
    # a longer sequence reuses the same first rows
    longer = pos(torch.zeros(1, 6, 8))[0]
    torch.testing.assert_close(offset[0], longer[:4])
    # rows are distinct positions, not one vector repeated
    assert not torch.allclose(longer[0], longer[1])


def test_learned_positional_embedding_is_trained():
    pos = vitref.LearnedPositionalEmbedding(5, 4)
    out = pos(torch.zeros(2, 5, 4))
    out.sum().backward()
    grads = [p.grad for p in pos.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_sinusoidal_positional_encoding_module():
    module = vitref.SinusoidalPositionalEncoding(10, 6, n=100)
    assert vitref.count_parameters(module) == 0
    x = torch.randn(2, 7, 6)
    out = module(x)
    torch.testing.assert_close(out - x, vitref.sinusoidal_encoding(7, 6, n=100).expand(2, 7, 6).to(out.dtype))
    # the fixed table is a buffer (moves with .to(), not trained)
    assert any(b.shape[-2:] == (10, 6) for b in module.buffers())


def test_embedding_lookup_equals_one_hot_and_nn_embedding():
    vocab, dim = 11, 5
    weight = torch.randn(vocab, dim, dtype=torch.float64)
    token_ids = torch.tensor([[0, 3, 10], [7, 7, 1]])
    rows = vitref.embedding_lookup(token_ids, weight)
    one_hot = vitref.one_hot_embedding(token_ids, weight)
    assert tuple(rows.shape) == (2, 3, dim)
    assert tuple(one_hot.shape) == (2, 3, dim)
    # row lookup is exactly indexing
    torch.testing.assert_close(rows, weight[token_ids], rtol=0, atol=0)
    # one-hot x W picks the same rows
    torch.testing.assert_close(one_hot, rows, rtol=0, atol=1e-12)
    # and torch's own embedding layer agrees
    embedding = nn.Embedding.from_pretrained(weight)
    torch.testing.assert_close(embedding(token_ids), rows, rtol=0, atol=0)


def test_one_hot_embedding_gradient_reaches_used_rows_only():
    weight = torch.randn(6, 3, requires_grad=True)
    vitref.one_hot_embedding(torch.tensor([1, 4, 4]), weight).sum().backward()
    expected = torch.zeros(6, 3)
    expected[1] = 1
    expected[4] = 2
    torch.testing.assert_close(weight.grad, expected)
