"""The static scan's flags (:func:`autograder.judging.scan.flags`), which hold a submission's
scores for review: none on the course's own code (every solution, exercise and book notebook,
every right answer of tests/answers), and each kind on a minimal hostile snippet."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import autograder
from answers.bank import right_answers, solutions
from answers.submission import submission_source
from autograder.judging.scan import FLAG_KINDS, flags, held_reason, holds, scan_object, scan_source
from autograder.student.cells import code_cells

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("exercises/*/*.ipynb")) \
    + sorted(REPO.glob("book/*.ipynb"))
# the files of answers (the banks, the notebooks' given code); bank.py, solutions.py and submission.py are
# the tests' machinery, not code a student writes: the whole submission they write is scanned below
ANSWERS_DIR = REPO / "tests" / "answers"
# given.py is not among them: it runs the notebooks' given cells, which test_no_flag_on_the_course_notebooks and
# the whole submission (which copies them) scan.
ANSWER_FILES = sorted(ANSWERS_DIR.glob("ch[0-9][0-9]_*.py"))


def _cells(path: Path) -> list[str]:
    cells, problem = code_cells(path.read_bytes())
    assert not problem, (path, problem)
    return cells


def _right_answers() -> list[tuple[str, object]]:
    """Every right answer the tests know: the solutions, the variants and the realistic ones."""
    return list(solutions().items()) + right_answers()


def test_the_fixtures_are_found():
    assert len(NOTEBOOKS) >= 2 * 9 + 8 and len(ANSWER_FILES) >= 6
    assert len(_right_answers()) > 150


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_no_flag_on_the_course_notebooks(path):
    assert [f.text() for f in flags(_cells(path))] == []


@pytest.mark.parametrize("path", ANSWER_FILES, ids=lambda p: p.name)
def test_no_flag_in_the_answer_files(path):
    assert [f.text() for f in flags([path.read_text()])] == []


def test_no_flag_in_the_whole_submission_written_from_the_banks():
    """The file the CLI tests check (every solution, tests/answers/submission.py) is honest code too."""
    assert [f.text() for f in flags([submission_source()])] == []


@pytest.mark.parametrize("path", sorted(REPO.glob("solutions/*/*.ipynb")), ids=lambda p: p.name)
def test_no_hit_in_the_solution_notebooks(path):
    cells = _cells(path)
    questions = autograder.questions(path.stem)
    assert questions
    for q in questions:
        assert scan_source(cells, q.answer_name, q.forbidden) == [], q.id


def test_no_hit_on_any_right_answer():
    problems = []
    for qid, answer in _right_answers():
        q = autograder.question(qid)
        hits = scan_object(answer, q.answer_name, q.forbidden)
        if hits:
            problems.append((qid, getattr(answer, "__qualname__", answer), [h.where for h in hits]))
    assert problems == []


# one minimal hostile snippet per kind of flag
HOSTILE = {
    "embedded-data": ["WEIGHTS = '" + "A" * 25_000 + "'",
                      "W = [" + ", ".join(str(i % 10) for i in range(2_500)) + "]",
                      "import torch\n" + "# " + "QUJD" * 6_000 + "\nx = 1"],
    "ctypes": ["import ctypes\nlib = ctypes.CDLL(None)", "from cffi import FFI"],
    "getattr": ["import builtins\nname = 'ex' + 'ec'\nrun = getattr(builtins, name)",
                "import sys\nsetattr(sys, 'mod' + 'ules', {})",
                "import gc\nm = gc\nwalk = getattr(m, ''.join(['get_', 'objects']))",
                "import autograder\nsetattr(autograder, 'gr' + 'ade', print)",
                "from operator import attrgetter\nf = attrgetter('nn.MultiheadAttention')"],
    "getattr-forbidden": ["import torch\nM = getattr(torch.ao.nn.quantizable, 'MultiheadAttention')",
                          "import torch.distributions as D\nC = getattr(D, 'Categorical')"],
    "module-dict": ["import torch\nd = vars(torch.nn)", "import torch\nd = torch.nn.__dict__['Softmax']",
                    "b = __builtins__"],
    "exec": ["exec('x = 1')", "y = eval('1 + 1')", "c = compile('1', 'f', 'eval')",
             "import builtins\nbuiltins.exec('1')"],
    "sys.modules": ["import sys\nt = sys.modules['torch']", "from sys import modules", "from sys import *"],
    "gc": ["import gc\nobjects = gc.get_objects()", "import gc\ninside = gc.get_referents(print)",
           "from gc import get_referrers", "from gc import *"],
    "frames": ["import sys\nf = sys._getframe(1)", "import inspect\nf = inspect.currentframe()",
               "try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame.f_globals",
               "def f():\n    pass\ncode = f.__code__", "import sys\nsys.settrace(None)"],
    "autograder": ["import autograder.student.probe", "from autograder.student import probe",
                   "import autograder\nautograder.check = lambda *a: None",
                   "import autograder\nqs = autograder.questions()",
                   "import autograder\nsetattr(autograder, 'grade', print)"],
    "dispatcher": ["import torch\nlib = torch.library.Library('aten', 'IMPL')",
                   "import torch\ntorch._C._dispatch_library('IMPL', 'aten', '')",
                   "import torch\ntorch.ops.load_library('x.so')",
                   "class T:\n    def __torch_function__(self, f, t, a=(), k=None):\n        return 1"],
    "torch-internals": ["import torch\nx = torch._C._VariableFunctions", "import torch\ny = torch._refs.softmax",
                        "from torch._decomp import decomposition_table"],
    "importlib": ["import importlib\nm = importlib.import_module('torch')", "m = __import__('torch')",
                  "import sys\nsys.meta_path.insert(0, None)", "import importlib\nimportlib.reload(importlib)",
                  # a file the notebook wrote is importable only from a folder added to sys.path
                  "import sys\nsys.path.insert(0, '.')", "import sys\nsys.path += ['/tmp']",
                  "from sys import path\npath.append('.')", "import site\nsite.addsitedir('/tmp')"],
    "hidden-code": ["import marshal", "import pickle\nf = pickle.loads(b'')",
                    "import base64\nb = base64.b64decode('')"],
    "signal": ["import signal\nsignal.alarm(0)"],
}


def test_every_kind_has_hostile_snippets():
    assert set(HOSTILE) == set(FLAG_KINDS) - {"scan-failed"}     # scan-failed: the scan's own failure, below


def test_a_scan_that_fails_holds_the_grade_for_review(monkeypatch):
    """Fail closed: when the static scan raises, the notebook is held for an instructor, never
    graded as if nothing had been found (the automatic score is still computed)."""
    from autograder.hosts.driver import Outcome
    from autograder.judging import judge, scan

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(scan, "flags", broken)
    held = scan.flags_or_hold(["x = 1"])
    assert [f.kind for f in held] == ["scan-failed"] and "RecursionError" in held[0].text()
    result = judge.judge_outcome(autograder.question("softmax"), Outcome(), cells=["x = 1"])
    assert [h["flag"] for h in result.held] == ["scan-failed"]
    assert held_reason(result.held) == "held for review: scan-failed, the whole notebook"

    monkeypatch.setattr(judge, "scan_source", broken)       # the forbidden-call scan of one answer
    probe = {"data": {}, "run": 1}
    result = judge.judge_outcome(autograder.question("softmax"), Outcome(probes={"softmax": probe}),
                                 cells=["x = 1"], flags=[])
    assert [h["flag"] for h in result.held] == ["scan-failed"]


@pytest.mark.parametrize("kind, snippet", [(k, s) for k, snippets in HOSTILE.items() for s in snippets],
                         ids=[f"{k}-{i}" for k, snippets in HOSTILE.items() for i, _ in enumerate(snippets)])
def test_each_kind_fires_on_its_hostile_snippet(kind, snippet):
    found = flags(["import numpy as np", snippet])
    assert kind in {f.kind for f in found}, [f.text() for f in found]
    flag = next(f for f in found if f.kind == kind)
    assert flag.cell == 2 and 1 <= flag.line <= snippet.count("\n") + 1
    assert flag.snippet == snippet.splitlines()[flag.line - 1].strip()[:100]   # flags quote 100 characters


HONEST = '''
import sys
import importlib.util
import torch
import torch.nn.functional as F
from torch import nn
import autograder
from autograder import check, grade

if "google.colab" in sys.modules or importlib.util.find_spec("vitref") is None:
    pass


class Heads(nn.Module):
    def __init__(self, n):
        super().__init__()
        for i in range(n):
            setattr(self, f"head{i}", nn.Linear(4, 4))
        self.n = n

    def forward(self, x):
        return torch.stack([getattr(self, f"head{i}")(x) for i in range(self.n)])


model = Heads(2)
model.eval()
out = model(torch.randn(3, 4)).softmax(-1) if hasattr(model, "n") else None
state = {k: v for k, v in model.state_dict().items()}
print(autograder.check("q5", Heads))
print(autograder.grade("q5", Heads))
compiled = torch.compile
'''


def test_honest_lookalikes_are_not_flags():
    """model.eval(), setattr/getattr on self, the set-up cells, the checker's own calls."""
    assert [f.text() for f in flags([HONEST])] == []


# What run-time enforcement decides is not a flag: the forbidden functions are disabled at
# PyTorch's dispatcher whatever name reaches them (a computed getattr on torch, nn, F), hasattr
# reaches nothing, gc.collect() and importlib.metadata read no code, sys.exc_info() is the
# exception being handled (its traceback's frames are a flag: tb_frame). The red team found each
# of these holding honest notebooks (tests/test_honest_idioms.py has them in context).
DECIDED_AT_RUN_TIME = [
    "import torch\nname = 'soft' + 'max'\nf = getattr(torch, name)",
    "import torch.nn.functional as F\nsetattr(F, 'x' + 'y', 1)",
    "import torch\nm = torch.nn\ng = getattr(m, ''.join(['Multihead', 'Attention']))",
    "from torch import nn\nact = getattr(nn, 'GE' + 'LU')()",
    "import torch.nn.functional as F\nok = hasattr(F, 'scaled_dot_product_attention')",
    "import gc\ngc.collect()\ngc.disable()\ngc.enable()",
    "from importlib.metadata import version\nv = version('torch')",
    "import importlib.metadata\nv = importlib.metadata.version('torch')",
    "import sys\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    kind = sys.exc_info()[0]",
    "import sys\nprint(sys.path[0], len(sys.path))",
]


@pytest.mark.parametrize("snippet", DECIDED_AT_RUN_TIME)
def test_what_run_time_decides_is_not_a_flag(snippet):
    assert [f.text() for f in flags(["import numpy as np", snippet])] == []


def test_a_students_own_eval_or_compile_is_not_the_builtin():
    assert flags(["def compile(x):\n    return x\n\ny = compile(3)"]) == []


def test_the_flags_hold_every_question_and_say_where():
    found = flags(["import torch", "import ctypes\n", "x = eval('1')"])
    assert [(f.kind, f.cell, f.line) for f in found] == [("ctypes", 2, 1), ("exec", 3, 1)]
    held = holds(autograder.question("softmax"), found)
    assert [h["flag"] for h in held] == ["ctypes", "exec"]
    assert held[0]["line"] == "cell 2, line 1" and held[0]["snippet"] == "import ctypes"
    assert held_reason(held) == "held for review: ctypes, cell 2, line 1; exec, cell 3, line 1"


def test_a_constant_getattr_is_the_attribute_access_it_spells():
    """getattr(module, "Name") is module.Name: a hit for the questions that forbid it."""
    sources = {
        "attention": "def attention(q, k, v):\n    return getattr(torch.nn, 'MultiheadAttention')",
        "attention_via_alias": "Q = torch.ao.nn.quantizable\ndef attention(q, k, v):\n"
                               "    return getattr(Q, 'MultiheadAttention')(4, 2)",
        "attention_import_alias": "import torch.ao.nn.quantizable as Qz\ndef attention(q, k, v):\n"
                                  "    return getattr(Qz, 'MultiheadAttention', None)",
    }
    for label, source in sources.items():
        hits = scan_source(["import torch", textwrap.dedent(source)], "attention", ("attention",))
        assert [h.key for h in hits] == ["attention"], label
    # a constant getattr on an object that is not a module is nothing
    assert scan_source(["def attention(q, k, v):\n    return getattr(q, 'MultiheadAttention', 1)"],
                       "attention", ("attention",)) == []
