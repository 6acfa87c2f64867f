"""vitref.vit: the Vision Transformer, its attention maps, presets and parameter counts."""
import pytest
import torch
import torch.nn.functional as F

import vitref

SMALL = dict(img_size=8, patch_size=4, in_channels=3, num_classes=5, dim=16, depth=2, num_heads=2, mlp_dim=24)


def randomize_(model, std=0.2):
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model


def small_vit(**overrides):
    return randomize_(vitref.ViT(**{**SMALL, **overrides})).eval()


@pytest.mark.parametrize("batch", [1, 3])
def test_vit_output_shapes(batch):
    model = small_vit()
    logits = model(torch.randn(batch, 3, 8, 8))
    assert tuple(logits.shape) == (batch, 5)


@pytest.mark.parametrize("overrides", [{}, dict(img_size=12, patch_size=3, in_channels=1, num_heads=4, depth=3)])
def test_vit_attention_maps(overrides):
    model = small_vit(**overrides)
    config = {**SMALL, **overrides}
    num_tokens = (config["img_size"] // config["patch_size"]) ** 2 + 1
    images = torch.randn(2, config["in_channels"], config["img_size"], config["img_size"])
    logits, attentions = model(images, return_attention=True)
    assert tuple(logits.shape) == (2, config["num_classes"])
    assert len(attentions) == config["depth"]
    for weights in attentions:
        assert tuple(weights.shape) == (2, config["num_heads"], num_tokens, num_tokens)
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, config["num_heads"], num_tokens))
    # the fused path (no weights) and the from-scratch path give the same logits
    torch.testing.assert_close(model(images), logits, atol=1e-5, rtol=1e-5)


def test_vit_return_attention_same_logits_float64(float64):
    model = small_vit()
    images = torch.randn(4, 3, 8, 8)
    logits, _ = model(images, return_attention=True)
    torch.testing.assert_close(model(images), logits, atol=1e-12, rtol=1e-12)


def test_vit_is_pre_ln_with_cls_token_learned_positions_final_norm_and_head(float64):
    model = small_vit()
    images = torch.randn(2, 3, 8, 8)
    assert isinstance(model.patch_embed.proj, torch.nn.Conv2d)
    assert tuple(model.cls_token.shape) == (1, 1, 16)
    assert tuple(model.pos_embed.shape) == (1, 5, 16)
    tokens = model.patch_embed.proj(images).flatten(2).transpose(1, 2)  # (B, N, D)
    x = torch.cat([model.cls_token.expand(2, -1, -1), tokens], dim=1) + model.pos_embed  # (B, N+1, D)
    expected_maps = []
    for block in model.blocks:
        assert isinstance(block, vitref.TransformerEncoderBlock)
        attended, weights = block.attn(block.norm1(x), return_attention=True)
        expected_maps.append(weights)
        x = x + attended
        x = x + block.mlp(block.norm2(x))
    expected = model.head(model.norm(x)[:, 0])  # classify from the class token
    logits, maps = model(images, return_attention=True)
    torch.testing.assert_close(model(images), expected)
    torch.testing.assert_close(logits, expected)
    for got, want in zip(maps, expected_maps):
        torch.testing.assert_close(got, want)


def test_vit_examples_are_independent():
    model = small_vit()
    images = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(model(images[1:2]), model(images)[1:2], atol=1e-6, rtol=1e-5)


def test_vit_every_parameter_learns():
    model = vitref.ViT(**SMALL)
    loss = F.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ---------------------------------------------------------------- presets and counts (book facts)

def test_vit_tiny_cifar10_parameter_count_and_forward():
    model = vitref.vit_tiny_cifar10()
    assert vitref.count_parameters(model) == 1_205_898
    assert len(model.blocks) == 6
    for block in model.blocks:
        assert vitref.count_parameters(block) == 198_272
    # the seed's breakdown
    assert vitref.count_parameters(model.patch_embed) == 6_272
    assert model.cls_token.numel() == 128
    assert model.pos_embed.numel() == 8_320
    assert vitref.count_parameters(model.head) == 1_290
    model.eval()
    logits, attentions = model(torch.randn(2, 3, 32, 32), return_attention=True)
    assert tuple(logits.shape) == (2, 10)
    assert tuple(attentions[0].shape) == (2, 4, 65, 65)


def test_vit_b16_three_classes_parameter_count():
    with torch.device("meta"):
        model = vitref.vit_b16(num_classes=3)
    assert vitref.count_parameters(model) == 85_800_963
    assert tuple(model.pos_embed.shape) == (1, 197, 768)
    assert len(model.blocks) == 12


def test_vit_b16_default_is_imagenet_head():
    with torch.device("meta"):
        model = vitref.vit_b16()
    assert model.head.out_features == 1000
    assert vitref.count_parameters(model) == 86_567_656  # timm's vit_base_patch16_224 has the same count


def test_vit_mean_pooling_feeds_the_head_the_average_patch_token(float64):
    model = vitref.ViT(img_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, num_heads=2,
                       mlp_dim=16, pool="mean").eval()
    images = torch.randn(2, 1, 8, 8)
    features = model.forward_features(images)                        # (2, 5, 8): class token + 4 patches
    torch.testing.assert_close(model(images), model.head(features[:, 1:].mean(dim=1)))
    logits, attentions = model(images, return_attention=True)
    torch.testing.assert_close(logits, model(images))
    assert model.config["pool"] == "mean"
    cls_model = vitref.ViT(img_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, num_heads=2,
                           mlp_dim=16).eval()
    cls_model.load_state_dict(model.state_dict())
    torch.testing.assert_close(cls_model(images), model.head(features[:, 0]))
    with pytest.raises(ValueError, match="pool must be 'cls'.*'mean'.*got 'max'"):
        vitref.ViT(img_size=8, patch_size=4, pool="max")


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_graded_modules_are_what_import_vitref_loads_except_interop():
    # The autograder hashes vitref.graded_modules() into its grader version: the list must hold
    # every module that `import vitref` loads (the checks call those), and no training code.
    import subprocess
    import sys

    code = ("import sys, vitref; "
            "print(' '.join(sorted(m for m in sys.modules if m == 'vitref' or m.startswith('vitref.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    names = {"__init__" if m == "vitref" else m.split(".", 1)[1] for m in loaded}
    assert names - {"interop"} == set(vitref.GRADED_MODULES)
    files = vitref.graded_modules()
    assert [f.stem for f in files] == list(vitref.GRADED_MODULES) and all(f.is_file() for f in files)
    assert all(f.parent.name == "vitref" for f in files)             # nothing under vitref/training/
    assert not {"train", "teacher", "data", "viz", "pretrained", "training"} & set(vitref.GRADED_MODULES)


def test_asking_for_the_attention_maps_does_not_change_the_logits_on_a_cpu():
    # On a CPU, for short sequences, the blocks compute attention step by step with or without
    # return_attention: the logits are bitwise the same, the maps are softmax rows.
    model = vitref.ViT(28, 7, 1, 10, 32, 2, 4, 64).eval()
    x = torch.randn(5, 1, 28, 28)
    logits, attentions = model(x, return_attention=True)
    assert torch.equal(logits, model(x))
    assert [tuple(a.shape) for a in attentions] == [(5, 4, 17, 17)] * 2
    torch.testing.assert_close(attentions[0].sum(-1), torch.ones(5, 4, 17))


def test_patch_dropout_keeps_the_class_token_and_a_random_share_of_patches_in_training_only():
    torch.manual_seed(0)
    model = vitref.ViT(28, 7, 1, 10, 16, 1, 2, 32, patch_dropout=0.25)
    images = torch.randn(4, 1, 28, 28)
    full = model.eval().embed(images)                                     # (4, 17, 16)
    torch.manual_seed(1)
    kept = model.train().embed(images)                                    # (4, 13, 16): 12 of 16 patches
    assert full.shape == (4, 17, 16) and kept.shape == (4, 13, 16)
    assert torch.equal(kept[:, 0], full[:, 0])                            # the class token stays first
    for image in range(4):                                                # each kept token is one of its own,
        rows = [int((full[image] == token).all(-1).nonzero()) for token in kept[image, 1:]]
        assert len(set(rows)) == 12 and 0 not in rows                     # positions included, none twice
    torch.manual_seed(1)
    assert torch.equal(model.embed(images), kept)                         # seeded: the same draw
    assert model(images).shape == (4, 10)
    with pytest.raises(ValueError, match=r"patch_dropout .* in \[0, 1\), got 1.0"):
        vitref.ViT(28, 7, 1, 10, 16, 1, 2, 32, patch_dropout=1.0)
