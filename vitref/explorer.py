"""The live ViT of chapter 7 (07b): a trained :class:`~vitref.vit.ViT` exported to ONNX for the page.

The page's explorer runs the model in the reader's browser with onnxruntime-web. This module
writes what it needs and checks the export:

* :class:`ExplorerNet` -- the exported function: ``pixels (B, C, H, W)`` in [0, 1] ->
  ``(logits (B, classes), attention (B, depth, heads, N+1, N+1))``, the ViT with its input
  standardisation built in (the page feeds raw pixels) and every block's attention weights stacked;
* :func:`export_onnx` -- ``torch.onnx.export`` (the TorchScript-based exporter, opset 17);
* :func:`onnx_outputs` and :func:`export_difference` -- onnxruntime's outputs, and their largest
  difference from vitref's own on the same images;
* :func:`write_explorer_assets` -- the model file and a JSON of test images (uint8, with labels,
  the class names, PyTorch's prediction and rollout for the first image) in one folder, which the
  book's extension (``book/_ext/accessible_book.py``) copies into the site beside onnxruntime-web.

The rollout the page draws is :func:`vitref.viz.attention_rollout`, re-implemented in
``book/_ext/static/explorer/vit-explorer.js``; the JSON carries Python's rollout of the first image so
the browser test can compare the two.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .vit import ViT
from .viz import rollout_map

MODEL_FILE = "vit.onnx"
DATA_FILE = "explorer.json"
CHAR_MODEL_FILE = "charlm.onnx"      # chapter 8's character GPT (vitref.text_explorer)
CHAR_DATA_FILE = "charlm.json"
ALL_FILES = (MODEL_FILE, DATA_FILE, CHAR_MODEL_FILE, CHAR_DATA_FILE)
MAX_ASSET_BYTES = 2_000_000          # both explorers' models and data together: the pages stay light
OPSET = 17


class ExplorerNet(nn.Module):
    """``pixels (B, C, H, W)`` in [0, 1] -> ``(logits (B, classes), attention (B, depth, heads, N+1, N+1))``."""

    mean: torch.Tensor       # (1, C, 1, 1), buffers
    std: torch.Tensor

    def __init__(self, vit: ViT, mean, std):
        super().__init__()
        self.vit = vit
        channels = vit.in_channels
        if len(mean) != channels or len(std) != channels:
            raise ValueError(f"expected one mean and one std per input channel ({channels}), got {mean}, {std}")
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, pixels: torch.Tensor):
        logits, attentions = self.vit((pixels - self.mean) / self.std, return_attention=True)
        return logits, torch.stack(attentions, dim=1)             # (B, classes), (B, L, h, N+1, N+1)


def _example_pixels(vit: ViT, count: int = 1) -> torch.Tensor:
    return torch.rand(count, vit.in_channels, vit.img_size, vit.img_size)   # (B, C, H, W)


def _export(net: nn.Module, example_inputs: tuple, path, input_names: list, output_names: list,
            dynamic_axes: dict) -> Path:
    """``torch.onnx.export`` of ``net`` in eval mode (the TorchScript-based exporter, :data:`OPSET`)
    to ``path``; shared by the ViT and the character model."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer's notes on the shape checks of vitref's modules: the checks pass for the
        # example and the exported graph keeps the shapes the page feeds it
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), example_inputs, str(path), dynamo=False, opset_version=OPSET,
                          input_names=input_names, output_names=output_names, dynamic_axes=dynamic_axes)
    return path


def _run_onnx(path, feeds: dict, output_names: list) -> list:
    """onnxruntime (CPU) on ``feeds`` (input name -> numpy array): the outputs, as numpy arrays."""
    import onnxruntime   # the build's check only: the course itself runs without it

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(output_names, feeds)


def _largest_differences(got: dict, expected: dict) -> dict:
    """``{name: largest |got - expected|}`` for numpy ``got`` and torch ``expected`` of equal shapes."""
    for name, value in got.items():
        if value.shape != tuple(expected[name].shape):
            raise ValueError(f"the ONNX model's {name} has shape {value.shape}, vitref's "
                             f"{tuple(expected[name].shape)}")
    return {name: float(np.abs(value - expected[name].numpy()).max()) for name, value in got.items()}


def _remove(folder: Path, names) -> None:
    for name in names:
        (folder / name).unlink(missing_ok=True)


def _write_within_budget(folder: Path, model_file: str, data_file: str, data: dict,
                         budget_files: tuple) -> dict:
    """Write ``data`` as ``data_file`` beside the exported ``model_file``; return their sizes. When the
    files of ``budget_files`` present in ``folder`` exceed :data:`MAX_ASSET_BYTES` together, removes
    the two and raises."""
    (folder / data_file).write_text(json.dumps(data, separators=(",", ":")))
    sizes = {name: (folder / name).stat().st_size for name in (model_file, data_file)}
    total = sum((folder / name).stat().st_size for name in budget_files if (folder / name).is_file())
    if total > MAX_ASSET_BYTES:
        _remove(folder, sizes)
        raise ValueError(f"the explorers' files take {total:,} bytes ({sizes} for this one), more than "
                         f"{MAX_ASSET_BYTES:,} together")
    return sizes


def export_onnx(vit: ViT, mean, std, path) -> Path:
    """Export ``vit`` (put in eval mode) with its standardisation to ``path``; the batch size is free."""
    net = ExplorerNet(vit.eval(), mean, std)
    return _export(net, (_example_pixels(vit),), path, ["pixels"], ["logits", "attention"],
                   {"pixels": {0: "batch"}, "logits": {0: "batch"}, "attention": {0: "batch"}})


def onnx_outputs(path, pixels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime (CPU) on ``pixels (B, C, H, W)`` in [0, 1]: ``(logits, attention)`` as numpy arrays."""
    logits, attention = _run_onnx(path, {"pixels": pixels.float().numpy()}, ["logits", "attention"])
    return logits, attention


@torch.no_grad()
def export_difference(vit: ViT, mean, std, path, pixels: torch.Tensor) -> dict:
    """Largest absolute differences between onnxruntime's outputs and vitref's on ``pixels``:
    ``{'logits': float, 'attention': float}``."""
    expected_logits, expected_attention = ExplorerNet(vit.eval(), mean, std).eval()(pixels.float())
    logits, attention = onnx_outputs(path, pixels)
    return _largest_differences(dict(logits=logits, attention=attention),
                                dict(logits=expected_logits, attention=expected_attention))


@torch.no_grad()
def explorer_data(vit: ViT, mean, std, images: torch.Tensor, labels: torch.Tensor, classes) -> dict:
    """The page's JSON: ``images`` uint8 ``(B, C, H, W)`` as lists, their labels, the class names, the
    patch grid, and PyTorch's probabilities and rollout (:func:`vitref.viz.rollout_map`) of image 0."""
    if images.dtype != torch.uint8 or images.ndim != 4 or len(images) != len(labels) or not len(images):
        raise ValueError(f"expected uint8 images (B, C, H, W) and B labels, got {images.dtype} "
                         f"{tuple(images.shape)} and {len(labels)} labels")
    logits, attention = ExplorerNet(vit.eval(), mean, std).eval()(images[:1].float() / 255)
    return dict(
        classes=list(classes), grid=vit.img_size // vit.patch_size, patch=vit.patch_size,
        size=vit.img_size, channels=vit.in_channels, depth=attention.shape[1], heads=attention.shape[2],
        images=[image.flatten().tolist() for image in images], labels=[int(y) for y in labels],
        first=dict(probabilities=logits.softmax(-1)[0].tolist(), predicted=int(logits[0].argmax()),
                   rollout=rollout_map(list(attention.unbind(1)))[0].flatten().tolist()))


def write_explorer_assets(folder, vit: ViT, mean, std, images: torch.Tensor, labels: torch.Tensor,
                          classes) -> dict:
    """Write the model (:data:`MODEL_FILE`) and the data (:data:`DATA_FILE`) into ``folder``; return
    ``{file name: bytes}``. When the explorers' files exceed :data:`MAX_ASSET_BYTES`, removes these and raises."""
    folder = Path(folder)
    export_onnx(vit, mean, std, folder / MODEL_FILE)
    data = explorer_data(vit, mean, std, images, labels, classes)
    return _write_within_budget(folder, MODEL_FILE, DATA_FILE, data, ALL_FILES)


def publish(folder, vit: ViT, info: dict, images: torch.Tensor, labels: torch.Tensor,
            tolerance: float = 1e-4) -> dict:
    """Write the explorer's files (:func:`write_explorer_assets`) for a model of a dataset with
    ``info`` (``vitref.data.DATASET_INFO[name]``) and check the export on ``images``: onnxruntime's
    logits and attention weights must equal vitref's within ``tolerance``, otherwise the files are
    removed (the page then says the model cannot load) and ``ValueError`` is raised.
    Returns ``{'sizes': {file: bytes}, 'difference': {'logits': ..., 'attention': ...}}``."""
    folder = Path(folder)
    sizes = write_explorer_assets(folder, vit, info["mean"], info["std"], images, labels, info["classes"])
    difference = export_difference(vit, info["mean"], info["std"], folder / MODEL_FILE, images.float() / 255)
    return checked_or_removed(folder, sizes, difference, tolerance)


def checked_or_removed(folder: Path, sizes: dict, difference: dict, tolerance: float) -> dict:
    """``dict(sizes, difference)`` when every difference between onnxruntime and vitref is within
    ``tolerance``; otherwise the explorer's files are removed and ``ValueError`` says by how much."""
    if not max(difference.values()) <= tolerance:
        _remove(folder, sizes)
        raise ValueError(f"onnxruntime's outputs differ from vitref's by {difference}, more than {tolerance}: "
                         "the explorer's files were removed")
    return dict(sizes=sizes, difference=difference)


# The explorer's markup in the page (07b displays it): the script, served beside it, fills it in.
# `script` is the page's relative path to _static/explorer/vit-explorer.js.
EXPLORER_HTML = """
<section id="vit-explorer" class="vit-explorer" aria-label="Live ViT explorer">
  <p id="vit-explorer-status">Loading the live model (onnxruntime-web, served with this page)...</p>
  <div id="vit-explorer-panel" hidden>
    <div class="vit-explorer-controls">
      <label for="vit-explorer-choice">Image</label> <select id="vit-explorer-choice"></select>
      <button type="button" id="vit-explorer-clear">Clear, to draw your own</button>
      <button type="button" id="vit-explorer-restore">Remove the occlusions</button>
      <fieldset><legend>A click or drag on the image</legend>
        <input type="radio" name="vit-explorer-pointer" id="vit-explorer-occlude" checked>
        <label for="vit-explorer-occlude">occludes a patch</label>
        <input type="radio" name="vit-explorer-pointer" id="vit-explorer-draw">
        <label for="vit-explorer-draw">draws</label>
      </fieldset>
    </div>
    <div class="vit-explorer-row">
      <div>
        <canvas id="vit-explorer-image" width="224" height="224" tabindex="0" role="application"
          aria-label="The image, cut into patches. Arrow keys move the patch cursor; Space or Enter
            occludes the patch or brings it back. In draw mode the arrow keys move the pen one pixel
            and Space paints there, or erases where there is ink."
          aria-describedby="vit-explorer-cursor"></canvas>
        <p id="vit-explorer-cursor"></p>
      </div>
      <div>
        <p id="vit-explorer-live" aria-live="polite"></p>
        <p>Top three classes:</p>
        <ol id="vit-explorer-top"></ol>
        <p>Rollout (all blocks):</p>
        <canvas id="vit-explorer-rollout" width="96" height="96" role="img" data-name="Rollout"></canvas>
        <p id="vit-explorer-timing"></p>
      </div>
    </div>
    <div class="vit-explorer-scroll">
      <table id="vit-explorer-maps"><caption>The class token's attention to each patch, every block and
        head (each map from its smallest weight, lightest, to its largest, darkest; a line marks an
        occluded patch)</caption></table>
    </div>
  </div>
  <script src="{common}"></script>
  <script src="{script}"></script>
</section>
"""


COMMON_SCRIPT = "common.js"   # the code both explorers share, beside their scripts


def page_html(template: str, script: str) -> str:
    """``template`` with ``{script}`` and ``{common}`` (:data:`COMMON_SCRIPT`, in the same folder) filled
    in; ``script`` must be a same-site path."""
    if "://" in script or script.startswith("//"):
        raise ValueError(f"the explorer's script must come from the site itself, got {script!r}")
    common = script.rsplit("/", 1)[0] + "/" + COMMON_SCRIPT if "/" in script else COMMON_SCRIPT
    return template.replace("{common}", common).replace("{script}", script)


def explorer_html(script: str = "../_static/explorer/vit-explorer.js") -> str:
    """The explorer's HTML for the page, loading its script from ``script`` (a same-site path)."""
    return page_html(EXPLORER_HTML, script)


__all__ = ["explorer_html", "page_html", "publish", "ExplorerNet", "export_onnx", "onnx_outputs",
           "export_difference", "explorer_data", "write_explorer_assets", "MODEL_FILE", "DATA_FILE",
           "CHAR_MODEL_FILE", "CHAR_DATA_FILE", "ALL_FILES", "COMMON_SCRIPT", "MAX_ASSET_BYTES"]
