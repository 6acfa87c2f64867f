"""vitref.explorer: the ONNX export of chapter 7's live ViT and the files the page loads.

The browser side (onnxruntime-web in Chromium, the page's rollout against vitref's) is
tests/test_book.py::test_live_vit_explorer_in_chromium.
"""
from __future__ import annotations

import json

import pytest
import torch

import vitref
from vitref import explorer
from vitref.data import DATASET_INFO
from vitref.viz import attention_of, rollout_map

INFO = DATASET_INFO["fashion-mnist"]


def tiny_vit(seed: int = 0) -> vitref.ViT:
    torch.manual_seed(seed)
    return vitref.ViT(img_size=28, patch_size=7, in_channels=1, num_classes=10, dim=32, depth=2, num_heads=2,
                      mlp_dim=64).eval()


def test_onnxruntime_outputs_equal_vitref_on_a_random_vit(tmp_path):
    vit = tiny_vit()
    path = explorer.export_onnx(vit, INFO["mean"], INFO["std"], tmp_path / "vit.onnx")
    pixels = torch.rand(3, 1, 28, 28)                       # a batch of 3: the exported batch size is free
    logits, attention = explorer.onnx_outputs(path, pixels)
    standardised = (pixels - torch.tensor(INFO["mean"]).view(1, -1, 1, 1)) / torch.tensor(INFO["std"]).view(1, -1, 1, 1)
    # vitref itself: (3, 10) and 2 x (3, 2, 17, 17)
    expected_logits, expected_attentions = attention_of(vit, standardised)
    assert logits.shape == (3, 10) and attention.shape == (3, 2, 2, 17, 17)
    assert abs(logits - expected_logits.numpy()).max() < 1e-4
    assert abs(attention - torch.stack(expected_attentions, 1).numpy()).max() < 1e-4
    difference = explorer.export_difference(vit, INFO["mean"], INFO["std"], path, pixels)
    assert set(difference) == {"logits", "attention"} and max(difference.values()) < 1e-4


def test_export_difference_sees_a_model_that_is_not_the_exported_one(tmp_path):
    path = explorer.export_onnx(tiny_vit(seed=0), INFO["mean"], INFO["std"], tmp_path / "vit.onnx")
    difference = explorer.export_difference(tiny_vit(seed=1), INFO["mean"], INFO["std"], path, torch.rand(2, 1, 28, 28))
    assert difference["logits"] > 1e-3


def test_published_files_fit_the_budget_and_carry_pytorchs_prediction(tmp_path):
    vit = tiny_vit()
    images = torch.randint(0, 256, (40, 1, 28, 28), dtype=torch.uint8)
    labels = torch.arange(40) % 10
    published = explorer.publish(tmp_path, vit, INFO, images, labels)
    sizes = published["sizes"]
    assert set(sizes) == {explorer.MODEL_FILE, explorer.DATA_FILE}
    assert sum(sizes.values()) <= explorer.MAX_ASSET_BYTES
    assert all((tmp_path / name).stat().st_size == size for name, size in sizes.items())
    data = json.loads((tmp_path / explorer.DATA_FILE).read_text())
    assert data["classes"] == list(INFO["classes"]) and data["labels"] == labels.tolist()
    assert data["images"][5] == images[5].flatten().tolist()
    assert (data["grid"], data["depth"], data["heads"]) == (4, 2, 2)
    logits, attentions = attention_of(vit, vitref.data.normalize(images[:1], INFO["mean"], INFO["std"]))
    assert data["first"]["predicted"] == logits[0].argmax().item()
    assert torch.allclose(torch.tensor(data["first"]["rollout"]), rollout_map(attentions)[0].flatten(), atol=1e-6)


def test_publish_refuses_images_that_are_not_uint8(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        explorer.publish(tmp_path, tiny_vit(), INFO, torch.rand(4, 1, 28, 28), torch.arange(4))


def test_the_page_loads_its_script_from_the_site_only():
    html = explorer.explorer_html()
    assert '<script src="../_static/explorer/vit-explorer.js">' in html and 'aria-live="polite"' in html
    assert html.index('src="../_static/explorer/common.js"') < html.index("vit-explorer.js\"")
    with pytest.raises(ValueError, match="site itself"):
        explorer.explorer_html("https://cdn.example.org/vit-explorer.js")


def test_files_over_the_budget_are_removed_and_refused(tmp_path):
    big = vitref.ViT(img_size=28, patch_size=7, in_channels=1, num_classes=10, dim=256, depth=4, num_heads=4,
                     mlp_dim=512).eval()                      # 2.1 M parameters: 8.5 MB of float32
    images = torch.zeros(2, 1, 28, 28, dtype=torch.uint8)
    with pytest.raises(ValueError, match="more than"):
        explorer.publish(tmp_path, big, INFO, images, torch.arange(2))
    assert not list(tmp_path.iterdir())
