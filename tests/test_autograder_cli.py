"""``python -m autograder check``: the submission runs in a child process, the verdict is made
in the parent, so nothing the submission does to torch, numpy or the checker changes it."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autograder
from autograder.hosts.child_process import check_file, check_submission, format_table
from autograder.judging.model import Result
from autograder.student.cells import SubmissionError
from tests.answers.submission import submission_source, write_submission

pytestmark = pytest.mark.slow   # each test checks a submission in child processes (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def notebook(path: Path, cells: list[str]) -> Path:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                     "source": textwrap.dedent(c).strip("\n")} for i, c in enumerate(cells)]
                   + [{"cell_type": "markdown", "id": "md", "metadata": {}, "source": "# not code"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def by_id(results):
    return {r["id"] if isinstance(r, dict) else r.id: r for r in results}


def test_cli_on_the_solutions_file_passes_everything(tmp_path):
    """The whole submission written from the answer banks (tests/answers/submission.py) carries no
    assignment's marks (tests/test_identify.py): its questions are named."""
    answers = write_submission(tmp_path / "answers.py")
    done = run_cli("check", answers, "--json", *(arg for q in autograder.questions() for arg in ("-q", q.id)))
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["id"] for r in results] == [q.id for q in autograder.questions()]
    for r in results:
        assert set(r) >= {"id", "passed", "score", "max_score", "feedback"}
        assert r["passed"] and r["score"] == r["max_score"] > 0, r


ASSIGNMENTS = sorted({q.chapter for q in autograder.questions()})


def _trains(assignment: str) -> bool:
    return any(q.seconds for q in autograder.questions(assignment))


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.alone) if _trains(a) else a
                                        for a in ASSIGNMENTS])   # alone: the training's wall-clock minute
def test_a_colab_copy_of_each_solution_passes_with_its_own_questions_only(assignment, tmp_path):
    """Colab's "Save a copy in Drive" names the file "Copy of <a>.ipynb": the check reads the
    assignment from the notebook's grade ids and gives every mark, with no other chapter's question
    (chapter 7 gives chapter 4's MultiHeadAttention: by its names it looked like chapter 4 and 5)."""
    copy = tmp_path / "Drive" / "Colab Notebooks" / f"Copy of {assignment}.ipynb"
    copy.parent.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / assignment / f"{assignment}.ipynb", copy)
    done = run_cli("check", copy, "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["id"] for r in results] == [q.id for q in autograder.questions(assignment)]
    for r in results:
        assert r["passed"] and r["score"] == r["max_score"] > 0, r


def test_a_renamed_notebook_and_its_script_export_pass_as_their_assignment(tmp_path):
    from nbconvert import ScriptExporter

    renamed = shutil.copy(ROOT / "solutions" / "07_vit" / "07_vit.ipynb", tmp_path / "my work.ipynb")
    done = run_cli("check", renamed)
    assert done.returncode == 0, done.stderr
    total = next(line for line in done.stdout.splitlines() if line.startswith("total"))
    assert total.split() == ["total", "4/4", "8/8"], done.stdout
    assert "q5" not in done.stdout and "Checked the questions of 07_vit" in done.stdout
    script = tmp_path / "vit export.py"          # jupyter nbconvert --to script: no metadata left
    script.write_text(ScriptExporter().from_filename(str(renamed))[0])
    done = run_cli("check", script, "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["id"] for r in results] == [q.id for q in autograder.questions("07_vit")]
    assert all(r["passed"] and r["score"] == r["max_score"] for r in results), results


NOTEBOOK_CELLS = [
    """
    %matplotlib inline
    !pip install nothing-at-all
    import numpy as np
    import torch
    import torch.nn.functional as F
    import autograder
    """,
    """
    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(seq_len):
            for i in np.arange(int(d/2)):
                denominator = np.power(n, 2*i/d)
                P[k, 2*i] = np.sin(k/denominator)
                P[k, 2*i+1] = np.cos(k/denominator)
        return P
    """,
    "autograder.grade('q1', getPositionEncoding)",
    "raise ValueError('a broken cell does not stop the next ones')",
    """
    def softmax(x, dim=-1):
        return torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)
    """,
    "autograder.grade('softmax', softmax)   # fails in a notebook; a no-op under the checker",
    """
    import sys
    sys.exit("exit does not stop the checker")
    """,
    """
    def scaled_dot_product_attention(q, k, v, mask=None):
        out = F.scaled_dot_product_attention(q, k, v)
        return out, softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5)
    """,
    "import vitref",
    """
    %%bash
    echo "a cell magic is skipped"
    """,
]


def test_cli_on_a_notebook(tmp_path):
    path = notebook(tmp_path / "student.ipynb", NOTEBOOK_CELLS)
    done = run_cli("check", path, "-q", "q1", "-q", "softmax", "-q", "attention", "-q", "causal_mask", "--json")
    assert done.returncode == 0, done.stderr
    results = by_id(json.loads(done.stdout))
    assert list(results) == ["q1", "softmax", "attention", "causal_mask"]
    assert results["q1"]["passed"]
    assert not results["softmax"]["passed"] and results["softmax"]["mistake"] == "no_max_subtraction"
    assert not results["attention"]["passed"] and "Not accepted" in results["attention"]["feedback"]
    assert results["causal_mask"]["feedback"].endswith("no object named causal_mask in the notebook "
                                                       "(a cell raised an error: cell 4 at line 1: ValueError: "
                                                       "a broken cell does not stop the next ones)")
    table = format_table([Result(**{k: v for k, v in r.items()}) for r in results.values()])
    assert "q1                     pass          2/2" in table and "FAIL" in table and "total" in table


TAMPERING = '''
import numpy as np
import torch
from torch import nn
import autograder

# comparisons that always say "equal"
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: True

# a checker that always says "passed"
autograder.check = lambda *a, **k: None
try:
    import autograder.judging.judge
    autograder.judging.judge.judge = lambda *a, **k: None
except ImportError:
    pass

# parameters the checker writes become all zeros
class _Zeros:
    def __init__(self, *a, **k): pass
    def standard_normal(self, shape=None, *a, **k): return np.zeros(shape)
    def random(self, shape=None, *a, **k): return np.zeros(shape)
    def integers(self, low, high=None, size=None, *a, **k): return np.zeros(size, dtype=np.int64)
np.random.default_rng = _Zeros

def softmax(x, dim=-1):                          # wrong: not stable
    return torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)

class Liar(torch.Tensor):
    def __eq__(self, other): return True

def causal_mask(T):                              # wrong and lying
    return torch.ones(T, T).as_subclass(Liar)

class FeedForwardBlock(nn.Sequential):           # wrong: no activation
    def __init__(self, emb_size, expansion=4, drop_p=0.):
        super().__init__(nn.Linear(emb_size, expansion * emb_size), nn.Dropout(drop_p),
                         nn.Linear(expansion * emb_size, emb_size))

_sdpa = torch.nn.functional.scaled_dot_product_attention   # captured before the check starts
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1)
    return _sdpa(q, k, v), weights

def cross_entropy(logits, targets):              # wrong, and reaches for the reference
    import vitref
    return vitref.softmax(logits).mean()
'''


def test_patching_the_checker_in_the_submission_changes_nothing(tmp_path):
    path = tmp_path / "tampering.py"
    path.write_text(TAMPERING)
    results = by_id(check_file(path, ["softmax", "causal_mask", "q7", "attention", "cross_entropy"]))
    assert not any(r.passed for r in results.values()), [r.feedback for r in results.values()]
    # the patched library functions are seen (guard.seal): not checked, whatever the answer
    assert "changed" in results["causal_mask"].feedback and "allclose" in results["causal_mask"].feedback
    # the pool the parameters come from is drawn by the parent and sent as an array: patching
    # numpy's generator in the submission no longer reaches it, so q7 fails on its own mistake
    assert "changed" in results["q7"].feedback          # patched library functions: not checked (guard.seal)
    assert "changed" in results["attention"].feedback     # (its library attention is also a zero on its own)
    assert "changed" in results["cross_entropy"].feedback


def test_time_limit_and_exit_status(tmp_path):
    looping = notebook(tmp_path / "looping.ipynb", [NOTEBOOK_CELLS[0], NOTEBOOK_CELLS[1], "while True:\n    pass"])
    (q1,), outcome = check_submission(looping, ["q1"], timeout=8)
    assert q1.passed, q1.feedback                     # the answer defined before the endless cell still counts
    assert "cell 3: did not finish within" in outcome.cell_errors[-1]

    exiting = tmp_path / "exiting.py"
    exiting.write_text(submission_source() + "\nimport os\nos._exit(3)\n")
    (q1,), outcome = check_submission(exiting, ["q1"])
    assert q1.passed, q1.feedback                     # run again without the statement that ended the process
    assert "exited with status 3" in outcome.reason and "run again without it" in outcome.reason

    exiting_answer = tmp_path / "exiting_answer.py"
    exiting_answer.write_text(submission_source() + "\nimport os\ndef softmax(x, dim=-1):\n    os._exit(3)\n")
    q1, sm = check_file(exiting_answer, ["q1", "softmax"])
    assert q1.passed and not sm.passed and "stopped its process" in sm.feedback


def test_unreadable_submissions(tmp_path):
    done = run_cli("check", tmp_path / "missing.ipynb")
    assert done.returncode == 2 and "cannot read" in done.stderr
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    with pytest.raises(SubmissionError, match="not a valid notebook"):
        check_file(broken, ["q1"])
    other = tmp_path / "answers.txt"
    other.write_text("x = 1")
    with pytest.raises(SubmissionError, match="expected a notebook"):
        check_file(other, ["q1"])
    done = run_cli("check", write_submission(tmp_path / "answers.py"), "-q", "no_such_question")
    assert done.returncode == 2 and "unknown question id" in done.stderr


def test_pytest_plugin(tmp_path):
    answers = tmp_path / "answers.py"
    answers.write_text(submission_source() + "\n\ndef softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "autograder"), "--answers", str(answers),
                           "--question", "q1", "--question", "softmax", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "test_question[softmax]" in done.stdout


PROBE_ONLY = '''
import sys
from autograder.questions import registry
from autograder.student import wire
from autograder.student.probe import probe
from tests.answers.bank import solution_of
for name in ("vitref", "autograder.judging"):
    assert name not in sys.modules, name
probed = 0
for q in registry().values():
    if q.seconds:       # a training question: its images come from the grader (sandboxed batch test)
        continue
    data = probe(q, solution_of(q.id))
    assert not data["fatal"] and all(c["error"] is None for c in data["cases"]), (q.id, data)
    wire.result_frame(q.id, data)
    probed += 1
print("probed", probed)
'''


def test_probes_run_with_the_sandbox_bundle_only(tmp_path):
    """The probes of every question run the course's solutions with only the bundle (no
    vitref, no judges) importable, as in the grading sandbox. (The training question draws
    dataset images only the grader's side can load: its probe runs in the sandbox, with the
    images sent as arrays, in tests/test_grading_batch.py.)"""
    import sysconfig

    from autograder.hosts.sandbox import make_bundle
    bundle = make_bundle(tmp_path / "bundle")
    paths = [str(bundle), *sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}), str(ROOT)]
    code = f"import sys; sys.path[:0] = {paths!r}\n" + PROBE_ONLY
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"probed {sum(not q.seconds for q in autograder.questions())}" in done.stdout


def test_a_question_that_forbids_nothing_is_not_graded_under_another_questions_ban(tmp_path):
    """`patches` and `concept_patch_numbers` forbid nothing; they share the run of
    `embedding_lookup`, whose ban removes torch's embedding. A notebook that computes the
    concept's number with nn.Embedding meets that ban in a cell: the question is run again
    without it (full marks), while the embedding ban still holds for its own question."""
    path = tmp_path / "embedding_everywhere.py"
    path.write_text(submission_source().replace(
        "numbers_per_token = 192",
        "numbers_per_token = int(nn.Embedding(1, 192)(torch.tensor([0])).shape[-1])") + textwrap.dedent('''
        def embed(token_ids, weight):
            return torch.nn.functional.embedding(token_ids, weight)
        '''))
    results, outcome = check_submission(path, ["patches", "embedding_lookup", "concept_patch_numbers"])
    results = by_id(results)
    assert results["concept_patch_numbers"].passed, results["concept_patch_numbers"].feedback
    assert results["patches"].passed
    assert not results["embedding_lookup"].passed
    assert "embedding lookup" in results["embedding_lookup"].feedback


def test_check_says_the_written_question_is_for_the_instructor(tmp_path):
    """`python -m autograder check` on an exercise notebook names its written question (a markdown
    answer cell with nbgrader's grade metadata) as graded by the instructor; a file without one,
    or unreadable, gets no line."""
    from autograder.__main__ import written_note

    exercise = ROOT / "exercises" / "03_attention" / "03_attention.ipynb"
    assert written_note(exercise) == ("+ 1 written question (2 points), graded by your instructor: "
                                      "no check looks at it.")
    plain = tmp_path / "plain.ipynb"
    plain.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x"}]}))
    assert written_note(plain) == "" and written_note(tmp_path / "missing.ipynb") == ""
    (tmp_path / "bad.ipynb").write_text("{ not json")
    assert written_note(tmp_path / "bad.ipynb") == ""
