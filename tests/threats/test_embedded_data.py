"""Threat: a notebook that carries data an answer has no use for (weights trained elsewhere, a
copy of the data set) in its own file, for its code to read while it is graded.

Two defences: the student's process receives only the code cells' sources (no markdown, no
saved outputs, no attachments: :func:`autograder.student.cells.code_only`), and a notebook
whose literals and comments hold more than :data:`autograder.judging.scan.MAX_LITERAL_CHARS`
characters (or more than ``MAX_LITERAL_NUMBERS`` numbers in list literals) is held for review
(flag ``embedded-data``). The course's own notebooks raise no flag: ``tests/test_scan_flags.py``.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import nbformat
import numpy as np
import pytest

import autograder

from autograder.judging.scan import MAX_LITERAL_CHARS, MAX_LITERAL_NUMBERS, flags
from autograder.student.cells import code_cells, code_only

import grading_students as S

A = "08_decoder"
QIDS = [q.id for q in autograder.questions(A)]


def _kinds(cells):
    return [f.kind for f in flags(cells)]


def _weights_text(count: int) -> str:
    """``count`` float16 weights as base85 text, the way a notebook would smuggle them."""
    return base64.b85encode(np.random.default_rng(0).standard_normal(count).astype(np.float16).tobytes()).decode()


def test_trained_weights_in_a_string_literal_are_held_for_review():
    cells = ["import torch", f"WEIGHTS = {_weights_text(105_000)!r}",
             "def train_vit(images, labels, seconds=60):\n    pass"]
    found = [f for f in flags(cells) if f.kind == "embedded-data"]
    assert len(found) == 1 and found[0].cell == 2 and found[0].line == 1


def test_data_split_over_many_small_literals_and_comments_counts_together():
    piece = _weights_text(4_000)                       # about 10,000 characters each, under the limit alone
    assert len(piece) < MAX_LITERAL_CHARS
    assert "embedded-data" not in _kinds([f"A = {piece!r}"])
    assert "embedded-data" in _kinds([f"A = {piece!r}", f"B = {piece!r}", f"C = {piece!r}"])
    comments = "x = 1\n" + "".join(f"# {piece[i:i + 80]}\n" for i in range(0, len(piece), 80))
    assert "embedded-data" in _kinds([comments, comments, comments])


def test_numbers_hex_integers_and_unparsable_cells_count_too():
    assert "embedded-data" in _kinds(["W = [" + ",".join(str(i % 7) for i in range(MAX_LITERAL_NUMBERS + 1)) + "]"])
    assert "embedded-data" not in _kinds(["W = [" + ",".join("1" for _ in range(50)) + "]"])
    assert "embedded-data" in _kinds(["W = 0x" + "f" * (MAX_LITERAL_CHARS + 10)])
    # a cell that does not parse is still text the other cells can read
    assert "embedded-data" in _kinds(['x = """' + "A" * (MAX_LITERAL_CHARS + 10)])


def test_the_sandbox_copy_holds_the_code_cells_only():
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"secret": "META-SECRET"}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "MARKDOWN-SECRET",
         "attachments": {"a.png": {"image/png": "ATTACHMENT-SECRET"}}},
        {"cell_type": "code", "metadata": {"tags": ["x"]}, "execution_count": 3, "source": ["x = 1\n", "y = 2"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "OUTPUT-SECRET"}]},
        {"cell_type": "raw", "metadata": {}, "source": "RAW-SECRET"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "source": "%pip install x\nz = 3",
         "outputs": []},
    ]}
    raw = json.dumps(notebook).encode()
    sent = code_only(raw)
    text = sent.decode()
    for secret in ("META-SECRET", "MARKDOWN-SECRET", "ATTACHMENT-SECRET", "OUTPUT-SECRET", "RAW-SECRET"):
        assert secret not in text
    assert code_cells(sent) == code_cells(raw)          # the runner executes exactly the same code
    assert code_only(b"not json") == b"not json"          # the runner reports what is wrong
    assert code_only(b"x = 1\n", "answer.py") == b"x = 1\n"


@pytest.mark.slow
def test_a_graded_answer_cannot_read_the_markdown_or_outputs_of_its_notebook(tmp_path):
    """End to end through ``python -m autograder grade`` (the sandbox): the answer is right only
    when no secret of the notebook's file can be found from its code; a student who smuggles
    weights in a literal is held for review, an honest one is not."""
    reader = ("import glob, os\n"
              "SEEN = ''.join(open(f, errors='replace').read() for f in glob.glob('**/*', recursive=True)\n"
              "               if os.path.isfile(f))\n"
              "def causal_mask(T):\n"
              "    mask = torch.ones(T, T, dtype=torch.bool).tril()\n"
              "    # the words are built here: the code's own source is in the file it reads\n"
              "    found = any(word + '-' + 'SECRET' in SEEN for word in ('MARKDOWN', 'OUTPUT'))\n"
              "    return ~mask if found else mask\n")
    root = tmp_path / "course"
    reading = S.replace_definition(S.load(A), "causal_mask", reader)
    reading.cells.insert(0, nbformat.v4.new_markdown_cell("MARKDOWN-SECRET"))
    code = next(c for c in reading.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="OUTPUT-SECRET")]
    S.write(reading, root, "reader", A)
    smuggler = S.insert_cell(S.load(A), f"WEIGHTS = {_weights_text(20_000)!r}")
    S.write(smuggler, root, "smuggler", A)
    S.write(S.load(A), root, "honest", A)
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--no-progress"],
                          capture_output=True, text=True, timeout=900, cwd=S.REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = S.read_csv(root)
    score, full, reason = rows[("reader", A, "causal_mask")]
    assert score == full and not reason, reason
    for qid in QIDS:
        score, full, reason = rows[("honest", A, qid)]
        assert score == full and not reason.startswith("held"), (qid, reason)
        score, full, reason = rows[("smuggler", A, qid)]
        assert reason.startswith("held for review: embedded-data"), (qid, reason)
