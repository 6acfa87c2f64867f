"""Code the notebooks give students, which the solutions and the other answers of chapters 4, 5, 7, 8
and 9 build on: not an answer, and not a copy. Each name is what the locked ``given`` cell (nbgrader
grade_id ``given``) of ``solutions/<assignment>/<assignment>.ipynb`` defines, run from the notebook:

* ``attend(q, k, v, mask=None)``, q (..., T, d_k), k (..., S, d_k), v (..., S, d_v) -> (out (..., T, d_v),
  weights (..., T, S)), and ``AttentionHead(dim, head_dim)``, x (B, T, dim) -> (out (B, T, head_dim),
  weights (B, T, T)): 04_multihead_attention;
* ``MultiHeadAttention(emb_size, num_heads)``, x (B, N, E) -> (B, N, E) [and weights (B, heads, N, N)]:
  05_blocks (07_vit and 08_decoder give the same);
* ``FeedForwardBlock(emb_size, expansion=4, drop_p=0.0, hidden_dim=None)``, (..., E) -> (..., E), and
  ``TransformerEncoderBlock(emb_size, num_heads, ..., mlp_dim=None)``, x (B, N, D) -> (B, N, D) [and
  weights]: 07_vit (08_decoder gives the same FeedForwardBlock);
* ``FashionViT()``, uint8 images (B, 1, 28, 28) -> logits (B, 10): 09_training.

A bank module imports from here what its notebook gives, so that its ``@solution`` runs as it does in
the notebook. Each given cell runs as a module of its own, ``answers.given_<assignment>``, whose source
is the cell's (``inspect`` reads it, so ``tests/answers/submission.py`` copies the notebook's text into
the whole submission). A name several notebooks give is taken from the first, and importing this module
fails if another notebook gives different code under that name.
"""
from __future__ import annotations

import inspect
import json
import linecache
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from einops import rearrange
from einops.layers.torch import Rearrange
from torch import nn

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"

# What the notebooks' imports cells bind before the given cells run: the names those cells read.
NOTEBOOK_IMPORTS = {"np": np, "torch": torch, "nn": nn, "rearrange": rearrange, "Rearrange": Rearrange}

# The notebooks whose given cells the answers build on, in the order a shared name is taken from.
GIVING_NOTEBOOKS = ("04_multihead_attention", "05_blocks", "07_vit", "08_decoder", "09_training")


def notebook_path(assignment: str) -> Path:
    return SOLUTIONS / assignment / f"{assignment}.ipynb"


def notebook_cell(assignment: str, grade_id: str) -> str:
    """The source of the one cell with nbgrader grade_id ``grade_id`` in the assignment's solutions notebook."""
    cells = json.loads(notebook_path(assignment).read_text(encoding="utf-8"))["cells"]
    found = ["".join(c["source"]) for c in cells
             if (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == grade_id]
    assert len(found) == 1, (f"{notebook_path(assignment)}: expected one cell with grade_id {grade_id!r}, "
                             f"found {len(found)}")
    return found[0]


def given_cell(assignment: str) -> str:
    """The source of the locked given cell (grade_id "given") of the assignment's solutions notebook."""
    return notebook_cell(assignment, "given")


def _run_given_cell(assignment: str) -> ModuleType:
    """The assignment's given cell, run as the module ``answers.given_<assignment>`` (its source, for
    ``inspect``, is the cell's: registered under a file name that says where the cell is)."""
    source = given_cell(assignment)
    module = ModuleType(f"{__package__}.given_{assignment}", f"The given cell of {notebook_path(assignment)}.")
    module.__file__ = f"<{notebook_path(assignment)}: the given cell>"
    linecache.cache[module.__file__] = (len(source), None, source.splitlines(keepends=True), module.__file__)
    vars(module).update(NOTEBOOK_IMPORTS)
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), vars(module))  # noqa: S102 - the repository's own notebook cell
    return module


def _given_names() -> dict[str, object]:
    """Every function, class and number the given cells define, by name, each from the first notebook
    that gives it; a name two notebooks give with different code fails here, saying which."""
    names: dict[str, object] = {}
    giver: dict[str, str] = {}                         # name -> the notebook it is taken from
    for assignment in GIVING_NOTEBOOKS:
        module = _run_given_cell(assignment)
        for name, value in vars(module).items():
            if name.startswith("__") or name in NOTEBOOK_IMPORTS:
                continue
            first = names.setdefault(name, value)
            giver.setdefault(name, assignment)
            if first is not value and _source_of(first) != _source_of(value):
                raise AssertionError(f"{notebook_path(assignment)}'s given cell defines {name} differently from "
                                     f"{notebook_path(giver[name])}'s: the notebooks give one code; make the two "
                                     f"cells' {name} the same")
    return names


def _source_of(value: object) -> object:
    """What two notebooks' definitions of a name are compared by: a class's or function's source (the cell's
    last line has no line break), else the value."""
    return inspect.getsource(value).rstrip("\n") if inspect.isclass(value) or inspect.isfunction(value) else value


_GIVEN = _given_names()
attend = _GIVEN["attend"]
AttentionHead = _GIVEN["AttentionHead"]
MultiHeadAttention = _GIVEN["MultiHeadAttention"]
FeedForwardBlock = _GIVEN["FeedForwardBlock"]
TransformerEncoderBlock = _GIVEN["TransformerEncoderBlock"]
FashionViT = _GIVEN["FashionViT"]
