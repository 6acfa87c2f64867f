"""vitref.viz (attention maps, rollout, overlays) and vitref.pretrained (timm -> vitref, offline)."""
import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

import vitref
from vitref import data, viz


def _random_attentions(layers=3, batch=2, heads=4, tokens=17, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(batch, heads, tokens, tokens, generator=generator).softmax(-1) for _ in range(layers)]


def test_cls_maps_are_the_class_token_rows_on_the_patch_grid():
    attentions = _random_attentions()
    maps = viz.cls_attention_maps(attentions)
    assert maps.shape == (2, 3, 4, 4, 4)                              # (B, L, heads, grid, grid)
    layer, head, row, col = 2, 1, 3, 0
    assert maps[1, layer, head, row, col] == attentions[layer][1, head, 0, 1 + row * 4 + col]
    total = maps.sum(dim=(-1, -2)) + torch.stack([a[:, :, 0, 0] for a in attentions], 1)
    assert torch.allclose(total, torch.ones_like(total))


def test_rollout_matches_the_formula_and_rows_sum_to_one():
    attentions = _random_attentions(layers=3)
    rollout = viz.attention_rollout(attentions)
    assert rollout.shape == (2, 17, 17)
    assert torch.allclose(rollout.sum(-1), torch.ones(2, 17))
    eye = torch.eye(17)
    expected = torch.eye(17).expand(2, 17, 17)
    for a in attentions:                                              # (A_mean + I) / 2, bottom layer first
        expected = (0.5 * a.mean(1) + 0.5 * eye) @ expected
    assert torch.allclose(rollout, expected, atol=1e-6)
    without_residual = viz.attention_rollout(attentions, residual=False)
    assert torch.allclose(without_residual, attentions[2].mean(1) @ attentions[1].mean(1) @ attentions[0].mean(1),
                          atol=1e-6)
    cls = viz.rollout_map(attentions)
    assert cls.shape == (2, 4, 4) and torch.allclose(cls.flatten(1), rollout[:, 0, 1:])


def test_rollout_of_a_model_without_mixing_is_the_identity():
    only_self = [torch.eye(5).expand(1, 2, 5, 5)] * 4                 # every token attends only to itself
    assert torch.allclose(viz.attention_rollout(only_self)[0], torch.eye(5))


def test_bad_attention_input_is_named():
    with pytest.raises(ValueError, match=r"\(B, heads, T, T\)"):
        viz.attention_rollout([torch.rand(2, 4, 17, 16)])
    with pytest.raises(ValueError, match="square grid"):
        viz.cls_attention_maps([torch.rand(1, 2, 16, 16)])
    with pytest.raises(ValueError, match="head_fusion"):
        viz.attention_rollout(_random_attentions(), head_fusion="median")


def test_maps_of_a_vitref_model_and_overlays():
    model = vitref.ViT(28, 7, 1, 10, 32, 2, 4, 64)
    images = torch.randn(3, 1, 28, 28)
    logits, attentions = viz.attention_of(model.train(), images)
    assert model.training                                             # mode restored
    assert torch.allclose(logits, model.eval()(images), atol=1e-5)
    maps = viz.cls_attention_maps(attentions)
    assert maps.shape == (3, 2, 4, 4, 4)
    fig = viz.plot_attention_grid(images[0], maps[0], mean=(0.286,), std=(0.353,))
    assert len(fig.axes) == 8 + 1 and all(len(ax.images) == 2 for ax in fig.axes[:8])   # 2 x 4 maps, a colour bar
    ax = viz.overlay(data.sample_photo(), viz.rollout_map(attentions)[0])
    assert ax.images[0].get_array().shape == (600, 512, 3) and ax.images[1].get_array().shape == (4, 4)
    assert ax.images[1].get_extent() == [-0.5, 511.5, 599.5, -0.5]    # the 4 x 4 blocks cover the photo


def _heat(ax):
    """The attention map drawn on ``ax`` (the image is the first picture, the map the second)."""
    image, heat = ax.images
    return heat


def test_an_overlay_draws_one_flat_block_per_patch_with_a_labelled_colour_bar():
    attention_map = torch.tensor([[0.05, 0.10], [0.20, 0.40]])
    ax = viz.overlay(torch.zeros(1, 8, 8), attention_map, alpha=1.0)
    heat = _heat(ax)
    assert heat.get_interpolation() in ("nearest", "none")
    assert torch.equal(torch.as_tensor(heat.get_array().data), attention_map)       # the weights, not rescaled
    assert (heat.norm.vmin, heat.norm.vmax) == (0.0, pytest.approx(0.40))
    assert heat.colorbar is not None and heat.colorbar.ax.get_xlabel() == "attention weight"
    # drawn, each quarter of the picture is one colour: no blend between patches
    fig = ax.figure
    ax.set_position((0, 0, 1, 1))
    heat.colorbar.ax.set_visible(False)
    fig.set_size_inches(2, 2)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].reshape(-1, 3)
    colours = {tuple(p) for p in pixels}
    assert len(colours) <= 4 + 1, f"{len(colours)} colours in a 2 x 2 map: the patches are smoothed"


def test_a_map_with_nothing_to_show_gets_no_colour_bar():
    ax = viz.overlay(torch.zeros(1, 8, 8), torch.rand(2, 2), alpha=0.0)
    assert _heat(ax).colorbar is None
    ax = viz.overlay(torch.zeros(1, 8, 8), torch.rand(2, 2), colorbar=False)
    assert _heat(ax).colorbar is None
    with pytest.raises(ValueError, match=r"\(grid, grid\)"):
        viz.overlay(torch.zeros(1, 8, 8), torch.rand(2, 2, 2))


def test_the_grid_of_heads_shares_one_colour_scale_and_one_colour_bar():
    maps = torch.rand(2, 3, 4, 4) / 10
    maps[1, 2, 0, 0] = 0.9                                            # one large weight sets the common scale
    fig = viz.plot_attention_grid(torch.zeros(1, 28, 28), maps)
    heats = [_heat(ax) for ax in fig.axes if len(ax.images) == 2]
    assert len(heats) == 6 and all(h.get_interpolation() in ("nearest", "none") for h in heats)
    assert all((h.norm.vmin, h.norm.vmax) == (0.0, pytest.approx(0.9)) for h in heats)
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(bars) == 1 and bars[0].get_ylabel() == "attention weight"


@pytest.mark.slow   # ViT-Tiny at 224x224 in timm and vitref
def test_pretrained_pipeline_offline_with_random_timm_weights():
    from timm.data import create_transform  # timm is pinned in requirements.txt

    from vitref import pretrained

    torch.manual_seed(0)
    model, config, timm_model = pretrained.load_timm_vit("vit_tiny_patch16_224", pretrained=False, return_timm=True)
    assert isinstance(model, vitref.ViT) and not model.training
    photo = data.sample_photo()
    x = pretrained.preprocess(photo, config)
    assert x.shape == (1, 3, 224, 224)
    assert torch.allclose(x[0], create_transform(**config)(photo), atol=1e-6)   # timm's own preprocessing
    with torch.no_grad():
        assert torch.allclose(model(x), timm_model(x), atol=1e-4)
    categories = pretrained.imagenet_categories()
    assert len(categories) == 1000 and categories[0] == "tench"
    top = pretrained.classify(model, photo, config, top=5)
    assert len(top) == 5 and all(name in categories for name, _ in top)
    probabilities = [p for _, p in top]
    assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6
    expected_top = model(x).softmax(-1)[0].argmax().item()
    assert top[0][0] == categories[expected_top]
    seen = pretrained.attention_maps(model, photo, config)
    assert seen["cls_maps"].shape == (12, 3, 14, 14) and seen["rollout"].shape == (14, 14)
    assert torch.allclose(seen["logits"], model(x), atol=1e-4)
