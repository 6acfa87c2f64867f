"""What crosses the sandbox's boundary, in both directions, and its format.

Out of the sandbox, a stream of *frames*: 4-byte length + JSON header, 4-byte length + blob.
A probe result is a header ``{"event": "result", "qid", "tree"}`` whose blob holds its arrays
(:func:`arrays_bytes`: a JSON list of name, dtype and shape, then each array's raw bytes; numbers
and booleans only, no pickle, no compression); the JSON tree holds dicts with string keys, lists,
strings, numbers, booleans, None and references to those arrays. Anything else is refused when
packing and when reading.

Into the sandbox: the notebook's bytes and the inputs of this run (:func:`read_inputs`).
"""
from __future__ import annotations

import json
import math
import re
import struct

import numpy as np

MAX_BYTES = 64 * 2 ** 20          # per probe result, arrays and JSON together
MAX_HEADER = 4 << 20              # bytes of JSON in one frame
_ARRAY_TAG = "__ndarray__"


# ---------------------------------------------------------------- frames

def frame(header: dict, blob: bytes = b"") -> bytes:
    head = json.dumps(header, allow_nan=True).encode()
    return struct.pack(">I", len(head)) + head + struct.pack(">I", len(blob)) + blob


def frames(data: bytes) -> list[tuple[dict, bytes]]:
    """Decode a stream of frames; a truncated or malformed tail is dropped."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if n > MAX_HEADER or pos + 4 + n + 4 > len(data):
            break
        try:
            header = json.loads(data[pos + 4:pos + 4 + n])
        except (ValueError, RecursionError):      # a header nested too deep raises RecursionError
            break
        if not isinstance(header, dict):
            break
        pos += 4 + n
        (m,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + m > len(data):
            break
        out.append((header, data[pos + 4:pos + 4 + m]))
        pos += 4 + m
    return out


# ---------------------------------------------------------------- probe results

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


_ARRAYS_MAGIC = b"ARR1"
# what an array may be: little-endian (or byte-sized) numbers, booleans, short unicode strings
_DTYPES = re.compile(r"[<|](?:[fiu][1248]|b1|U[0-9]{1,4})")
MAX_ARRAYS = 100_000
MAX_NDIM = 32


def arrays_bytes(arrays: dict) -> bytes:
    """``arrays`` (name -> numpy array) as one blob: ``ARR1``, a 4-byte length and a JSON list of
    ``[name, dtype, shape]``, then each array's bytes in C order, in the list's order. Many small
    arrays cost a copy each here (an ``.npz`` costs a zip entry and a CRC each)."""
    meta, chunks = [], []
    for name, value in arrays.items():
        value = np.asarray(value)
        if not value.flags.c_contiguous:
            value = value.copy(order="C")                 # (np.ascontiguousarray makes a 0-d array 1-d)
        if value.dtype.byteorder == ">":
            value = value.astype(value.dtype.newbyteorder("<"))
        meta.append([str(name), value.dtype.str, list(value.shape)])
        chunks.append(value.tobytes())
    head = json.dumps(meta).encode()
    return _ARRAYS_MAGIC + struct.pack(">I", len(head)) + head + b"".join(chunks)


def _load_arrays(blob: bytes, kinds: str) -> dict:
    """The arrays of an :func:`arrays_bytes` blob, each a fresh copy, checked: only dtypes whose kind
    is in ``kinds``, shapes that fit the bytes exactly, nothing left over; else ValueError."""
    if len(blob) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
    if len(blob) < 8 or blob[:4] != _ARRAYS_MAGIC:
        raise ValueError("not an array blob")
    (size,) = struct.unpack(">I", blob[4:8])
    if 8 + size > len(blob):
        raise ValueError("truncated array list")
    meta = json.loads(blob[8:8 + size])
    if type(meta) is not list or len(meta) > MAX_ARRAYS:
        raise ValueError("malformed array list")
    arrays, offset = {}, 8 + size
    for entry in meta:
        if type(entry) is not list or len(entry) != 3:
            raise ValueError("malformed array entry")
        name, dtype, shape = entry
        if type(name) is not str or name in arrays or type(dtype) is not str or not _DTYPES.fullmatch(dtype):
            raise ValueError(f"array {str(name)[:40]!r}: dtype {str(dtype)[:20]!r} not accepted")
        kind = np.dtype(dtype)
        if kind.kind not in kinds:
            raise ValueError(f"array {name[:40]!r} has dtype {kind}")
        if type(shape) is not list or len(shape) > MAX_NDIM or any(type(d) is not int or d < 0 for d in shape):
            raise ValueError(f"array {name[:40]!r}: malformed shape")
        count = math.prod(shape)
        if offset + count * kind.itemsize > len(blob):
            raise ValueError(f"array {name[:40]!r}: its shape {tuple(shape)} is larger than the bytes sent")
        arrays[name] = np.frombuffer(blob, kind, count, offset).reshape(shape).copy()
        offset += count * kind.itemsize
    if offset != len(blob):
        raise ValueError("bytes left over after the arrays")
    return arrays


def result_frame(qid: str, data: dict, sign=None) -> bytes:
    """The frame of one probe result; ``sign``: the run's signer (:func:`autograder.student.guard.sign`),
    whose MAC of :func:`signed_bytes` goes in the header as ``mac``."""
    arrays, tree = pack(data)
    header, blob = {"event": "result", "qid": qid, "tree": tree}, arrays_bytes(arrays)
    if sign is not None:
        header["mac"] = sign(signed_bytes(header, blob))
    return frame(header, blob)


def signed_bytes(header: dict, blob: bytes) -> bytes:
    """What a result's MAC covers: its header (without the MAC) in canonical JSON, and its blob."""
    head = {k: v for k, v in header.items() if k != "mac"}
    return json.dumps(head, sort_keys=True, allow_nan=True).encode() + b"\0" + blob


def read_result(header: dict, blob: bytes) -> dict:
    """A probe result sent by the student's process, checked: plain data or ValueError."""
    data = unpack(_load_arrays(blob, "biuf"), header.get("tree"))
    if not isinstance(data, dict) or not isinstance(data.get("cases", []), list):
        raise ValueError("malformed probe result")
    return data


# ---------------------------------------------------------------- the inputs of a run

def read_inputs(blob: bytes, source_class=None):
    """The inputs the grader sent (see :func:`autograder.judging.secret.pack_inputs`) as a
    :class:`autograder.questions.inputs.ProvidedSource` (or ``source_class``: the payload passes
    the class it imported before the first cell, when the grader's modules leave ``sys.modules``)."""
    if source_class is None:
        # the questions package (and torch with it) loads only where inputs are read: the hosts
        # import this module for its frames alone
        from ..questions.inputs import ProvidedSource as source_class

    arrays = _load_arrays(blob, "biufU")
    keys = [str(k) for k in arrays.pop("keys")]
    pool = arrays.pop("pool")
    return source_class({key: arrays[f"a{i}"] for i, key in enumerate(keys)}, pool)
