"""vitref.presets: the STL-10 and CIFAR-10 presets, the parameter formula and the MLP-width solver."""
import pytest

import vitref
from vitref.presets import NAMES, mlp_dim_for, preset, vit_parameter_count
from vitref.train import PRESETS


@pytest.mark.parametrize("shape", [
    dict(img_size=28, patch_size=7, in_channels=1, num_classes=10, dim=64, depth=4, num_heads=4, mlp_dim=128),
    dict(img_size=32, patch_size=4, in_channels=3, num_classes=10, dim=128, depth=6, num_heads=4, mlp_dim=512),
    dict(img_size=96, patch_size=8, in_channels=3, num_classes=10, dim=256, depth=6, num_heads=8, mlp_dim=777),
])
def test_parameter_formula_counts_the_built_model(shape):
    assert vit_parameter_count(**shape) == vitref.count_parameters(vitref.ViT(**shape))


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_known_counts():
    assert vit_parameter_count(**dict(preset("cifar10-gpu").model)) == 1_205_898
    b16 = dict(img_size=224, patch_size=16, in_channels=3, num_classes=3, dim=768, depth=12, num_heads=12, mlp_dim=3072)
    assert vit_parameter_count(**b16) == 85_800_963
    assert vit_parameter_count(**{**b16, "num_classes": 10}) == vitref.count_parameters(vitref.vit_b16(num_classes=10))


def test_stl10_preset_is_the_source_configuration():
    p = preset("stl10-article")
    m = p.model
    assert (m["img_size"], m["patch_size"], m["dim"], m["num_heads"], m["depth"]) == (96, 8, 256, 8, 6)
    assert p.recipe["lr"] == 3e-4 and p.recipe["epochs"] == 50 and p.recipe["optimizer"] == "AdamW"
    assert p.reported["test_accuracy"] == 0.5951
    assert abs(p.num_parameters - 4.2e6) < 0.05e6                       # "~4.2M"
    assert m["mlp_dim"] % 32 == 0
    model = p.build()
    assert vitref.count_parameters(model) == p.num_parameters
    assert model.num_patches == 144


def test_mlp_width_solver():
    shape = dict(img_size=96, patch_size=8, in_channels=3, num_classes=10, dim=256, depth=6, num_heads=8)
    width = mlp_dim_for(4.2e6, **shape)
    assert 800 < width < 840                                            # none of 2x, 3x, 4x D
    assert vit_parameter_count(mlp_dim=round(width), **shape) == pytest.approx(4.2e6, abs=6 * 513)
    exact = vit_parameter_count(mlp_dim=1024, **shape)
    assert mlp_dim_for(exact, **shape) == 1024
    with pytest.raises(ValueError, match="solved for"):
        mlp_dim_for(1e6, mlp_dim=3, **shape)


def test_cifar10_preset_follows_train_presets_and_claims_nothing():
    p = preset("cifar10-gpu")
    source = PRESETS["cifar10-gpu"]
    assert p.model["dim"] == source["dim"] and p.model["mlp_dim"] == source["mlp_dim"]
    assert p.recipe["epochs"] == source["epochs"] and p.dataset == "cifar10"
    assert p.reported == {} and "nothing" in p.measured


def test_errors():
    with pytest.raises(ValueError, match="unknown preset"):
        preset("imagenet")
    with pytest.raises(ValueError, match="unknown ViT arguments"):
        preset("cifar10-gpu").build(width=3)
    with pytest.raises(ValueError, match="not divisible"):
        vit_parameter_count(img_size=30, patch_size=7, in_channels=1, num_classes=10, dim=64, depth=1,
                            num_heads=4, mlp_dim=8)
    assert set(NAMES) == {"stl10-article", "cifar10-gpu"}
