"""Evaluation: loss and accuracy on a labelled set, with test-time augmentation (TTA)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import data as vdata

TTA_MODES = ("none", "flip", "flip-shift")


def shift_images(images: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """Shift a batch ``(B, C, H, W)`` by ``dy`` rows and ``dx`` columns (at most one pixel),
    repeating the edge pixels."""
    if dy == 0 and dx == 0:
        return images
    H, W = images.shape[-2:]
    padded = F.pad(images, (1, 1, 1, 1), mode="replicate")                 # (B, C, H+2, W+2)
    return padded[..., 1 - dy:1 - dy + H, 1 - dx:1 - dx + W]               # (B, C, H, W)


@torch.no_grad()
def evaluate(model, images, labels, info, batch_size=1000, tta="none", device="cpu") -> dict:
    """Cross-entropy and accuracy of ``model`` on ``images uint8 (N, C, H, W)``, ``labels (N,)``.

    ``tta`` (test-time augmentation) averages the logits over several views of each image:
    ``'flip'`` the image and its mirror image; ``'flip-shift'`` those two, each also shifted by
    one pixel up, down, left and right (10 views). Returns ``dict(loss, accuracy)`` for the
    chosen views, plus ``accuracy_plain`` (one view) and, with ``'flip-shift'``,
    ``accuracy_flip`` (two views) from the same forward passes.
    """
    tta = {True: "flip", False: "none", None: "none"}.get(tta, tta)
    if tta not in TTA_MODES:
        raise ValueError(f"unknown tta {tta!r}: expected one of {TTA_MODES}")
    was_training = model.training
    model.eval()
    total_loss, correct, correct_plain, correct_flip = 0.0, 0, 0, 0
    shifts = [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)] if tta == "flip-shift" else [(0, 0)]
    loader = vdata.BatchLoader(images, labels, batch_size, info["mean"], info["std"], device=device)
    for x, y in loader:
        logits = model(x)                                    # (B, num_classes)
        correct_plain += (logits.argmax(-1) == y).sum().item()
        if tta != "none":
            logits = logits + model(x.flip(-1))
            correct_flip += (logits.argmax(-1) == y).sum().item()
            for dy, dx in shifts[1:]:
                shifted = shift_images(x, dy, dx)
                logits = logits + model(shifted) + model(shifted.flip(-1))
            logits = logits / (2 * len(shifts))
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
    model.train(was_training)
    result = dict(loss=total_loss / len(labels), accuracy=correct / len(labels))
    if tta != "none":
        result["accuracy_plain"] = correct_plain / len(labels)
    if tta == "flip-shift":
        result["accuracy_flip"] = correct_flip / len(labels)
    return result


def forward_passes(tta: str) -> int:
    """Forward passes per test image for a ``tta`` mode (1, 2 or 10)."""
    return {"none": 1, "flip": 2, "flip-shift": 10}.get(tta, 10)


__all__ = ["TTA_MODES", "shift_images", "evaluate", "forward_passes"]
