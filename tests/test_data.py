"""vitref.data: offline Fashion-MNIST, CIFAR-10's offline error, the sample photo, batch augmentation."""
import gzip
import os
import struct
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch

from vitref import data


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty user cache and no $VITREF_DATA: the loader must find the data by itself."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("VITREF_DATA", raising=False)
    return tmp_path / "cache" / "vitref"


def _write_idx_gz(folder: Path, images: torch.Tensor, labels: torch.Tensor, prefix: str) -> None:
    """Write IDX files (the MNIST format: magic, sizes, raw bytes), gzipped, as Debian ships them."""
    n, h, w = images.shape
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, h, w) + images.numpy().tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + labels.numpy().astype("uint8").tobytes())


def test_debian_files_are_found_offline_and_staged_in_the_cache(cache):
    if not data.DEBIAN_FASHION_MNIST.is_dir():
        pytest.fail("Fashion-MNIST is missing: install the Debian package dataset-fashion-mnist (make setup)")
    before = sorted(os.listdir(data.DEBIAN_FASHION_MNIST))
    train, test = data.fashion_mnist(train=True, download=False), data.fashion_mnist(train=False, download=False)
    assert (len(train), len(test)) == (60000, 10000)
    image, label = train[0]
    assert image.size == (28, 28) and 0 <= label <= 9
    images, labels = data.as_tensors(test)
    assert images.shape == (10000, 1, 28, 28) and images.dtype == torch.uint8
    assert labels.min() == 0 and labels.max() == 9
    assert torch.bincount(labels).tolist() == [1000] * 10          # the test set is balanced
    assert sorted(os.listdir(data.DEBIAN_FASHION_MNIST)) == before  # nothing written next to the source
    assert all((cache / "fashion-mnist" / "FashionMNIST" / "raw" / n).is_file() for n in data.FASHION_MNIST_FILES)


def test_vitref_data_comes_first(tmp_path, cache, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    generator = torch.Generator().manual_seed(0)
    train_images = torch.randint(0, 256, (12, 28, 28), dtype=torch.uint8, generator=generator)
    train_labels = torch.arange(12) % 10
    _write_idx_gz(folder, train_images, train_labels, "train")
    _write_idx_gz(folder, train_images[:5], train_labels[:5], "t10k")
    monkeypatch.setenv("VITREF_DATA", str(folder))
    images, labels = data.load_tensors("fashion-mnist", train=True)
    assert torch.equal(images[:, 0], train_images) and torch.equal(labels, train_labels)
    assert len(data.fashion_mnist(train=False)) == 5


def test_missing_fashion_mnist_names_the_places_searched(tmp_path, cache):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist") as error:
        data.fashion_mnist(root=tmp_path / "empty", download=False)
    assert "empty" in str(error.value)


def test_cifar10_offline_points_to_fashion_mnist(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", offline)
    with pytest.raises(RuntimeError, match="Fashion-MNIST") as error:
        data.cifar10(train=True, root=tmp_path)
    assert "internet" in str(error.value) and "--dataset fashion-mnist" in str(error.value)


def test_sample_photo_is_a_real_rgb_photo():
    photo = data.sample_photo()
    assert photo.mode == "RGB" and photo.size == (512, 600)
    assert len(torch.from_numpy(np.array(photo)).reshape(-1, 3).unique(dim=0)) > 1000   # a photo, not a flat image


def test_normalize_standardises_each_channel():
    images = torch.tensor([0, 255], dtype=torch.uint8).view(2, 1, 1, 1)
    out = data.normalize(images, (0.5,), (0.25,))
    assert torch.allclose(out.flatten(), torch.tensor([-2.0, 2.0]))


def test_random_crop_shifts_each_image_within_the_padding():
    images = torch.zeros(64, 1, 6, 6, dtype=torch.uint8)
    images[:, :, 2, 3] = 200                                           # one bright pixel
    out = data.augment_batch(images, torch.Generator().manual_seed(0), crop_padding=2)
    assert out.shape == images.shape
    rows, cols = (out[:, 0] == 200).nonzero()[:, 1:].T
    assert len(rows) == 64                                             # the pixel stays inside every crop
    assert (rows - 2).abs().max() <= 2 and (cols - 3).abs().max() <= 2
    assert len(set(zip(rows.tolist(), cols.tolist()))) > 5             # and moves differently per image


def test_flip_mirrors_about_half_the_images_and_is_seeded():
    images = torch.arange(256 * 4, dtype=torch.float32).view(256, 1, 1, 4) % 251
    out = data.augment_batch(images, torch.Generator().manual_seed(1), flip=True)
    flipped = (out == images.flip(-1)).flatten(1).all(1)
    kept = (out == images).flatten(1).all(1)
    assert bool((flipped | kept).all()) and 90 < int(flipped.sum()) < 166
    again = data.augment_batch(images, torch.Generator().manual_seed(1), flip=True)
    assert torch.equal(out, again)


def test_random_erasing_zeroes_one_rectangle():
    images = torch.full((32, 1, 28, 28), 255, dtype=torch.uint8)
    out = data.augment_batch(images, torch.Generator().manual_seed(0), erase=1.0)
    for image in out[:, 0]:
        rows, cols = (image == 0).nonzero().T
        assert len(rows) > 0
        height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert len(rows) == height * width                            # a filled rectangle
        assert 0.02 * 784 * 0.5 <= len(rows) <= 0.25 * 784 * 1.5


def test_batch_loader_visits_every_example_once_per_epoch():
    images = torch.arange(10, dtype=torch.uint8).view(10, 1, 1, 1)
    labels = torch.arange(10)
    loader = data.BatchLoader(images, labels, 4, (0.0,), (1 / 255,), shuffle=True,
                              generator=torch.Generator().manual_seed(0))
    batches = list(loader)
    assert [len(y) for _, y in batches] == [4, 4, 2] and len(loader) == 3
    seen = torch.cat([y for _, y in batches])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))
    for x, y in batches:                                               # images stay with their labels
        assert torch.allclose(x.flatten(), y.float())
    assert len(data.BatchLoader(images, labels, 4, (0.0,), (1.0,), drop_last=True)) == 2


def test_batch_loader_rejects_float_images():
    with pytest.raises(ValueError, match="uint8"):
        data.BatchLoader(torch.zeros(2, 1, 4, 4), torch.zeros(2), 1, (0.0,), (1.0,))
