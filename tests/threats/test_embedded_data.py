"""Threat: a notebook that carries data an answer has no use for (weights trained elsewhere, a
copy of the data set) in its own file, for its code to read while it is graded.

Two defences: the student's process receives only the code cells' sources (no markdown, no
saved outputs, no attachments: :func:`autograder.student.cells.code_only`), and a notebook
whose literals, wherever they stand, and comments that write numbers hold more than
:data:`autograder.judging.scan.MAX_LITERAL_CHARS` characters (or more than ``MAX_LITERAL_NUMBERS``
number literals) is held for review (flag ``embedded-data``). The course's own notebooks raise no
flag (``tests/test_scan_flags.py``) and stay far below the limits (below).
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

import autograder

from autograder.judging.scan import MAX_LITERAL_CHARS, MAX_LITERAL_NUMBERS, embedded_data, flags
from autograder.student.cells import code_cells, code_only
from answers.submission import submission_source

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


def _hex_words(count: int) -> list[str]:
    """``count`` 64-bit integers as hexadecimal literals: 8 int8 weights each."""
    return [hex(int(v)) for v in np.random.default_rng(1).integers(0, 2 ** 63, count, dtype=np.int64)]


def test_an_int8_model_in_hexadecimal_call_arguments_is_held_for_review():
    """The red team's win: a FashionViT trained elsewhere, as int8 in 13,194 64-bit integer literals
    passed as call arguments (the limit counted only strings, comments, wide integers and numbers
    directly inside list literals), was graded 4/4."""
    words = _hex_words(13_194)
    rows = [f"w({', '.join(words[i:i + 6])})" for i in range(0, len(words), 6)]
    cells = ["import torch\nPARTS = []\n\n\ndef w(*values):\n    PARTS.extend(values)", "\n".join(rows)]
    found = [f for f in flags(cells) if f.kind == "embedded-data"]
    assert len(found) == 1 and found[0].cell == 2 and found[0].snippet.startswith("w(0x"), found
    assert embedded_data(cells)[1] == 13_194


@pytest.mark.parametrize("form", [
    "W = {numbers}",                                   # a bare tuple of signed small integers
    "w({numbers})",                                    # call arguments
    "W = [{numbers}]",                                 # a list of signed numbers (-3 is not a constant itself)
    "W = {{{pairs}}}",                                 # dict keys and values
    "w = torch.zeros(9)\nx = w[{numbers}]",            # subscripts
    "def f(a=({numbers})):\n    return a",             # a default
    "W = f'{{({numbers})}}'",                          # inside an f-string
    "W = ({floats})",                                  # floats and complex numbers
    "W = ({bools})",                                   # bits
], ids=["tuple", "call", "list", "dict", "subscript", "default", "f-string", "floats", "bools"])
def test_numbers_count_wherever_they_stand(form):
    count = MAX_LITERAL_NUMBERS + 200
    values = np.random.default_rng(2).integers(-8, 8, count)
    cell = form.format(numbers=", ".join(str(int(v)) for v in values),
                       pairs=", ".join(f"{i}: {int(v)}" for i, v in enumerate(values[:count // 2 + 1])),
                       floats=", ".join(f"{v / 7:.3f}" if i % 2 else f"{v}j" for i, v in enumerate(values)),
                       bools=", ".join(str(bool(v > 0)) for v in values))
    assert "embedded-data" in _kinds(["import torch", cell]), cell[:80]
    few = form.format(numbers="-3, 5, 7", pairs="1: -3", floats="0.5, 1j", bools="True, False")
    assert "embedded-data" not in _kinds(["import torch", few])


def test_weights_in_a_bytes_literal_are_held_for_review():
    weights = np.random.default_rng(3).integers(-128, 128, 30_000).astype(np.int8).tobytes()
    assert "embedded-data" in _kinds([f"W = {weights!r}"])
    assert "embedded-data" not in _kinds([f"W = {weights[:1_000]!r}"])


def test_comments_count_when_they_write_numbers_never_as_prose():
    """The red team's false positive: 24,000 characters of explanations in comments were held as
    embedded data. Prose counts for nothing; the same room filled with numbers counts."""
    prose = ("# The class token gathers what every patch says through the attention of each head; the\n"
             "# warm-up keeps the first steps of AdamW small, then the cosine decay brings it down to zero.\n"
             "# tokens: (B, 17, 64) after the embedding of the 7 x 7 patches (16 of them) and the class token\n")
    explained = "x = 1\n" + prose * 90
    assert len(explained) > 24_000 and "embedded-data" not in _kinds([explained])
    numbers = ", ".join(f"{v:.4f}" for v in np.random.default_rng(4).standard_normal(4_000))
    decimals = "x = 1\n" + "".join(f"# {numbers[i:i + 90]}\n" for i in range(0, len(numbers), 90))
    assert "embedded-data" in _kinds([decimals])
    hexadecimal = "x = 1\n" + "".join(f"# {' '.join(_hex_words(6))}\n" for _ in range(300))
    assert "embedded-data" in _kinds([hexadecimal])


def test_weights_in_identifiers_or_in_letters_only_comment_words_are_held_for_review():
    """Red team, round 3: a trained FashionViT carried in names (``w_<hex>``) or in comment words made
    of letters only (one letter a nibble) went unflagged and scored 4/4. Distinct identifiers and the
    whole of the comments count now, with limits far over an answer's (the course's: under 4,200
    and 2,300 characters)."""
    rng = np.random.default_rng(5)
    nibbles = rng.integers(0, 16, 60_000)
    words = ["".join("abcdefghijklmnop"[n] for n in nibbles[i:i + 12]) for i in range(0, nibbles.size, 12)]
    in_names = "x = 1\n" + "".join(f"w_{w} = 0\n" for w in words)
    assert "embedded-data" in _kinds([in_names])
    in_comments = "x = 1\n" + "".join(f"# {' '.join(words[i:i + 6])}\n" for i in range(0, len(words), 6))
    assert "embedded-data" in _kinds([in_comments])
    honest = "x = 1\n" + "".join(f"layer_{i} = nn.Linear(8, 8)  # the {i}th layer of the model\n" for i in range(40))
    assert "embedded-data" not in _kinds([honest])


def test_the_limits_keep_a_wide_margin_over_the_courses_own_code():
    """Every notebook of solutions/ and exercises/, the whole submission written from the answer banks
    (every solution) and the notebooks' given code hold at most a third of each limit (measured: 6,400
    characters, 310 number literals); the book's chapters and the banks of tests/answers (not
    submissions: a chapter file holds dozens of answers to its questions) at most two thirds."""
    repo = Path(__file__).resolve().parents[2]
    answers = repo / "tests" / "answers"
    submissions = [code_cells(p.read_bytes())[0] for p in sorted(repo.glob("solutions/*/*.ipynb"))
                   + sorted(repo.glob("exercises/*/*.ipynb"))]
    submissions += [[submission_source()], [(answers / "given.py").read_text()]]
    collections = [code_cells(p.read_bytes())[0] for p in sorted(repo.glob("book/*.ipynb"))]
    collections += [[p.read_text()] for p in sorted(answers.glob("ch[0-9][0-9]_*.py"))]
    assert len(submissions) >= 2 * 9 + 2 and len(collections) >= 8 + 8
    for cells_of, share in ((submissions, 1 / 3), (collections, 2 / 3)):
        chars, numbers = zip(*(embedded_data(cells) for cells in cells_of))
        assert max(chars) <= share * MAX_LITERAL_CHARS and max(numbers) <= share * MAX_LITERAL_NUMBERS, \
            (max(chars), max(numbers))


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
