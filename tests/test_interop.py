"""vitref.interop: a timm VisionTransformer converted with from_timm computes the same function."""
from functools import partial

import pytest
import timm.models.vision_transformer as timm_vit  # a dev dependency, pinned in requirements.txt
import torch

import vitref

CONFIGS = [
    dict(img_size=8, patch_size=4, in_chans=3, embed_dim=16, depth=2, num_heads=2, mlp_ratio=4.0, num_classes=5),
    dict(img_size=12, patch_size=3, in_chans=1, embed_dim=24, depth=1, num_heads=3, mlp_ratio=2.5, num_classes=7),
    dict(img_size=16, patch_size=8, in_chans=4, embed_dim=32, depth=3, num_heads=8, mlp_ratio=1.0, num_classes=2),
]


def random_timm(**config):
    """A randomly initialised timm ViT whose every parameter (norms, biases, tokens) is non-trivial."""
    options = dict(class_token=True, global_pool="token", qkv_bias=True)
    model = timm_vit.VisionTransformer(**{**options, **config})
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    return model.eval()


def images_for(config, batch=3):
    return torch.randn(batch, config["in_chans"], config["img_size"], config["img_size"])


@pytest.mark.parametrize("config", CONFIGS, ids=["rgb8-p4", "gray12-p3-mlp2.5", "4ch16-p8-8heads"])
def test_from_timm_same_outputs(config):
    reference = random_timm(**config)
    model = vitref.from_timm(reference)
    assert isinstance(model, vitref.ViT)
    model.eval()
    assert vitref.count_parameters(model) == sum(p.numel() for p in reference.parameters())
    images = images_for(config)
    with torch.no_grad():
        expected = reference(images)
        logits = model(images)
        logits_scratch, attentions = model(images, return_attention=True)
    assert tuple(logits.shape) == (3, config["num_classes"])
    assert expected.abs().max() > 0.1  # the comparison is not between two near-zero outputs
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits_scratch, expected, atol=1e-5, rtol=1e-5)
    assert len(attentions) == config["depth"]


def test_from_timm_features_match():
    config = CONFIGS[0]
    reference = random_timm(**config)
    model = vitref.from_timm(reference).eval()
    images = images_for(config, batch=2)
    with torch.no_grad():
        expected = reference.forward_features(images)  # timm: all tokens after the final norm, (B, N+1, D)
        tokens = torch.cat([model.cls_token.expand(2, -1, -1), model.patch_embed(images)], dim=1) + model.pos_embed
        for block in model.blocks:
            tokens = block(tokens)
        tokens = model.norm(tokens)  # (B, N+1, D)
    assert tuple(expected.shape) == (2, 5, 16)
    torch.testing.assert_close(tokens, expected, atol=1e-5, rtol=1e-5)


def test_from_timm_float64_exact():
    config = CONFIGS[1]
    reference = random_timm(**config).double()
    model = vitref.from_timm(reference).eval()
    images = images_for(config).double()
    with torch.no_grad():
        expected = reference(images)
        torch.testing.assert_close(model(images), expected, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(model(images, return_attention=True)[0], expected, atol=1e-12, rtol=1e-12)


def test_from_timm_keeps_layernorm_eps():
    # timm's default eps is 1e-6; a model built with another eps must be converted with that eps
    config = CONFIGS[0]
    reference = random_timm(**config, norm_layer=partial(torch.nn.LayerNorm, eps=0.05))
    model = vitref.from_timm(reference).eval()
    images = images_for(config)
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images), atol=1e-5, rtol=1e-5)


def test_from_timm_copies_weights():
    reference = random_timm(**CONFIGS[0])
    model = vitref.from_timm(reference).eval()
    images = images_for(CONFIGS[0])
    with torch.no_grad():
        before = model(images).clone()
        for p in reference.parameters():
            p.add_(0.5)
        after = model(images)
    torch.testing.assert_close(after, before)  # a later change to the timm model does not leak in


UNSUPPORTED = [
    (dict(global_pool="avg"), r"(?i)global_pool|avg|pool"),
    (dict(class_token=False, global_pool="avg"), r"(?i)class.?token|global_pool|avg|pool"),
    (dict(reg_tokens=2), r"(?i)reg"),
]


@pytest.mark.parametrize("features,message", UNSUPPORTED, ids=["avg-pool", "no-class-token", "reg-tokens"])
def test_from_timm_refuses_unsupported_models(features, message):
    reference = random_timm(**{**CONFIGS[0], **features})
    with pytest.raises(ValueError, match=message):
        vitref.from_timm(reference)


# Features vitref.ViT may or may not support: either the converted model computes exactly the
# same function, or from_timm refuses with a ValueError. A silently different model is a bug.
EXACT_OR_REFUSED = [
    dict(pre_norm=True),
    dict(qk_norm=True),
    dict(init_values=0.5),
    dict(fc_norm=True),
    dict(no_embed_class=True),
    dict(qkv_bias=False),
    dict(num_classes=0),
    dict(final_norm=False),
]


@pytest.mark.parametrize("features", EXACT_OR_REFUSED, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_from_timm_exact_or_refused(features):
    reference = random_timm(**{**CONFIGS[0], **features})
    try:
        model = vitref.from_timm(reference)
    except ValueError as error:
        assert str(error), "the refusal should say what is unsupported"
        return
    model.eval()
    images = images_for(CONFIGS[0])
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images), atol=1e-5, rtol=1e-5)
