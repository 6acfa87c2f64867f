"""vitref.patches: cutting images into patches and embedding them (Rearrange+Linear, Conv2d, per channel)."""
import pytest
import torch
import torch.nn as nn
from einops import rearrange

import vitref


def manual_patch(images, b, row, col, patch_size):
    """Patch (row, col) of image b, flattened in the slides' (s1 s2 c) order: pixels row by row, channels last."""
    block = images[b, :, row * patch_size:(row + 1) * patch_size, col * patch_size:(col + 1) * patch_size]  # (C, P, P)
    return block.permute(1, 2, 0).reshape(-1)  # (P*P*C,)


@pytest.mark.parametrize("batch,channels,height,width,patch_size", [(2, 3, 8, 8, 4), (1, 1, 6, 6, 2), (2, 3, 8, 12, 4)])
def test_image_to_patches_order(batch, channels, height, width, patch_size):
    images = torch.arange(batch * channels * height * width, dtype=torch.float32)
    images = images.reshape(batch, channels, height, width)
    patches = vitref.image_to_patches(images, patch_size)
    grid_w = width // patch_size
    num_patches = (height // patch_size) * grid_w
    assert tuple(patches.shape) == (batch, num_patches, patch_size * patch_size * channels)
    # patches go row by row over the grid
    for b in range(batch):
        for n in range(num_patches):
            row, col = divmod(n, grid_w)
            torch.testing.assert_close(patches[b, n], manual_patch(images, b, row, col, patch_size), rtol=0, atol=0)
    expected = rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)
    torch.testing.assert_close(patches, expected, rtol=0, atol=0)


def test_patches_to_image_inverts_image_to_patches():
    images = torch.randn(2, 3, 8, 12)
    patches = vitref.image_to_patches(images, 4)
    torch.testing.assert_close(vitref.patches_to_image(patches, 4, (2, 3), 3), images, rtol=0, atol=0)


def test_image_to_patches_explicit_values():
    # a 2-channel 4x4 image, patch 2: patch 1 is the top-right block; entries alternate channel 0, channel 1
    image = torch.stack([torch.arange(16.0).reshape(4, 4), 100 + torch.arange(16.0).reshape(4, 4)]).unsqueeze(0)
    patches = vitref.image_to_patches(image, 2)
    assert tuple(patches.shape) == (1, 4, 8)
    torch.testing.assert_close(patches[0, 1], torch.tensor([2.0, 102, 3, 103, 6, 106, 7, 107]))


def test_224_by_16_gives_196_patches_of_768():
    patches = vitref.image_to_patches(torch.zeros(1, 3, 224, 224), 16)
    assert tuple(patches.shape) == (1, 196, 768)
    with torch.device("meta"):
        embed = vitref.PatchEmbedding(3, 16, 768, 224)
        tokens = embed(torch.empty(2, 3, 224, 224))
    assert tuple(tokens.shape) == (2, 197, 768)


def test_32_by_4_gives_65_tokens_of_128_with_cls():
    embed = vitref.PatchEmbedding(in_channels=3, patch_size=4, emb_size=128, img_size=32)
    assert tuple(embed(torch.randn(2, 3, 32, 32)).shape) == (2, 65, 128)


# ---------------------------------------------------------------- Conv2d == Rearrange + Linear

@pytest.mark.parametrize("channels,patch_size,emb_size,size", [(3, 4, 16, 8), (1, 2, 5, 6), (3, 16, 12, 32)])
def test_conv_patch_embedding_equals_linear(float64, channels, patch_size, emb_size, size):
    conv_embed = vitref.ConvPatchEmbedding(channels, patch_size, emb_size)
    assert isinstance(conv_embed.proj, nn.Conv2d)
    assert conv_embed.proj.kernel_size == (patch_size, patch_size)
    assert conv_embed.proj.stride == (patch_size, patch_size)
    images = torch.randn(2, channels, size, size)
    out = conv_embed(images)
    num_patches = (size // patch_size) ** 2
    assert tuple(out.shape) == (2, num_patches, emb_size)
    # the conv output flattened row by row over the grid
    torch.testing.assert_close(out, conv_embed.proj(images).flatten(2).transpose(1, 2))
    linear_embed = vitref.linear_from_conv(conv_embed)
    assert isinstance(linear_embed, vitref.LinearPatchEmbedding)
    torch.testing.assert_close(linear_embed(images), out)
    # ... which is a plain linear map of the slides' patch vectors
    patches = vitref.image_to_patches(images, patch_size)  # (B, N, P*P*C)
    weight = rearrange(conv_embed.proj.weight, "e c s1 s2 -> e (s1 s2 c)")
    torch.testing.assert_close(out, patches @ weight.T + conv_embed.proj.bias)


def test_linear_patch_embedding_shape():
    embed = vitref.LinearPatchEmbedding(3, 4, 20)
    assert tuple(embed(torch.randn(2, 3, 12, 8)).shape) == (2, 6, 20)
    assert vitref.count_parameters(embed) == 4 * 4 * 3 * 20 + 20


def test_channelwise_patch_embedding_sums_channel_projections(float64):
    embed = vitref.ChannelwisePatchEmbedding(3, 2, 5)
    images = torch.randn(2, 3, 4, 6)
    out = embed(images)
    assert tuple(out.shape) == (2, 6, 5)
    zero = embed(torch.zeros_like(images))  # the summed biases, same for every patch
    torch.testing.assert_close(zero, zero[:1, :1].expand_as(zero))
    # affine in the image, with each channel contributing separately
    per_channel = []
    for c in range(3):
        only_c = torch.zeros_like(images)
        only_c[:, c] = images[:, c]
        per_channel.append(embed(only_c) - zero)
    torch.testing.assert_close(out - zero, sum(per_channel))
    # a pixel only moves its own patch's token
    moved = images.clone()
    moved[0, 1, 0, 3] += 1.0  # row 0, column 3: patch (0, 1)
    changed = (embed(moved) - out).abs().sum(-1)[0] > 0  # (N,)
    assert changed.tolist() == [False, True, False, False, False, False]
    # the channels do not share one projection
    swapped = images[:, [1, 0, 2]]
    assert not torch.allclose(embed(swapped), out)


# ---------------------------------------------------------------- the slides' PatchEmbedding (Q2-Q4)

def test_patch_embedding_without_positions(float64):
    embed = vitref.PatchEmbedding(in_channels=2, patch_size=2, emb_size=6, img_size=4, positions=None)
    assert isinstance(embed.projection, nn.Sequential)
    assert tuple(embed.cls_token.shape) == (1, 1, 6)
    images = torch.randn(3, 2, 4, 4)
    tokens = embed(images)
    assert tuple(tokens.shape) == (3, 5, 6)
    for b in range(3):
        torch.testing.assert_close(tokens[b, 0], embed.cls_token[0, 0])  # class token first, for every image
    torch.testing.assert_close(tokens[:, 1:], embed.projection(images))
    linear = embed.projection[-1]
    torch.testing.assert_close(tokens[:, 1:], vitref.image_to_patches(images, 2) @ linear.weight.T + linear.bias)


def test_patch_embedding_learned_positions(float64):
    embed = vitref.PatchEmbedding(in_channels=1, patch_size=2, emb_size=4, img_size=4, positions="learned")
    assert isinstance(embed.positions, nn.Parameter)
    assert tuple(embed.positions.shape)[-2:] == (5, 4)
    images = torch.randn(2, 1, 4, 4)
    without = torch.cat([embed.cls_token.expand(2, -1, -1), embed.projection(images)], dim=1)
    torch.testing.assert_close(embed(images), without + embed.positions.reshape(5, 4))


def test_patch_embedding_sinusoidal_positions(float64):
    embed = vitref.PatchEmbedding(in_channels=3, patch_size=2, emb_size=8, img_size=6, positions="sinusoidal")
    assert not any(p is embed.positions for p in embed.parameters())  # fixed, not trained
    images = torch.randn(2, 3, 6, 6)
    without = torch.cat([embed.cls_token.expand(2, -1, -1), embed.projection(images)], dim=1)  # (B, N+1, E)
    expected = without + vitref.sinusoidal_encoding(10, 8).to(torch.float64)
    torch.testing.assert_close(embed(images), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("positions", [None, "learned"])
def test_patch_embedding_without_class_token(positions):
    embed = vitref.PatchEmbedding(in_channels=3, patch_size=4, emb_size=16, img_size=8, positions=positions,
                                  cls_token=False)
    images = torch.randn(2, 3, 8, 8)
    tokens = embed(images)
    assert tuple(tokens.shape) == (2, 4, 16)
    if positions is None:
        torch.testing.assert_close(tokens, embed.projection(images))
