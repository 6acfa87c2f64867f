"""vitref.blocks: residual, LayerNorm, feed-forward, encoder block (pre-LN and post-LN) vs torch."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import vitref


def torch_layer_from(block, emb_size, num_heads, mlp_dim, norm_first):
    """nn.TransformerEncoderLayer holding the same weights as a vitref.TransformerEncoderBlock."""
    layer = nn.TransformerEncoderLayer(
        emb_size, num_heads, mlp_dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    pairs = [
        (layer.self_attn.in_proj_weight, block.attn.qkv.weight),  # both laid out (qkv h d)
        (layer.self_attn.in_proj_bias, block.attn.qkv.bias),
        (layer.self_attn.out_proj.weight, block.attn.projection.weight),
        (layer.self_attn.out_proj.bias, block.attn.projection.bias),
        (layer.linear1.weight, block.mlp[0].weight),
        (layer.linear1.bias, block.mlp[0].bias),
        (layer.linear2.weight, block.mlp[3].weight),
        (layer.linear2.bias, block.mlp[3].bias),
        (layer.norm1.weight, block.norm1.weight),
        (layer.norm1.bias, block.norm1.bias),
        (layer.norm2.weight, block.norm2.weight),
        (layer.norm2.bias, block.norm2.bias),
    ]
    with torch.no_grad():
        for target, source in pairs:
            assert target.shape == source.shape
            target.copy_(source)
    return layer.eval()


def randomize_(module, std=0.3):
    """Give every parameter (LayerNorm affine and biases included) non-trivial random values."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)
    return module


# ---------------------------------------------------------------- LayerNorm

@pytest.mark.parametrize("dim,eps,scale", [(4, 1e-5, 1.0), (16, 1e-5, 3.0), (8, 1e-2, 0.05), (6, 0.5, 1.0)])
def test_layernorm_equals_torch(float64, dim, eps, scale):
    ours = randomize_(vitref.LayerNorm(dim, eps=eps), std=1.0)
    reference = nn.LayerNorm(dim, eps=eps)
    with torch.no_grad():
        reference.weight.copy_(ours.weight)
        reference.bias.copy_(ours.bias)
    x = (torch.randn(3, 5, dim) * scale + 2.0).requires_grad_()
    out = ours(x)
    expected = reference(x)
    torch.testing.assert_close(out, expected)
    # gradients agree too (biased variance, eps inside the square root)
    grad_out = torch.randn_like(out)
    ours_grads = torch.autograd.grad(out, (x, ours.weight, ours.bias), grad_out)
    ref_grads = torch.autograd.grad(expected, (x, reference.weight, reference.bias), grad_out)
    for got, want in zip(ours_grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_layernorm_default_init_and_eps():
    norm = vitref.LayerNorm(5)
    torch.testing.assert_close(norm.weight.detach(), torch.ones(5))
    torch.testing.assert_close(norm.bias.detach(), torch.zeros(5))
    x = torch.randn(2, 5) * 1e-3  # variance close to eps: the default eps must be 1e-5 to match
    torch.testing.assert_close(norm(x), nn.LayerNorm(5)(x))
    assert vitref.count_parameters(norm) == 10


# ---------------------------------------------------------------- residual, FFN

class _Scale(nn.Module):
    def forward(self, x, factor=1.0, offset=0.0):
        return x * factor + offset


def test_residual_add_passes_keywords():
    residual = vitref.ResidualAdd(_Scale())
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(residual(x), 2 * x)
    torch.testing.assert_close(residual(x, factor=3.0, offset=1.0), x + 3.0 * x + 1.0)


def test_residual_add_wraps_a_module_once():
    linear = nn.Linear(4, 4)
    residual = vitref.ResidualAdd(linear)
    x = torch.randn(3, 4)
    torch.testing.assert_close(residual(x), x + linear(x))
    assert vitref.count_parameters(residual) == vitref.count_parameters(linear)


def test_feed_forward_block_structure_and_output(float64):
    ffn = vitref.FeedForwardBlock(8, expansion=3, drop_p=0.5).eval()
    assert isinstance(ffn, nn.Sequential)
    assert tuple(ffn[0].weight.shape) == (24, 8)
    assert isinstance(ffn[1], nn.GELU)
    assert isinstance(ffn[2], nn.Dropout)
    assert tuple(ffn[3].weight.shape) == (8, 24)
    x = torch.randn(2, 5, 8)
    expected = F.linear(F.gelu(F.linear(x, ffn[0].weight, ffn[0].bias)), ffn[3].weight, ffn[3].bias)
    torch.testing.assert_close(ffn(x), expected)  # eval mode: no dropout


def test_feed_forward_dropout_active_in_training():
    ffn = vitref.FeedForwardBlock(8, expansion=4, drop_p=0.5).train()
    x = torch.randn(4, 6, 8)
    assert not torch.allclose(ffn(x), ffn.eval()(x))


# ---------------------------------------------------------------- encoder block vs torch

@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("emb_size,num_heads,mlp_dim,batch,tokens", [(8, 2, 16, 1, 5), (12, 3, 20, 3, 7)])
def test_encoder_block_equals_torch_layer(float64, norm_first, emb_size, num_heads, mlp_dim, batch, tokens):
    block = vitref.TransformerEncoderBlock(emb_size, num_heads, norm_first=norm_first, mlp_dim=mlp_dim)
    randomize_(block).eval()
    layer = torch_layer_from(block, emb_size, num_heads, mlp_dim, norm_first)
    x = torch.randn(batch, tokens, emb_size)
    expected = layer(x)
    out = block(x)
    assert tuple(out.shape) == (batch, tokens, emb_size)
    torch.testing.assert_close(out, expected)
    out_again, weights = block(x, return_attention=True)
    torch.testing.assert_close(out_again, expected)
    assert tuple(weights.shape) == (batch, num_heads, tokens, tokens)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch, num_heads, tokens))


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_block_with_mask_equals_torch_layer(float64, norm_first):
    block = randomize_(vitref.TransformerEncoderBlock(8, 2, norm_first=norm_first, mlp_dim=12)).eval()
    layer = torch_layer_from(block, 8, 2, 12, norm_first)
    x = torch.randn(2, 6, 8)
    mask = vitref.causal_mask(6)
    torch.testing.assert_close(block(x, mask=mask), layer(x, src_mask=~mask))  # torch: True = blocked


def test_pre_ln_block_formula(float64):
    block = randomize_(vitref.TransformerEncoderBlock(8, 4, forward_expansion=2)).eval()
    x = torch.randn(2, 5, 8)
    after_attention = x + block.attn(block.norm1(x))
    expected = after_attention + block.mlp(block.norm2(after_attention))
    torch.testing.assert_close(block(x), expected)


def test_post_ln_block_formula(float64):
    block = randomize_(vitref.TransformerEncoderBlock(8, 4, forward_expansion=2, norm_first=False)).eval()
    x = torch.randn(2, 5, 8)
    after_attention = block.norm1(x + block.attn(x))
    expected = block.norm2(after_attention + block.mlp(after_attention))
    torch.testing.assert_close(block(x), expected)


def test_encoder_block_is_permutation_equivariant(float64):
    block = randomize_(vitref.TransformerEncoderBlock(12, 3, mlp_dim=24)).eval()
    x = torch.randn(2, 6, 12)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    torch.testing.assert_close(block(x[:, perm]), block(x)[:, perm])


def test_mlp_dim_and_forward_expansion():
    assert tuple(vitref.TransformerEncoderBlock(16, 4, forward_expansion=3).mlp[0].weight.shape) == (48, 16)
    assert tuple(vitref.TransformerEncoderBlock(16, 4, forward_expansion=3, mlp_dim=40).mlp[0].weight.shape) == (40, 16)


# ---------------------------------------------------------------- parameter counts (book facts)

def test_vit_tiny_block_has_198272_parameters():
    assert vitref.count_parameters(vitref.TransformerEncoderBlock(128, 4, forward_expansion=4)) == 198_272
    assert vitref.count_parameters(vitref.TransformerEncoderBlock(128, 4, mlp_dim=512)) == 198_272


def test_torch_encoder_layer_768_counts():
    with torch.device("meta"):
        layer = nn.TransformerEncoderLayer(768, 12, 3072)
    assert vitref.count_parameters(layer) == 7_087_872
    msa = vitref.count_parameters(layer.self_attn) + vitref.count_parameters(layer.norm1)
    mlp = sum(vitref.count_parameters(m) for m in (layer.linear1, layer.linear2, layer.norm2))
    assert (msa, mlp) == (2_363_904, 4_723_968)


def test_vitref_encoder_block_768_counts_match_torch():
    with torch.device("meta"):
        block = vitref.TransformerEncoderBlock(768, 12, mlp_dim=3072)
    assert vitref.count_parameters(block) == 7_087_872
    assert vitref.count_parameters(block.norm1) + vitref.count_parameters(block.attn) == 2_363_904
    assert vitref.count_parameters(block.norm2) + vitref.count_parameters(block.mlp) == 4_723_968


def test_count_parameters_counts_trainable_only():
    linear = nn.Linear(3, 4)
    assert vitref.count_parameters(linear) == 16
    linear.bias.requires_grad_(False)
    assert vitref.count_parameters(linear) == 12
