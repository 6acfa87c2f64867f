"""`python -m autograder grade` on one batch of honest and hostile students.

One batch is graded once (module fixture); each test reads its outcome. Every attacker is
built from the real solutions/exercises notebook of 03_attention (questions softmax 1 pt,
attention 3 pt, attention_head 2 pt, concept_masked_row 1 pt) with one thing changed, and where possible the attack
targets a single question while the other answers stay correct: the attacked question must
score zero, the others full marks, and the honest students in the same batch full marks.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import autograder

import grading_students as S

pytestmark = pytest.mark.slow   # grades a batch of hostile students (make test-fast skips it)

A = "03_attention"
B = "02_positional_encoding"
POINTS = {"softmax": 1.0, "attention": 3.0, "attention_head": 2.0, "concept_masked_row": 1.0}
TIMEOUT = 12


FULL = dict(POINTS)
ZERO = {q: 0.0 for q in POINTS}


def only(qid: str) -> dict[str, float]:
    """Full marks except question ``qid``: the attack targets that question alone."""
    return {**FULL, qid: 0.0}


# student -> (writes that student's notebook under ROOT, the expected score of each question of A)
ATTACKERS: dict[str, tuple[Callable[[Path, str], None], dict[str, float]]] = {}


def attacker(expect: dict[str, float], student: str | None = None):
    """Register ``write(root, student)`` for ``student`` (default: the function's name)."""
    def register(write):
        ATTACKERS[student or write.__name__] = (write, expect)
        return write
    return register


def write_batch(root: Path) -> dict[str, dict[str, float]]:
    """Write the batch under ROOT; return {student: {qid: expected score}} for assignment A."""
    for student, (write, _) in ATTACKERS.items():
        write(root, student)
    return {student: expect for student, (_, expect) in ATTACKERS.items()}


def sol():
    """The course's solution notebook of A (full marks)."""
    return S.load(A)


def with_private_softmax():
    """The solution, its attention calling a private softmax (so a wrong softmax costs only its own point)."""
    return S.replace_definition(sol(), "scaled_dot_product_attention", S.ATTENTION_WITH_PRIVATE_SOFTMAX)


def head_forward(root: Path, student: str, body: str) -> None:
    """The solution with AttentionHead.forward replaced by ``body``."""
    S.write(S.replace_definition(sol(), "AttentionHead", S.head_with_forward(body)), root, student, A)


# ---- honest students, one of them without any test cell

@attacker(FULL)
def honest1(root, student):
    S.write(sol(), root, student, A)
    S.write(S.load(B), root, student, B)


@attacker(FULL)
def honest_no_tests(root, student):
    S.write(S.delete_test_cells(sol()), root, student, A)


# ---- a broken or missing answer

@attacker(ZERO)
def blank(root, student):
    S.write(S.load(A, "exercises"), root, student, A)


@attacker(only("attention_head"))
def crash(root, student):
    """An answer that raises."""
    head_forward(root, student, "        raise RuntimeError('boom')")


@attacker(only("attention_head"))
def hang_answer(root, student):
    """An answer that loops forever (the per-answer alarm stops it)."""
    head_forward(root, student, "        while True:\n            pass")


@attacker(only("attention_head"))
def hang_hard(root, student):
    """An answer that loops forever with SIGALRM ignored: only the hard wall limit stops it."""
    head_forward(root, student, "        import signal\n        signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                "        while True:\n            pass")


@attacker(FULL)
def hang_cell(root, student):
    """A notebook cell (not an answer) that loops forever: answers still graded."""
    S.write(S.insert_cell(sol(), "while True:\n    pass"), root, student, A)


@attacker(FULL)
def exit_cell(root, student):
    """os._exit in a top-level cell (the notebook is run again without that cell)."""
    S.write(S.insert_cell(sol(), "import os\nos._exit(0)"), root, student, A)


@attacker(only("attention_head"))
def exit_answer(root, student):
    """os._exit inside one answer."""
    head_forward(root, student, "        import os\n        os._exit(3)")


@attacker(only("attention_head"))
def sysexit(root, student):
    """sys.exit in a cell and inside one answer."""
    nb = S.insert_cell(sol(), "import sys\nsys.exit(0)")
    S.write(S.replace_definition(nb, "AttentionHead", S.head_with_forward(
        "        raise SystemExit(1)")), root, student, A)


@attacker(FULL)
def kill_all(root, student):
    """Kill every process it can see."""
    S.write(S.insert_cell(sol(), "import os, signal\nos.kill(-1, signal.SIGKILL)"), root, student, A)


# ---- the verdict is computed outside the student's process

PATCH_COMPARE = """
import numpy as np, torch, autograder
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
torch.Tensor.allclose = lambda *a, **k: True
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
torch.testing.assert_close = lambda *a, **k: None
autograder.check = autograder.grade = lambda *a, **k: None
try:
    import autograder.judging.judge as J
    J.compare = lambda *a, **k: None
except ImportError:
    pass

def softmax(x, dim=-1):
    return x * 2
"""


@attacker(ZERO)
def patch_compare(root, student):
    """A wrong softmax, with the comparison functions and the checker patched to say yes: the probes
    find torch's and numpy's functions changed (guard.seal), so no question is checked."""
    nb = S.replace_definition(sol(), "scaled_dot_product_attention", "pass")
    nb = S.replace_definition(nb, "softmax", PATCH_COMPARE + S.ATTENTION_WITH_PRIVATE_SOFTMAX)
    S.write(nb, root, student, A)


LYING_TENSOR = """
class Liar(torch.Tensor):
    def __eq__(self, other): return True
    def allclose(self, *a, **k): return True
    def numpy(self, *a, **k): return np.zeros(self.shape, dtype=np.float32)
    __array_priority__ = 1000

def softmax(x, dim=-1):
    return (x * 0).as_subclass(Liar)
"""


@attacker(only("softmax"))
def lying_tensor(root, student):
    """Softmax returns a tensor subclass whose comparisons always agree."""
    nb = S.replace_definition(sol(), "scaled_dot_product_attention", "pass")
    nb = S.replace_definition(nb, "softmax", LYING_TENSOR + S.ATTENTION_WITH_PRIVATE_SOFTMAX)
    S.write(nb, root, student, A)


@attacker(only("softmax"))
def edited_tests(root, student):
    """Test cells edited to pass, with a wrong softmax."""
    nb = sol()
    for cell in S.graded_cells(nb):
        cell.source = "print('all tests passed')"
    wrong = "def softmax(x, dim=-1):\n    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n"
    nb = S.replace_definition(nb, "scaled_dot_product_attention", S.ATTENTION_WITH_PRIVATE_SOFTMAX)
    nb = S.replace_definition(nb, "softmax", wrong)
    S.write(nb, root, student, A)


@attacker(only("softmax"))
def lookup_table(root, student):
    """Softmax answered from a table of outputs precomputed for the checks' public inputs."""
    S.write(S.replace_definition(with_private_softmax(), "softmax", S.lookup_softmax_source()), root, student, A)


@attacker(only("softmax"))
def public_source_swap(root, student):
    """The secret inputs: the student's process swaps the source back to the public inputs,
    then answers from a table precomputed for them."""
    nb = S.replace_definition(with_private_softmax(), "softmax", "import sys\n"
                              "_I = sys.modules['autograder.questions.inputs']\n"
                              "_I._SOURCE = _I.PublicSource()\n" + S.lookup_softmax_source())
    S.write(nb, root, student, A)


# ---- nothing outside the sandbox can be read or written

def steal_source(root: Path) -> str:
    """A cell that reads the solutions (absolute and relative paths) or another student's
    notebook, searching the whole file system last, and runs its answer cells."""
    targets = [str(S.REPO / "solutions" / A / f"{A}.ipynb"),
               f"../../../solutions/{A}/{A}.ipynb", f"../../solutions/{A}/{A}.ipynb",
               f"solutions/{A}/{A}.ipynb",
               str(root / "submitted" / "honest1" / A / f"{A}.ipynb"),
               f"../honest1/{A}/{A}.ipynb", f"../../honest1/{A}/{A}.ipynb"]
    return f"""
import json, os
stolen = None
for path in {targets!r}:
    try:
        with open(path) as fh:
            stolen = json.load(fh)
        break
    except OSError:
        pass
if stolen is None:
    for top, dirs, files in os.walk("/"):
        if "{A}.ipynb" in files and "exercises" not in top:
            try:
                stolen = json.load(open(os.path.join(top, "{A}.ipynb")))
                break
            except OSError:
                pass
if stolen is not None:
    for cell in stolen["cells"]:
        if cell["cell_type"] == "code" and "grade(" not in "".join(cell["source"]):
            exec("".join(cell["source"]), globals())
"""


@attacker(ZERO)
def read_solutions(root, student):
    """The blank exercise with the stealing cell first."""
    S.write(S.insert_cell(S.load(A, "exercises"), steal_source(root)), root, student, A)


@attacker(ZERO)
def read_solutions_late(root, student):
    """... and the same code appended at the end, after the blank answers."""
    nb = S.load(A, "exercises")
    nb.cells.append(S.nbformat.v4.new_code_cell(steal_source(root)))
    S.write(nb, root, student, A)


@attacker(ZERO)
def vandal(root, student):
    """Overwrite the grades, the gradebook and the grader's state from the notebook."""
    cell = f"""
import os
root = {str(root)!r}
for rel in ["grades.csv", "gradebook.db", ".autograder/results/vandal/{A}.json",
            "autograder-feedback/vandal/{A}/feedback.html", "../grades.csv", "grades.csv"]:
    for base in (root, ".", ".."):
        try:
            os.makedirs(os.path.dirname(os.path.join(base, rel)) or ".", exist_ok=True)
            with open(os.path.join(base, rel), "w") as fh:
                fh.write("student,assignment,question,score,max_score,reason\\nvandal,{A},softmax,1,1,\\n")
        except OSError:
            pass
"""
    S.write(S.insert_cell(S.load(A, "exercises"), cell), root, student, A)


# ---- resources are bounded

@attacker(only("attention_head"))
def memory_bomb(root, student):
    """One answer allocates without bound; a top-level cell tries 64 GB at once."""
    bomb = "        chunks = []\n        while True:\n            chunks.append(bytearray(64 << 20))"
    nb = S.insert_cell(sol(), "import numpy as np\nhuge = np.ones(2 ** 33)")
    S.write(S.replace_definition(nb, "AttentionHead", S.head_with_forward(bomb)), root, student, A)


@attacker(FULL)
def fork_bomb(root, student):
    """A fork bomb in a cell."""
    forks = ("import os, time\nfor _ in range(10000):\n    if os.fork() == 0:\n"
             "        time.sleep(60)\n        os._exit(0)")
    S.write(S.insert_cell(sol(), forks), root, student, A)


@attacker(ZERO)
def invalid_json(root, student):
    """Not a notebook at all."""
    S.write(b'{"cells": [ this is not json', root, student, A)


# ---- no answer from the course's own code

@attacker(ZERO)
def vitref_import(root, student):
    """Answers taken from the reference package, in place of the answer cells."""
    nb = S.load(A, "exercises")
    nb = S.replace_definition(nb, "softmax", "from vitref import softmax")
    nb = S.replace_definition(nb, "scaled_dot_product_attention",
                              f"import sys\nsys.path.insert(0, {str(S.REPO)!r})\n"
                              "import vitref\nscaled_dot_product_attention = vitref.scaled_dot_product_attention")
    nb = S.replace_definition(nb, "AttentionHead", "from vitref.attention import AttentionHead")
    S.write(nb, root, student, A)


@attacker(ZERO)
def vitref_late(root, student):
    """... and at the end of the blank exercise."""
    nb = S.load(A, "exercises")
    nb.cells.append(S.nbformat.v4.new_code_cell(
        f"import sys\nsys.path.insert(0, {str(S.REPO)!r})\n"
        "from vitref import softmax, scaled_dot_product_attention\n"
        "from vitref.attention import AttentionHead"))
    S.write(nb, root, student, A)


CATALOGUE_BUILDER = """
import sys
def scaled_dot_product_attention(q, k, v, mask=None):
    for name in list(sys.modules):
        if "catalogue" in name or "judging" in name:
            return sys.modules[name]._attn(fill=-1e9)(None)(q, k, v, mask)
    import importlib
    module = importlib.import_module("auto" + "grader.judging.catalogue.ch03_attention")
    return module._attn(fill=-1e9)(None)(q, k, v, mask)
"""


@attacker({**only("attention"), "attention_head": 0.0})      # the head calls it
def catalogue_builder(root, student):
    """Answers built from the grader's own code: the catalogue is not in the sandbox."""
    S.write(S.replace_definition(sol(), "scaled_dot_product_attention", CATALOGUE_BUILDER), root, student, A)


# ---- forbidden functions hidden from the static scan, the profiler switched off

HIDDEN_SOFTMAX = {
    "computed_softmax": "    import sys, torch\n    sys.setprofile(None)\n"
                        "    return getattr(torch, 'soft' + 'max')(x, dim)",
    "aten_softmax": "    import torch\n    return torch.ops.aten._softmax.default(x, dim, False)",
    "exec_softmax": "    import base64\n    ns = {'x': x, 'dim': dim}\n"
                    "    exec(base64.b64decode("
                    "'aW1wb3J0IHRvcmNoOyBvdXQgPSB0b3JjaC5zb2Z0bWF4KHgsIGRpbSk=').decode(), ns)\n"
                    "    return ns['out']",
    "refs_softmax": "    import torch._refs\n    return torch._refs.softmax(x, dim)",
    "log_softmax_exp": "    import torch\n    return getattr(x, 'log_' + 'softmax')(dim).exp()",
}


def hidden_softmax(root, student):
    """The softmax body HIDDEN_SOFTMAX[student]."""
    S.write(S.replace_definition(with_private_softmax(), "softmax",
                                 f"def softmax(x, dim=-1):\n{HIDDEN_SOFTMAX[student]}\n"), root, student, A)


for _student in HIDDEN_SOFTMAX:
    attacker(only("softmax"), _student)(hidden_softmax)


PRECOMPUTED_IN_CELL = """
import sys, torch
_CACHE = {}
try:
    _inputs = sys.modules["autograder.questions.inputs"].current()
    for key, array in getattr(_inputs, "arrays", {}).items():
        t = torch.from_numpy(array)
        for dim in range(-t.dim(), t.dim()):
            _CACHE[(key, dim)] = getattr(torch, "soft" + "max")(t.float(), dim)
except Exception:
    pass

def softmax(x, dim=-1):
    for (key, d), out in _CACHE.items():
        if d == dim and out.shape == x.shape:
            return out
    return x
"""


@attacker(only("softmax"))
def precomputed_in_cell(root, student):
    """The library result computed in a cell (before the check), then served by the answer."""
    S.write(S.replace_definition(with_private_softmax(), "softmax", PRECOMPUTED_IN_CELL), root, student, A)


@attacker(only("attention_head"))
def hidden_mha(root, student):
    """Attention head through PyTorch's own module, by a computed name."""
    head_forward(root, student,
                 "        import torch\n"
                 "        mha = getattr(torch.nn, 'Multihead' + 'Attention')(x.shape[-1], 1, batch_first=True)\n"
                 "        out, w = mha(x, x, x)\n        return out[..., :self.query.out_features], w")


@attacker(FULL)
def sleep_no_alarm(root, student):
    """The time budget is per submission: a cell that ignores the alarm and sleeps."""
    S.write(S.insert_cell(sol(), "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                 "time.sleep(1000)"), root, student, A)


# The threat model, one group per kind of attack (each student above belongs to one).
THREATS = {
    "honest work is graded in full": ["honest1", "honest_no_tests"],
    "a broken or missing answer costs only its own points": [
        "blank", "crash", "hang_answer", "hang_hard", "hang_cell", "exit_cell", "exit_answer", "sysexit",
        "invalid_json", "sleep_no_alarm"],
    "the verdict is computed outside the student's process": [
        "patch_compare", "lying_tensor", "edited_tests", "lookup_table", "public_source_swap"],
    "no answer from the course's own code": ["vitref_import", "vitref_late", "catalogue_builder"],
    "forbidden functions cannot be used, however hidden": [
        "computed_softmax", "aten_softmax", "exec_softmax", "refs_softmax", "log_softmax_exp",
        "precomputed_in_cell", "hidden_mha"],
    "nothing outside the sandbox can be read, written or stopped": [
        "read_solutions", "read_solutions_late", "vandal", "kill_all"],
    "resources are bounded": ["memory_bomb", "fork_bomb"],
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading") / "course"
    root.mkdir()
    expect = write_batch(root)
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2",
           "--timeout", str(TIMEOUT), "--memory", "768", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=S.REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, expect, proc.stdout + proc.stderr


def test_every_student_is_in_the_threat_model(batch):
    root, expect, log = batch
    listed = [s for students in THREATS.values() for s in students]
    assert sorted(listed) == sorted(expect)


def test_every_row_present(batch):
    root, expect, log = batch
    rows = S.read_csv(root)
    for student in expect:
        for qid in POINTS:
            assert (student, A, qid) in rows, (student, qid, log)
    second = [q.id for q in autograder.questions(B)]       # honest1's other assignment: all its questions
    for qid in second:
        assert ("honest1", B, qid) in rows
    assert len(rows) == len(expect) * len(POINTS) + len(second)


@pytest.mark.parametrize("threat, student", [(t, s) for t, students in THREATS.items() for s in students],
                         ids=[f"{t.split()[0]}...-{s}" for t, students in THREATS.items() for s in students])
def test_scores(batch, threat, student):
    root, expect, log = batch
    rows = S.read_csv(root)
    got = {qid: rows[(student, A, qid)][0] for qid in POINTS}
    reasons = {qid: rows[(student, A, qid)][2] for qid in POINTS}
    assert got == expect[student], (reasons, log[-3000:])
    for qid in POINTS:
        assert rows[(student, A, qid)][1] == POINTS[qid]
        if got[qid] == 0:
            assert reasons[qid], f"{student}/{qid}: a zero needs a reason"


def test_reasons_say_what_happened(batch):
    root, _, _ = batch
    rows = S.read_csv(root)
    assert "not valid" in rows[("invalid_json", A, "softmax")][2].lower() or \
        "json" in rows[("invalid_json", A, "softmax")][2].lower()
    assert "signal handler" in rows[("hang_hard", A, "attention_head")][2]   # SIG_IGN on SIGALRM is refused
    assert "did not finish" in rows[("hang_answer", A, "attention_head")][2]
    assert "vitref" in rows[("vitref_import", A, "softmax")][2]
    assert "subclass" in rows[("lying_tensor", A, "softmax")][2]
    assert "MemoryError" in rows[("memory_bomb", A, "attention_head")][2]


def test_honest_student_other_assignment(batch):
    root, _, log = batch
    rows = S.read_csv(root)
    assert rows[("honest1", B, "q1")][:2] == (2.0, 2.0), log[-2000:]


def test_gradebook_intact_and_exportable(batch, tmp_path):
    """nbgrader's own API and `nbgrader export` read the scores the CSV has."""
    from nbgrader.api import Gradebook
    root, expect, _ = batch
    rows = S.read_csv(root)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert {s.id for s in gb.students} == set(expect) | {"honest1"}
        for student in expect:
            submission = gb.find_submission(A, student)
            assert submission.score == pytest.approx(sum(rows[(student, A, q)][0] for q in POINTS))
            # the written question (graded by hand in formgrader) counts in the maximum, not in the score
            assert submission.max_score == pytest.approx(sum(POINTS.values()) + S.written_points(A))
    out = tmp_path / "export.csv"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "export", "--db",
                           f"sqlite:///{root / 'gradebook.db'}", "--to", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import csv
    exported = {(r["student_id"], r["assignment"]): float(r["score"])
                for r in csv.DictReader(open(out, newline=""))}
    assert exported[("honest1", A)] == 7.0
    assert exported[("vandal", A)] == 0.0
    assert exported[("crash", A)] == 5.0


def test_attackers_could_not_write_outside_the_sandbox(batch):
    root, _, _ = batch
    text = (root / "grades.csv").read_text()
    assert text.startswith("student,assignment,question,score,max_score,reason\n")
    assert "vandal,03_attention,softmax,1,1" not in text
    assert not (root / "autograder-feedback" / "vandal" / A / "feedback.html").read_text().startswith("student,")
    assert (root / "gradebook.db").read_bytes()[:16] == b"SQLite format 3\x00"


def test_feedback_files(batch):
    root, _, _ = batch
    page = (root / "autograder-feedback" / "crash" / A / "feedback.html").read_text()
    assert "attention_head" in page and "not passed" in page and "RuntimeError" in page
    page = (root / "autograder-feedback" / "honest1" / A / "feedback.html").read_text()
    assert page.count(">passed<") == len(POINTS)
    # hidden test inputs of the notebook's test cells never appear in feedback
    assert "1e4" not in page and "perm" not in page


def test_lookup_table_passes_with_public_inputs():
    """The lookup-table answer is a real threat: with the checks' public inputs (what
    check() uses) it passes; the batch above, with inputs drawn for the run, rejects it."""
    import numpy as np
    import torch

    import autograder
    namespace = {"torch": torch, "np": np}
    exec(S.lookup_softmax_source(), namespace)  # noqa: S102 - the test's own attack source (grading_students)
    assert autograder.check("softmax", namespace["softmax"]).passed
