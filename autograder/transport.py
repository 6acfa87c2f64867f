"""Probe output across a process boundary: arrays in ``.npz`` (no pickle), the rest in JSON.

Only dicts with string keys, lists, strings, numbers, booleans, None and numpy arrays of
numbers/booleans travel; anything else is refused when packing and when loading.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

MAX_BYTES = 64 * 2 ** 20          # per question file, arrays and JSON together
_ARRAY_TAG = "__ndarray__"


def pack(data) -> tuple[dict, object]:
    arrays: dict[str, np.ndarray] = {}

    def walk(value):
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biuf":
                raise TypeError(f"cannot send an array of dtype {value.dtype}")
            key = f"a{len(arrays)}"
            arrays[key] = value
            return {_ARRAY_TAG: key}
        if isinstance(value, dict):
            return {str(k): walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        if isinstance(value, (np.bool_, np.integer, np.floating)):
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"cannot send a {type(value).__name__}")

    return arrays, walk(data)


def unpack(arrays: dict, tree):
    def walk(value):
        if isinstance(value, dict):
            if set(value) == {_ARRAY_TAG}:
                return np.asarray(arrays[value[_ARRAY_TAG]])
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(tree)


def write(directory: str | os.PathLike, name: str, data) -> None:
    """Write ``name.npz`` and ``name.json`` atomically (rename after writing)."""
    directory = Path(directory)
    arrays, tree = pack(data)
    npz_tmp, json_tmp = directory / f".{name}.npz.tmp", directory / f".{name}.json.tmp"
    with open(npz_tmp, "wb") as handle:
        np.savez(handle, **arrays)
    with open(json_tmp, "w", encoding="utf-8") as handle:
        json.dump(tree, handle, allow_nan=True)
    os.replace(npz_tmp, directory / f"{name}.npz")
    os.replace(json_tmp, directory / f"{name}.json")


def read(directory: str | os.PathLike, name: str):
    """Load what :func:`write` wrote; ``None`` if absent. Raises ValueError on bad content."""
    directory = Path(directory)
    json_path, npz_path = directory / f"{name}.json", directory / f"{name}.npz"
    if not json_path.is_file() or not npz_path.is_file():
        return None
    if json_path.stat().st_size + npz_path.stat().st_size > MAX_BYTES:
        raise ValueError(f"the probe output for {name} is larger than {MAX_BYTES // 2 ** 20} MiB")
    with open(json_path, encoding="utf-8") as handle:
        tree = json.load(handle)
    with np.load(npz_path, allow_pickle=False) as npz:
        arrays = {key: np.array(npz[key]) for key in npz.files}
    for key, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(f"array {key} has dtype {value.dtype}")
    return unpack(arrays, tree)
