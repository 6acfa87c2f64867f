"""Datasets of the course, offline first.

* **Fashion-MNIST** (28 x 28 grey images, 10 classes, 60,000 train / 10,000 test) is parsed by
  torchvision's own :class:`~torchvision.datasets.FashionMNIST`. The files are looked for in
  ``$VITREF_DATA``, then in ``/usr/share/datasets/fashion-mnist`` (Debian's
  ``dataset-fashion-mnist`` package: the four ``.gz`` files directly in that folder), then in
  the user cache ``~/.cache/vitref/fashion-mnist``; only if all of these miss does torchvision download them
  (which needs internet). Compressed files found on the machine are decompressed into the cache
  in torchvision's layout (``<root>/FashionMNIST/raw/<name>``); nothing is written next to them.
* **CIFAR-10** (32 x 32 colour images) is downloaded by torchvision (online, e.g. Colab);
  offline it fails with a message that points to Fashion-MNIST.
* :func:`sample_photo` is a real photo shipped with matplotlib (Grace Hopper).

Training does not go through per-sample PIL transforms (far too slow on a laptop CPU): the
whole dataset is held as one ``uint8`` tensor (:func:`as_tensors`), and :class:`BatchLoader`
normalises and augments whole batches in torch (:func:`augment_batch`).
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

import torch

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# Per-channel mean and standard deviation of the training images (pixels scaled to [0, 1]).
FASHION_MNIST_MEAN, FASHION_MNIST_STD = (0.2860,), (0.3530,)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def cache_dir() -> Path:
    """Where vitref keeps decompressed or downloaded data: ``$XDG_CACHE_HOME/vitref`` or ``~/.cache/vitref``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vitref"


def _has_raw_files(root: Path) -> bool:
    """True if ``root`` is a torchvision root: ``root/FashionMNIST/raw/<name>`` for all four files."""
    raw = root / "FashionMNIST" / "raw"
    return all((raw / name).is_file() for name in FASHION_MNIST_FILES)


def _find_gz(folder: Path) -> dict[str, Path] | None:
    """The four ``<name>.gz`` files in ``folder`` (Debian layout) or ``folder/FashionMNIST/raw``."""
    for where in (folder, folder / "FashionMNIST" / "raw"):
        found = {name: where / f"{name}.gz" for name in FASHION_MNIST_FILES}
        if all(path.is_file() for path in found.values()):
            return found
    return None


def _stage(gz_files: dict[str, Path], root: Path) -> Path:
    """Decompress ``gz_files`` into ``root/FashionMNIST/raw`` (atomically per file) and return ``root``."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, source in gz_files.items():
        target = raw / name
        if target.is_file():
            continue
        handle, tmp = tempfile.mkstemp(dir=raw, prefix=f".{name}.")
        try:
            with gzip.open(source, "rb") as src, os.fdopen(handle, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, target)  # concurrent processes never see a half-written file
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return root


def _fashion_mnist_root(root: str | os.PathLike | None) -> tuple[Path, list[str]]:
    """A torchvision root holding Fashion-MNIST, and the list of places searched."""
    if root is not None:
        candidates = [Path(root)]
    else:
        candidates = [Path(p) for p in [os.environ.get("VITREF_DATA")] if p]
        candidates += [DEBIAN_FASHION_MNIST, cache_dir() / "fashion-mnist"]
    for folder in candidates:
        if _has_raw_files(folder):
            return folder, [str(c) for c in candidates]
        gz_files = _find_gz(folder)
        if gz_files is not None:
            # Decompressed copies go to the user cache, never next to the source files.
            return _stage(gz_files, cache_dir() / "fashion-mnist"), [str(c) for c in candidates]
    return candidates[0] if root is not None else cache_dir() / "fashion-mnist", [str(c) for c in candidates]


def fashion_mnist(train: bool = True, root=None, transform=None, download: bool = True):
    """Fashion-MNIST as torchvision's ``FashionMNIST`` dataset (PIL images, int labels).

    ``root`` overrides the search (``$VITREF_DATA``, ``/usr/share/datasets/fashion-mnist``,
    ``~/.cache/vitref``); it may hold the four ``.gz`` files or torchvision's layout. If the
    files are nowhere and ``download`` is true, torchvision downloads them (needs internet).
    """
    from torchvision.datasets import FashionMNIST

    torch_root, searched = _fashion_mnist_root(root)
    if _has_raw_files(torch_root):
        return FashionMNIST(str(torch_root), train=train, transform=transform, download=False)
    if not download:
        raise FileNotFoundError(
            f"Fashion-MNIST not found (searched {', '.join(searched)}); on Debian install the "
            "package dataset-fashion-mnist, or set VITREF_DATA to a folder with the four .gz files"
        )
    try:
        return FashionMNIST(str(torch_root), train=train, transform=transform, download=True)
    except (OSError, RuntimeError) as error:  # URLError is an OSError
        raise RuntimeError(
            f"Fashion-MNIST not found (searched {', '.join(searched)}) and the download failed ({error}). "
            "Offline, install Debian's dataset-fashion-mnist or set VITREF_DATA to a folder with "
            "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
            "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz"
        ) from error


def cifar10(train: bool = True, root=None, transform=None, download: bool = True):
    """CIFAR-10 as torchvision's ``CIFAR10`` dataset, downloaded into ``root`` (default
    ``$VITREF_DATA`` or ``~/.cache/vitref``). Needs internet the first time; offline it raises
    a ``RuntimeError`` that points to Fashion-MNIST, which works offline."""
    from torchvision.datasets import CIFAR10

    if root is None:
        root = os.environ.get("VITREF_DATA") or cache_dir()
    try:
        return CIFAR10(str(root), train=train, transform=transform, download=download)
    except (OSError, RuntimeError) as error:
        raise RuntimeError(
            f"CIFAR-10 is not in {root} and could not be downloaded ({type(error).__name__}: {error}). "
            "CIFAR-10 needs internet the first time (e.g. Colab). Offline, use Fashion-MNIST instead: "
            "vitref.data.fashion_mnist(), or `python -m vitref.train --dataset fashion-mnist`."
        ) from error


def sample_photo():
    """A real photo (Grace Hopper, 512 x 600 RGB, shipped with matplotlib) as a ``PIL.Image``."""
    from matplotlib import cbook
    from PIL import Image

    with Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as image:
        return image.convert("RGB")


def as_tensors(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """A torchvision MNIST-like or CIFAR dataset as ``(images uint8 (N, C, H, W), labels int64 (N,))``."""
    data = torch.as_tensor(dataset.data)
    if data.ndim == 3:                                   # MNIST family: (N, H, W)
        images = data.unsqueeze(1)                       # (N, 1, H, W)
    else:                                                # CIFAR: (N, H, W, C) numpy
        images = data.permute(0, 3, 1, 2)                # (N, C, H, W)
    labels = torch.as_tensor(dataset.targets, dtype=torch.long)
    return images.contiguous(), labels


def load_tensors(name: str, train: bool, root=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images uint8 (N, C, H, W), labels int64 (N,))`` of ``'fashion-mnist'`` or ``'cifar10'``."""
    if name == "fashion-mnist":
        return as_tensors(fashion_mnist(train, root=root))
    if name == "cifar10":
        return as_tensors(cifar10(train, root=root))
    raise ValueError(f"unknown dataset {name!r}: expected 'fashion-mnist' or 'cifar10'")


DATASET_INFO = {
    "fashion-mnist": dict(img_size=28, in_channels=1, num_classes=10, mean=FASHION_MNIST_MEAN,
                          std=FASHION_MNIST_STD, classes=FASHION_MNIST_CLASSES),
    "cifar10": dict(img_size=32, in_channels=3, num_classes=10, mean=CIFAR10_MEAN,
                    std=CIFAR10_STD, classes=CIFAR10_CLASSES),
}


def normalize(images: torch.Tensor, mean, std) -> torch.Tensor:
    """``uint8 (B, C, H, W)`` -> float32 ``(B, C, H, W)``, scaled to [0, 1] then standardised per channel."""
    mean = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    std = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255.0 - mean) / std


def augment_batch(images: torch.Tensor, generator: torch.Generator, crop_padding: int = 0,
                  flip: bool = False, erase: float = 0.0) -> torch.Tensor:
    """Augment a batch ``(B, C, H, W)`` in one go, each image with its own random draw.

    * ``crop_padding=p``: pad by ``p`` zeros and crop back at a random offset (a shift of up to
      ``p`` pixels each way);
    * ``flip``: mirror left-right with probability 1/2;
    * ``erase=q``: with probability ``q`` set a random rectangle (2% to 25% of the area,
      aspect ratio 1/3 to 3) to zero (random erasing, Zhong et al. 2017).

    Zero is the background after padding: apply before normalising. The random numbers come
    from ``generator`` (on the CPU), so a seed fixes the result on any device.
    """
    B, C, H, W = images.shape
    device = images.device
    if crop_padding:
        p = crop_padding
        padded = torch.nn.functional.pad(images, (p, p, p, p))              # (B, C, H+2p, W+2p)
        dy = torch.randint(0, 2 * p + 1, (B,), generator=generator).to(device)
        dx = torch.randint(0, 2 * p + 1, (B,), generator=generator).to(device)
        rows = (dy[:, None] + torch.arange(H, device=device))[:, None, :, None]   # (B, 1, H, 1)
        cols = (dx[:, None] + torch.arange(W, device=device))[:, None, None, :]   # (B, 1, 1, W)
        batch = torch.arange(B, device=device)[:, None, None, None]
        channel = torch.arange(C, device=device)[None, :, None, None]
        images = padded[batch, channel, rows, cols]                          # (B, C, H, W)
    if flip:
        mirror = (torch.rand(B, generator=generator) < 0.5).to(device)
        images = torch.where(mirror[:, None, None, None], images.flip(-1), images)
    if erase:
        apply = torch.rand(B, generator=generator) < erase
        area = torch.empty(B).uniform_(0.02, 0.25, generator=generator) * H * W
        log_ratio = torch.empty(B).uniform_(-1.0986, 1.0986, generator=generator)   # ln(1/3)..ln(3)
        h = (area * log_ratio.exp()).sqrt().round().clamp(1, H)
        w = (area / log_ratio.exp()).sqrt().round().clamp(1, W)
        top = (torch.rand(B, generator=generator) * (H - h + 1)).floor()
        left = (torch.rand(B, generator=generator) * (W - w + 1)).floor()
        r = torch.arange(H)[None, :]
        c = torch.arange(W)[None, :]
        inside_r = (r >= top[:, None]) & (r < (top + h)[:, None])                  # (B, H)
        inside_c = (c >= left[:, None]) & (c < (left + w)[:, None])                # (B, W)
        box = inside_r[:, :, None] & inside_c[:, None, :] & apply[:, None, None]   # (B, H, W)
        images = images.masked_fill(box[:, None].to(device), 0)
    return images


class BatchLoader:
    """Mini-batches from in-memory tensors: shuffle, augment and normalise whole batches.

    ``images`` ``uint8 (N, C, H, W)``, ``labels`` ``(N,)``. Iterating yields
    ``(x float32 (B, C, H, W), y int64 (B,))`` for one pass (an epoch); with ``shuffle`` the
    order (and the augmentation) is drawn from ``generator``. ``drop_last`` keeps every batch
    the same size (steady timing, no tiny last step). With ``targets (N, ...)`` (e.g. a
    teacher's logits for distillation) it yields ``(x, y, targets)``, the targets of the same images.
    """

    def __init__(self, images, labels, batch_size, mean, std, shuffle=False, generator=None,
                 crop_padding=0, flip=False, erase=0.0, drop_last=False, device="cpu", targets=None):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected uint8 images (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if targets is not None and len(targets) != len(images):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images, self.labels = images.to(device), labels.to(device)
        self.targets = targets.to(device) if targets is not None else None
        self.batch_size, self.mean, self.std = batch_size, mean, std
        self.shuffle, self.drop_last = shuffle, drop_last
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.crop_padding, self.flip, self.erase = crop_padding, flip, erase

    def __len__(self) -> int:
        n = len(self.images)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.images)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        order = order.to(self.images.device)
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            images = self.images[index]                                          # (B, C, H, W) uint8
            if self.crop_padding or self.flip or self.erase:
                images = augment_batch(images, self.generator, self.crop_padding, self.flip, self.erase)
            if self.targets is None:
                yield normalize(images, self.mean, self.std), self.labels[index]
            else:
                yield normalize(images, self.mean, self.std), self.labels[index], self.targets[index]


__all__ = [
    "fashion_mnist", "cifar10", "sample_photo", "as_tensors", "load_tensors", "normalize",
    "augment_batch", "BatchLoader", "cache_dir", "DATASET_INFO", "FASHION_MNIST_CLASSES", "CIFAR10_CLASSES",
]
