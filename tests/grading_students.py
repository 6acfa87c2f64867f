"""Synthetic students for the grading tests: notebooks built from the course's own
solutions/ and exercises/ with one thing changed (an attack, a deleted test cell...)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]


def load(assignment: str, which: str = "solutions"):
    return nbformat.read(REPO / which / assignment / f"{assignment}.ipynb", as_version=4)


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(def|class)\s+{re.escape(name)}\b", source, flags=re.MULTILINE) is not None


def replace_definition(nb, name: str, source: str):
    """Replace the code cell that defines ``name`` (top-level def/class) by ``source``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and _defines(cell.source, name):
            cell.source = source
            return nb
    raise AssertionError(f"no cell defines {name}")


def insert_cell(nb, source: str, before_name: str | None = None):
    """Insert a code cell before the cell defining ``before_name`` (default: after the imports)."""
    cell = nbformat.v4.new_code_cell(source)
    for index, other in enumerate(nb.cells):
        if other.cell_type != "code":
            continue
        if before_name is None and "import torch" in other.source:
            nb.cells.insert(index + 1, cell)
            return nb
        if before_name is not None and _defines(other.source, before_name):
            nb.cells.insert(index, cell)
            return nb
    raise AssertionError("no place to insert the cell")


def written_points(assignment: str) -> float:
    """The points of the assignment's written questions (markdown grade cells graded by hand)."""
    return float(sum((c.metadata.get("nbgrader") or {}).get("points", 0) for c in load(assignment).cells
                     if c.cell_type == "markdown" and (c.metadata.get("nbgrader") or {}).get("grade")))


def graded_cells(nb):
    return [c for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade")]


def delete_test_cells(nb):
    nb.cells = [c for c in nb.cells if c not in graded_cells(nb)]
    return nb


def write(nb_or_bytes, root: Path, student: str, assignment: str, name: str | None = None) -> Path:
    folder = root / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{assignment}.ipynb")
    if isinstance(nb_or_bytes, bytes):
        path.write_bytes(nb_or_bytes)
    else:
        nbformat.write(nb_or_bytes, path)
    return path


def read_csv(root: Path) -> dict:
    """{(student, assignment, question): (score, max_score, reason)} from ROOT/grades.csv."""
    import csv
    with open(root / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for row in rows:
        key = (row["student"], row["assignment"], row["question"])
        assert key not in out, f"duplicate row {key}"
        out[key] = (float(row["score"]), float(row["max_score"]), row["reason"])
    return out


def notebook_json(cells: list[str]) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return json.dumps(nb).encode()


# A correct, self-contained softmax that attackers use in their *other* answers, so that
# the attacked question is the only one that should lose points.
PRIVATE_SOFTMAX = '''
def _my_softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)
'''

ATTENTION_WITH_PRIVATE_SOFTMAX = PRIVATE_SOFTMAX + '''

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -1e9)
    weights = _my_softmax(scores, dim=-1)
    return weights @ v, weights
'''


def head_with_forward(body: str) -> str:
    """An AttentionHead whose forward runs ``body`` (indented 8 spaces) first."""
    return f'''
class AttentionHead(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
{body}
        q, k, v = self.query(x), self.key(x), self.value(x)
        return scaled_dot_product_attention(q, k, v, mask)
'''


def lookup_softmax_source() -> str:
    """A softmax that computes nothing: it returns outputs precomputed for the checks'
    public inputs (recorded here from a correct softmax), looked up by a hash of the input. It passes ``check()``
    with the public inputs; a grading run draws its own inputs, where it must fail."""
    import base64
    import hashlib
    import io

    import numpy as np
    import torch

    import autograder

    table = {}

    def recorder(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        out = e / e.sum(dim=dim, keepdim=True)
        key = hashlib.sha256(x.detach().numpy().tobytes() + repr((tuple(x.shape), dim)).encode()).hexdigest()
        table[key] = out.detach().numpy()
        return out

    assert autograder.check("softmax", recorder).passed
    buf = io.BytesIO()
    np.savez(buf, **{f"k{key}": value for key, value in table.items()})
    blob = base64.b64encode(buf.getvalue()).decode()
    return f'''
import base64, hashlib, io
_TABLE = dict(np.load(io.BytesIO(base64.b64decode("{blob}"))))

def softmax(x, dim=-1):
    key = hashlib.sha256(x.detach().numpy().tobytes() + repr((tuple(x.shape), dim)).encode()).hexdigest()
    return torch.from_numpy(_TABLE.get("k" + key, np.zeros(tuple(x.shape), dtype=np.float32)))
'''
