"""The similarity report (autograder/batch/similarity.py, similarity_report.py): what a copier
changes is normalised away, short answers and the notebook's skeleton never make a pair, a
fingerprint many students share proposes none, the report escapes the students' text, the CSV is
written; and, slow, one class through `python -m autograder grade`."""
from __future__ import annotations

import csv
import html
import json
import math
import os
import random
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from autograder.batch import similarity as S
from autograder.batch import similarity_report as R

ANSWER = '''
def attention(q, k, v, mask=None):
    """Scaled dot-product attention."""
    # scores of every query against every key
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)   # hide the masked keys
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v
    return out, weights
'''

# the same answer: locals renamed, comments and docstring gone, reformatted (another indentation,
# other line breaks, redundant parentheses, a trailing comma, other quotes and number spellings)
DISGUISED = '''
def attention(q, k, v, mask=None):
  s = (q @ k.transpose(-2,
                       -1,)) / q.shape[-1] ** 0.5

  if mask is not None:
    s = s.masked_fill(mask == 0, -1000000000.0)
  w = torch.softmax(s, dim=-1);  o = (w @ v)
  return (o, w)
'''


def texts(source: str, keep=frozenset({"torch"})) -> list[str]:
    return [t.text for t in S.normalise(source, keep)]


def long_answer(rng: random.Random, name: str = "answer") -> str:
    """A long answer of its own: 12 lines of calls to methods from a vocabulary no other answer
    draws the same (attribute names are kept: two such answers share no run of tokens)."""
    lines = [f"def {name}(x, y):"]
    for i in range(12):
        a, b = (f"m{rng.randrange(10**9)}" for _ in range(2))
        lines.append(f"    t{i} = x.{a}(dim={rng.randrange(-3, 3)}) * y.{b}({rng.randrange(9)}) + {rng.randrange(99)}")
    lines.append(f"    return y.m{rng.randrange(10**9)}(" + " + ".join(f"t{i}" for i in range(12)) + ")")
    return "\n".join(lines) + "\n"


def submission(student: str, cells: list[str], skeleton: S.Skeleton) -> S.Submission:
    return S.fingerprint_submission(student, [(f"cell {i + 1}", c) for i, c in enumerate(cells)], skeleton)


def pairs_of(class_: dict[str, list[str]], skeleton: S.Skeleton = S.Skeleton()) -> set[tuple[str, str]]:
    found = S.similar_pairs("a", [submission(s, cells, skeleton) for s, cells in class_.items()], skeleton.keep)
    return {(p.student_a, p.student_b) for p in found}


# ---------------------------------------------------------------- normalisation

def test_renaming_comments_docstrings_and_formatting_change_no_token():
    assert texts(ANSWER) == texts(DISGUISED)
    assert "V" in texts(ANSWER) and "softmax" in texts(ANSWER) and "transpose" in texts(ANSWER)
    # what a copier does not change is kept: another function, another operator is another text
    assert texts(ANSWER.replace("torch.softmax", "torch.sigmoid")) != texts(ANSWER)
    assert texts(ANSWER.replace("/ q.shape", "* q.shape")) != texts(ANSWER)


def test_the_soft_keywords_are_names_a_copier_can_rename():
    # ``_``, ``match`` and ``case`` are keywords only inside a match statement: as names they are the student's
    loop = "pairs = [head(x) for head in heads]\nout = torch.cat([o for o, {} in pairs])\n"
    assert texts(loop.format("_")) == texts(loop.format("w")) == texts(loop.format("match"))


def test_the_attributes_a_student_names_are_names_a_copier_can_rename():
    # an editor's "rename symbol" on self.w_q changes every use; the skeleton's attributes and
    # those only read (torch's .softmax, .training) stay as written
    layer = ("class Head(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
             "        self.w_q = nn.Linear(d, d)\n        self.calls = 0\n    def forward(self, x):\n"
             "        if self.training:\n            self.calls += 1\n"
             "        return self.w_q(x).softmax(dim=-1) + self.cls_token\n")
    renamed = layer.replace("w_q", "query_projection").replace("calls", "n")
    skeleton = S.Skeleton.of(["class Head(nn.Module):\n    def forward(self, x):\n        return self.cls_token\n"])
    tokens = [t.text for t in S.normalise(layer, skeleton.keep, skeleton.attributes)]
    assert tokens == [t.text for t in S.normalise(renamed, skeleton.keep, skeleton.attributes)]
    assert {"softmax", "training", "cls_token", "Linear"} <= set(tokens) and not {"w_q", "calls"} & set(tokens)
    # an attribute the cell only reads is not the student's to name: another one is another text
    assert texts(layer.replace("cls_token", "cls")) != texts(layer)
    # nor does assigning self.softmax make the tensor's .softmax a name: a line added is a line changed
    assert texts(layer + "        self.softmax = None\n")[:len(texts(layer))] == texts(layer)


def test_names_the_skeleton_defines_are_kept_and_the_students_are_not():
    source = "out = rearrange(x, 'b n d -> b d n')\nmine = helper(x)\n"
    tokens = texts(source, keep=S.defined_names(["from einops import rearrange\n"]))
    assert tokens[:3] == ["V", "=", "rearrange"] and "helper" not in tokens
    assert "S'b n d -> b d n'" in tokens                     # a string by its content


def test_a_cell_the_tokenizer_cannot_finish_is_read_on_and_never_raises():
    broken = [ANSWER + "\nx = '''never closed\n", ANSWER + "\n  bad = (indent\n", "\x00\ud800" * 50,
              "%matplotlib inline\n!pip install x\n" + ANSWER, "(" * 5000, "'" * 10_000,
              "x = f'{a!r:>{width}}'\n" * 100]
    for source in broken:
        cell = S.fingerprint_cell("q", source, S.Skeleton())
        assert isinstance(cell.own_tokens, int)
    # the answer before the unfinished string still gives its fingerprints
    assert texts(broken[0])[:len(texts(ANSWER))] == texts(ANSWER)
    # the magics are comments: the answer's tokens only
    assert texts(broken[3]) == texts(ANSWER)


def test_the_work_per_cell_and_per_submission_is_bounded():
    huge = "x = y + 1\n" * 100_000                             # 1,000,000 characters
    cell = S.fingerprint_cell("q", huge, S.Skeleton())
    assert cell.positions.max() < S.MAX_CELL_CHARS
    many = submission("s", [huge] * 50, S.Skeleton())
    assert sum(len(c.source) for c in many.cells if c.source) <= S.MAX_SUBMISSION_CHARS


def test_winnowing_finds_every_shared_run_of_k_plus_window_minus_one_tokens():
    rng = random.Random(0)
    for _ in range(50):
        shared = [S.Token(f"t{rng.randrange(30)}", 0, 0) for _ in range(S.K + S.WINDOW - 1)]
        a = [S.Token(f"a{rng.randrange(30)}", 0, 0) for _ in range(rng.randrange(20))] + shared
        b = shared + [S.Token(f"b{rng.randrange(30)}", 0, 0) for _ in range(rng.randrange(20))]
        ha, hb = S.kgram_hashes(a), S.kgram_hashes(b)
        assert set(ha[S.winnow(ha)].tolist()) & set(hb[S.winnow(hb)].tolist())


# ---------------------------------------------------------------- pairs

def _class(size: int, seed: int = 0) -> dict[str, list[str]]:
    rng = random.Random(seed)
    return {f"s{i:02d}": [long_answer(rng)] for i in range(size)}


def test_a_disguised_copy_of_a_long_answer_pairs_and_independent_answers_do_not():
    class_ = _class(10)
    assert pairs_of(class_) == set()                         # ten answers of their own: no pair
    rng = random.Random(1)
    origin = long_answer(rng)
    copy = re.sub(r"\bt(\d+)\b", r"part_\1", origin).replace("    ", "  ").replace(" + ", "+")  # renamed, respaced
    assert texts(origin) == texts(copy)
    assert pairs_of({**class_, "origin": [origin], "copier": [copy]}) == {("copier", "origin")}


def test_a_copy_with_lines_of_its_own_pairs_up_to_the_threshold():
    """The default threshold (0.9) holds a copy of a 13-line answer with one line changed; with
    two lines changed it scores about 0.84, found only with a lower threshold (0.8)."""
    assert S.DEFAULT_THRESHOLD == 0.9
    rng = random.Random(5)
    class_ = _class(10)
    origin = long_answer(rng)
    lines = origin.split("\n")
    one = "\n".join(lines[:3] + [lines[3].replace("* y", "/ y")] + lines[4:])
    two = "\n".join(lines[:3] + [lines[3].replace("* y", "/ y")] + lines[4:8]
                     + [lines[8].replace("* y", "/ y")] + lines[9:])
    for copy, default, lower in [(one, True, True), (two, False, True)]:
        copied = {**class_, "origin": [origin], "copier": [re.sub(r"\bt(\d+)\b", r"part_\1", copy)]}
        subs = [submission(s, cells, S.Skeleton()) for s, cells in copied.items()]
        assert bool(S.similar_pairs("a", subs)) is default
        assert bool(S.similar_pairs("a", subs, threshold=0.8)) is lower


def test_short_answers_alone_never_pair_even_identical():
    one_liner = "def softmax(x, dim=-1):\n    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n"
    rng = random.Random(2)
    class_ = {f"s{i}": [one_liner, one_liner.replace("x", "z"), long_answer(rng)] for i in range(2)}
    short = S.fingerprint_cell("q", one_liner, S.Skeleton())
    assert not short.long and len(short.hashes) > 0
    assert pairs_of(class_) == set()
    assert pairs_of({s: cells[:2] for s, cells in class_.items()}) == set()   # nothing long at all
    # the same two students with a long answer in common do pair
    shared = long_answer(rng)
    assert pairs_of({s: cells[:2] + [shared] for s, cells in class_.items()}) == {("s0", "s1")}


def test_the_skeleton_is_never_evidence():
    rng = random.Random(3)
    given = long_answer(rng, name="given_helper")             # a long given cell both students keep
    class_ = {f"s{i}": [given, "def mine():\n    return 1\n"] for i in range(2)}
    assert pairs_of(class_, S.Skeleton.of([given])) == set()
    assert pairs_of(class_) == {("s0", "s1")}                 # without the skeleton, a pair


def test_an_answer_many_students_share_proposes_no_pair():
    """Thirty students with the same long answer: the class's way to write it, not a copy; and
    no pair is even proposed (the index never enumerates the pairs of a popular fingerprint)."""
    rng = random.Random(4)
    popular = long_answer(rng)
    class_ = {f"s{i:02d}": [popular] for i in range(30)}
    submissions = [submission(s, cells, S.Skeleton()) for s, cells in class_.items()]
    prints = [S._long_fingerprints(s) for s in submissions]
    table = S.Frequencies(prints)
    assert S.candidates(prints, table.rare(S.rare_cap(len(prints)))) == {}
    assert pairs_of(class_) == set()
    assert len(pairs_of(dict(list(class_.items())[:2]))) == 1  # the same answer in two notebooks: a pair


def test_a_pair_shows_only_the_cells_it_shares_with_few_others():
    """A copied answer and an answer the whole class wrote alike: the pair is the copy, and only the
    copied cell is shown as its evidence (the common one is how the class writes it)."""
    rng = random.Random(5)
    popular = long_answer(rng, name="common")
    class_ = {f"s{i}": [long_answer(rng), popular] for i in range(8)}
    class_["copier"] = [class_["s0"][0], popular]
    found = S.similar_pairs("a", [submission(s, cells, S.Skeleton()) for s, cells in class_.items()])
    assert [(p.student_a, p.student_b) for p in found] == [("copier", "s0")]
    assert found[0].questions == ["cell 1"], found[0].questions


def test_the_proposals_grow_linearly_with_the_class():
    """Every student shares a long answer with a few others (groups of 3): the proposed pairs are
    those of the groups, never all pairs."""
    rng = random.Random(5)
    for size in (30, 300):
        answers = [long_answer(rng) for _ in range(size // 3)]
        prints = [S._long_fingerprints(submission(str(i), [answers[i // 3]], S.Skeleton())) for i in range(size)]
        proposed = S.candidates(prints, S.Frequencies(prints).rare(S.rare_cap(size)))
        assert len(proposed) == size                          # 3 pairs per group of 3


# ---------------------------------------------------------------- the report and the CSV

HOSTILE_NAME = "<script>alert(1)</script>\u202e"
HOSTILE_CODE = "# </pre><script>alert(2)</script>\n# \x1b[31m\u202e\n"


def _hostile_pairs() -> R.ClassSimilarity:
    rng = random.Random(6)
    shared = HOSTILE_CODE + long_answer(rng)
    subs = [submission(HOSTILE_NAME, [shared], S.Skeleton()), submission("=HYPERLINK(\"x\")", [shared], S.Skeleton()),
            submission("bob", [long_answer(rng)], S.Skeleton())]
    return R.ClassSimilarity(0.8, S.similar_pairs("03_<b>", subs), {"03_<b>": 3})


def test_the_section_escapes_every_text_a_student_controls():
    found = _hostile_pairs()
    assert len(found.pairs) == 1 and found.pairs[0].matches
    section = R.html_section(found)
    assert section.startswith('<h2 id="similar-submissions">Similar submissions</h2>')
    assert "<script>" not in section and "<b>" not in section and "\u202e" not in section and "\x1b" not in section
    assert "&lt;script&gt;alert(1)" in section and "&lt;/pre&gt;&lt;script&gt;alert(2)" in section
    assert "<mark>" in section                                # the matched code, highlighted
    # the highlighted code is the source, escaped: unescaped it reads as the student wrote it
    code = re.findall(r"<pre>(.*?)</pre>", section, flags=re.DOTALL)[0]
    shown = html.unescape(re.sub(r"</?mark>", "", code))
    assert shown.startswith("# </pre><script>alert(2)</script>\n# \\x1b[31m\\u202e\ndef answer(x, y):\n"), shown[:80]


def test_the_csv_has_one_row_per_pair_with_formulas_neutralised(tmp_path):
    found = _hostile_pairs()
    path = R.write_csv(tmp_path, found)
    assert path == tmp_path / "similarity.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:5] == ["assignment", "student_a", "student_b", "score", "shared_weight"]
    assert rows[0][5] == "matched_questions" and len(rows) == 2
    assignment, a, b, score, _, questions, identical, bits = rows[1]
    assert assignment == "03_<b>" and {a, b} == {"'=HYPERLINK(\"x\")", HOSTILE_NAME}
    assert float(score) == pytest.approx(1.0) and questions == "cell 1" and identical == "" and bits == "0"


def test_the_threshold_option_takes_a_number_in_0_1():
    assert R.threshold_argument("0.5") == 0.5
    for bad in ("0", "1.5", "-1", "abc", "nan"):
        with pytest.raises(Exception, match="expected a number in"):
            R.threshold_argument(bad)


def test_cells_are_labelled_by_the_question_they_answer():
    notebook = {"cells": [
        {"cell_type": "code", "source": "import torch", "metadata": {}},
        {"cell_type": "code", "source": ["x = 1"], "metadata": {"nbgrader": {"grade_id": "softmax_answer"}}},
        {"cell_type": "code", "source": "def softmax(x):\n    pass\n", "metadata": {}},
        {"cell_type": "markdown", "source": "text"}, {"cell_type": "code", "source": 5}, "not a cell"]}

    class Q:
        id, answer_name = "softmax", "softmax"
    cells = R.labelled_cells(json.dumps(notebook).encode(), [Q()])
    assert cells == [("cell 1", "import torch"), ("softmax", "x = 1"), ("softmax", "def softmax(x):\n    pass\n"),
                     ("cell 4", "")]
    assert R.labelled_cells(b"{not json", [Q()]) == [] and R.labelled_cells(b"[1]", [Q()]) == []


def test_the_skeleton_is_the_source_without_its_solutions_and_the_released_notebook(tmp_path):
    for folder, source in (("source", "def f(x):\n    ### BEGIN SOLUTION\n    return secret(x)\n"
                                      "    ### END SOLUTION\n"), ("release", "given = 1\n")):
        (tmp_path / folder / "a").mkdir(parents=True)
        (tmp_path / folder / "a" / "a.ipynb").write_text(json.dumps(
            {"cells": [{"cell_type": "code", "source": source, "metadata": {}}]}))
    sources = R.skeleton_sources(tmp_path / "source", "a")
    assert sources == ["def f(x):\n    ", "given = 1\n"]


# ---------------------------------------------------------------- through `python -m autograder grade`

@pytest.mark.slow
def test_a_class_graded_by_the_command_reports_the_copy_and_not_the_independent_pair(tmp_path):
    """02_positional_encoding: one student's own answer (vectorised) and a disguised copy of it,
    two independent right answers (torch, outer product) and the solution; every one full marks,
    the copy pair in "Similar submissions" and similarity.csv, no other pair."""
    import grading_students as G
    from answers import ch02_positional_encoding as bank

    from bench.similarity import _top_level_source, disguised

    a = "02_positional_encoding"
    root = tmp_path / "course"
    own = _top_level_source(bank.pe_vectorised, "getPositionEncoding")
    answers = {"origin": own, "copier": disguised(own, random.Random(0)),
               "independent1": _top_level_source(bank.pe_torch_float64, "getPositionEncoding"),
               "independent2": _top_level_source(bank.pe_outer, "getPositionEncoding")}
    assert texts(answers["copier"]) == texts(own) and answers["copier"] != own
    for student, source in answers.items():
        G.write(G.replace_definition(G.load(a), "getPositionEncoding", source), root, student, a)
    G.write(G.load(a), root, "solution", a)
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="similarity-test")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--no-progress",
                           "--timeout", "20"], cwd=G.REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "similar submissions: 1 pair(s)" in proc.stdout, proc.stdout
    rows = G.read_csv(root)
    assert all(rows[(s, a, "q1")][:2] == (2.0, 2.0) for s in [*answers, "solution"]), rows
    page = (root / "report.html").read_text(encoding="utf-8")
    section = page.split("<h2 id=\"similar-submissions\">Similar submissions</h2>")[1]
    summary = section.split("</table>")[0]
    assert re.search(r"<td>copier</td><td>origin</td><td class=\"n\">1\.00</td><td>q1</td>", summary), summary
    assert "independent1" not in section and "independent2" not in section and "solution" not in section
    with open(root / "similarity.csv", newline="", encoding="utf-8") as fh:
        assert [row[:3] for row in csv.reader(fh)][1:] == [[a, "copier", "origin"]]
    off = subprocess.run([sys.executable, "-m", "autograder", "report", str(root), "--no-similarity"],
                         cwd=G.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert off.returncode == 0, off.stderr
    assert "Not checked" in (root / "report.html").read_text() and not (root / "similarity.csv").exists()


def test_a_hostile_class_costs_bounded_time():
    """The sources are read, never run: a submission of huge cells of nested brackets and
    unfinished strings is fingerprinted within the caps (no test of seconds: the caps)."""
    skeleton = S.Skeleton.of([textwrap.dedent(ANSWER)])
    cells = [("[" * 19_000) + "'", "'''" + "x" * 30_000, ANSWER * 200] * 200
    sub = S.fingerprint_submission("hostile", [(f"cell {i}", c) for i, c in enumerate(cells)], skeleton)
    assert len(sub.cells) <= S.MAX_CELLS
    assert sum(len(c.hashes) for c in sub.cells) < np.iinfo(np.int32).max


# ---------------------------------------------------------------- identical answers, jointly

def short_answer(question: int, variant: int, local: str = "y") -> str:
    """A short answer (well under MIN_TOKENS tokens): one of a few ways to write question ``question``."""
    return f"def f{question}(x):\n    {local} = x.m{question}_{variant}(dim=-1)\n    return {local}\n"


def _short_class(students: int, questions: int, variants: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    return {f"s{i:02d}": [short_answer(q, rng.randrange(variants)) for q in range(questions)] for i in range(students)}


def _found(class_: dict[str, list[str]]) -> list[S.Pair]:
    return S.similar_pairs("a", [submission(s, cells, S.Skeleton()) for s, cells in class_.items()])


def test_a_disguised_copy_of_several_short_common_answers_is_found_when_the_combination_is_rare():
    """48 students, 6 short questions of 8 ways each (every answer handed in by about 6): alone
    each answer is common, but all 6 the same is rare; the copier renamed the locals."""
    class_ = _short_class(48, 6, 8, seed=7)
    assert all(not S.fingerprint_cell("q", c, S.Skeleton()).long for c in class_["s00"])
    assert _found(class_) == []                                  # independent students: no pair
    class_["copier"] = [c.replace("y", "mine") for c in class_["s03"]]
    found = _found(class_)
    assert [(p.student_a, p.student_b) for p in found] == [("copier", "s03")]
    assert found[0].identical == [f"cell {i + 1}" for i in range(6)] and found[0].bits > 0
    assert all(m.identical and "mine" in m.source_a for m in found[0].matches)
    # half of them copied (3 of 6 common answers): what chance explains, not reported
    class_["copier"] = [c.replace("y", "mine") for c in class_["s03"][:3]] + class_["s05"][3:4] + \
        [short_answer(4, 99), short_answer(5, 99)]
    assert _found(class_) == []


def test_independent_students_sharing_common_answers_on_one_or_two_questions_are_not_paired():
    """Each student's long answers are their own; two short questions have 2 common answers
    each: many pairs hand in both the same, none is reported."""
    rng = random.Random(8)
    class_ = {f"s{i:02d}": [long_answer(rng), long_answer(rng), short_answer(0, rng.randrange(2)),
                            short_answer(1, rng.randrange(2))] for i in range(40)}
    same = S.Answers([submission(s, cells, S.Skeleton()) for s, cells in class_.items()])
    assert sum(len(np.intersect1d(same.keys[i], same.keys[j])) == 2 for i in range(40) for j in range(i)) > 100
    assert _found(class_) == []


def test_long_answers_the_class_writes_in_pairs_make_no_pair_alone():
    """Twelve students drew their long answer from six model answers, two students each, and wrote
    a second answer of their own: pairs alike on one question and different on another are what
    independent students do, so none of the six pairs is reported on the one alone. The same pair
    among students whose answers are all their own is."""
    rng = random.Random(11)
    models = [long_answer(rng) for _ in range(6)]
    class_ = {f"s{i:02d}": [models[i // 2], long_answer(rng, "second")] for i in range(12)}
    assert _found(class_) == []
    class_ = {f"s{i:02d}": [long_answer(rng)] for i in range(10)} | {"a": [models[0]], "b": [models[0]]}
    assert [(p.student_a, p.student_b) for p in _found(class_)] == [("a", "b")]


def test_whole_copies_of_one_long_answer_do_not_hide_one_another():
    """Twenty students with a long answer and a short one of their own; three copiers each hand in
    another student's long answer, renamed, and nothing else. A copy is identical wherever both
    answered, so the three copies are not the class's chance for one another (the rule before took
    each as the others' coincidence and reported none). A pair alike on the long answer and
    different on the short one shows chance, but one such pair alone may be a copy with an answer
    of its own: it is listed and hides nothing. Two such pairs show chance: then neither they nor
    the copies of that question are listed (nothing in the text tells them apart)."""
    rng = random.Random(13)
    class_ = {f"s{i:02d}": [long_answer(rng), short_answer(0, i)] for i in range(20)}
    copies = [("c1", "s01"), ("c2", "s02"), ("c3", "s03")]
    for copier, origin in copies:
        class_[copier] = [re.sub(r"\bt(\d+)\b", r"part_\1", class_[origin][0])]
    assert sorted((p.student_a, p.student_b) for p in _found(class_)) == copies
    common = long_answer(rng)
    class_ |= {"x": [common, short_answer(0, 90)], "y": [common, short_answer(0, 91)]}
    assert sorted((p.student_a, p.student_b) for p in _found(class_)) == copies + [("x", "y")]
    other = long_answer(rng)
    class_ |= {"u": [other, short_answer(0, 92)], "v": [other, short_answer(0, 93)]}
    assert _found(class_) == []


def test_students_who_write_a_long_answer_nearly_alike_do_not_hide_an_identical_copy():
    """Twenty students, a long answer and a short one of their own. Two pairs of them wrote the long
    answer nearly alike (one line differs: a score over the threshold) and the short one apart:
    the class shows that chance makes near-identical long answers, so neither such pair is reported
    on it. A copier who hands in one student's long answer, renamed, is identical to the last
    token: more than that chance explains, so the copy is found."""
    rng = random.Random(15)
    class_ = {f"s{i:02d}": [long_answer(rng), short_answer(0, i)] for i in range(20)}
    for a, b, seed in [("u", "v", 16), ("x", "y", 17)]:
        model = long_answer(random.Random(seed))
        lines = model.split("\n")
        other = "\n".join(lines[:3] + [lines[3].replace("* y", "/ y")] + lines[4:])
        class_[a], class_[b] = [model, short_answer(0, 100 + seed)], [other, short_answer(0, 200 + seed)]
    assert _found(class_) == []
    class_["copier"] = [re.sub(r"\bt(\d+)\b", r"part_\1", class_["s01"][0])]        # the long answer only
    assert [(p.student_a, p.student_b) for p in _found(class_)] == [("copier", "s01")]


SOLVED = {q: f"def f{q}(x):\n    y = x.p{q}(dim=-1)\n    z = y.r{q}(keepdim=True) * 2\n    w = z.s{q}(0) + y\n"
             f"    return w - z\n" for q in range(5)}
# the solution's answer with its last variable inlined: what a student who never saw it writes too
INLINED = {q: f"def f{q}(x):\n    y = x.p{q}(dim=-1)\n    z = y.r{q}(keepdim=True) * 2\n    return z.s{q}(0) + y - z\n"
           for q in range(5)}


def test_answers_a_few_edits_from_the_solution_are_no_evidence():
    """Students who wrote apart hand in the solution's answer to a question that leaves little to
    choose, or one a few token edits from it: two students with five such answers alike, and a
    long answer one number from the solution's, are not paired, though no one else in the class
    writes them so. A copy of answers of the copier's own is still found."""
    rng = random.Random(14)
    long_solution = long_answer(rng, "f5")
    near_long = long_solution.replace(" + ", " - ", 1)
    solutions = [(f"cell {q + 1}", SOLVED[q]) for q in range(5)] + [("cell 6", long_solution)]
    skeleton = S.Skeleton.of([], solutions)

    def own(source: str) -> list[str]:
        return S._own_texts(source, skeleton)[1]

    from rapidfuzz.distance import Levenshtein
    assert all(0 < Levenshtein.distance(own(INLINED[q]), own(SOLVED[q])) <= S.NEAR_EDITS for q in range(5))
    assert all(S.fingerprint_cell(f"cell {q + 1}", INLINED[q], skeleton).forced for q in range(5))
    near = S.fingerprint_cell("cell 6", near_long, skeleton)
    assert near.forced and near.own_tokens >= S.MIN_TOKENS and not near.long and near.answer == 0
    assert not S.fingerprint_cell("cell 1", short_answer(0, 3), skeleton).forced
    assert not S.fingerprint_cell("cell 9", INLINED[0], skeleton).forced       # a question with no solution
    class_ = {f"s{i:02d}": [short_answer(q, i) for q in range(5)] + [long_answer(rng, "f5")] for i in range(20)}
    class_ |= {name: [INLINED[q] for q in range(5)] + [near_long] for name in ("ana", "bo")}
    class_["copier"] = [c.replace("y", "mine") for c in class_["s03"]]

    def found(skeleton):
        subs = [S.fingerprint_submission(s, [(f"cell {i + 1}", c) for i, c in enumerate(cells)], skeleton)
                for s, cells in class_.items()]
        return sorted((p.student_a, p.student_b) for p in S.similar_pairs("a", subs, skeleton.keep))

    assert found(skeleton) == [("copier", "s03")]
    assert found(S.Skeleton()) == [("ana", "bo"), ("copier", "s03")]     # without the solution: accused


def test_whole_copies_of_two_answers_no_one_else_wrote_are_found_in_a_small_class():
    """Twenty students, three short questions, every answer a student's own; two copiers each
    renamed the locals of two of one student's answers and wrote the third. The class's law, the
    two copies' own answers in it, puts the bound above either pair's evidence; no pair of the class
    coincides on one question alone, so two answers no one else wrote are no coincidence, for two
    such copies or four. Independent: no pair."""
    class_ = {f"s{i:02d}": [short_answer(q, i) for q in range(3)] for i in range(20)}
    assert _found(class_) == []
    for copier, origin, own in [("copier1", "s03", 91), ("copier2", "s07", 92)]:
        class_[copier] = [c.replace("y", "mine") for c in class_[origin][:2]] + [short_answer(2, own)]
    subs = [submission(s, cells, S.Skeleton()) for s, cells in class_.items()]
    answers = S.Answers(subs)
    shared = np.intersect1d(answers.keys[3], answers.keys[20])
    assert len(shared) == 2
    evidence = answers.bits[answers.lookup(shared)].sum()
    assert S.chance_threshold(answers, len(subs)) > evidence      # the class-wide bound alone: missed
    found = _found(class_)
    assert sorted((p.student_a, p.student_b) for p in found) == [("copier1", "s03"), ("copier2", "s07")]
    assert all(p.identical == ["cell 1", "cell 2"] for p in found)
    # two more such copies: still no coincidence on one question alone, so none of the four is chance
    for copier, origin, own in [("copier3", "s11", 93), ("copier4", "s12", 94)]:
        class_[copier] = [c.replace("y", "mine") for c in class_[origin][:2]] + [short_answer(2, own)]
    assert sorted((p.student_a, p.student_b) for p in _found(class_)) == [
        ("copier1", "s03"), ("copier2", "s07"), ("copier3", "s11"), ("copier4", "s12")]


def test_many_whole_copies_of_two_answers_are_not_taken_for_chance():
    """100 students, two short questions, every answer a student's own; ten copiers each renamed
    the locals of another student's two answers. Every coincidence in the class is a copy, on both
    questions: counted as chance, the ten copies would put the bound (11.6 bits) above each one's
    evidence (2 x log2(50) = 11.3 bits). No pair coincides on one question alone, so none is chance."""
    class_ = {f"s{i:03d}": [short_answer(q, i) for q in range(2)] for i in range(100)}
    for copier in range(10):
        class_[f"s{copier:03d}"] = [c.replace("y", "mine") for c in class_[f"s{copier + 50:03d}"]]
    found = {(p.student_a, p.student_b) for p in _found(class_)}
    assert found == {(f"s{c:03d}", f"s{c + 50:03d}") for c in range(10)}
    subs = [submission(s, cells, S.Skeleton()) for s, cells in class_.items()]
    answers = S.Answers(subs)
    assert S.chance_threshold(answers, 100) > 2 * math.log2(50)          # the class's shares: all missed
    # ten more pairs that coincide on one question only: chance now explains a coincidence, not two
    for single in range(20, 40, 2):
        class_[f"s{single + 1:03d}"][0] = class_[f"s{single:03d}"][0]
    assert {(p.student_a, p.student_b) for p in _found(class_)} == found


def test_the_coincidence_rate_of_a_rare_answer_leaves_the_copies_out_and_not_the_chance():
    """200 students, three questions: 40% hand in a common answer, the others one of 40 rare ones,
    each drawn apart. The rate of a rare answer, read from the pairs that coincide on that question
    alone and divided by the share that coincide on no other, is the class's share (a third more
    without the division)."""
    rng = random.Random(12)
    draws = [[0 if rng.random() < 0.4 else rng.randrange(1, 41) for _ in range(3)] for _ in range(200)]
    subs = [submission(f"s{i:03d}", [short_answer(q, d) for q, d in enumerate(row)], S.Skeleton())
            for i, row in enumerate(draws)]
    answers = S.Answers(subs)
    share = answers.counts * (answers.counts - 1) / (200 * 199)
    rates = S.coincidence_rates(answers, answers.counts.astype(float))
    rare = answers.counts <= S.joint_cap(200)
    assert np.array_equal(rates[~rare], share[~rare])
    for q in range(3):
        mine = rare & (answers.question == q)
        assert 0.85 < rates[mine].sum() / share[mine].sum() < 1.15
        telling = answers.bits >= S.MIN_BITS
        apart = np.prod([1 - share[(answers.question == o) & telling].sum() for o in range(3) if o != q])
        assert apart < 0.75                   # without the division, a quarter and more too low


def test_the_chance_bound_is_the_class_pairs_expected_at_it():
    """Questions of one answer each (every pair hands in all of them: no evidence), then of
    answers each handed in by one student (no pair ever coincides): the law of chance evidence
    at its two ends; and a smaller alpha asks for more evidence."""
    same = S.Answers([submission(f"s{i}", [short_answer(q, 0) for q in range(3)], S.Skeleton()) for i in range(20)])
    assert same.bits.tolist() == [0.0] * 3 and S.chance_threshold(same, 20) == 1 / S.BIT_STEPS  # 0 bits: never
    own = S.Answers([submission(f"s{i}", [short_answer(q, i) for q in range(3)], S.Skeleton()) for i in range(20)])
    assert S.chance_threshold(own, 20) == 1 / S.BIT_STEPS     # no chance pair at all: any coincidence is beyond it
    assert S.chance_threshold(S.Answers([]), 0) == math.inf
    subs = [submission(s, cells, S.Skeleton()) for s, cells in _short_class(60, 5, 6, seed=9).items()]
    answers = S.Answers(subs)
    strict, loose = S.chance_threshold(answers, 60, alpha=0.001), S.chance_threshold(answers, 60, alpha=0.1)
    assert math.isfinite(loose) and strict > loose
    # the bound: the pairs expected at the threshold under the class's coincidence rates, by simulation
    rng = np.random.default_rng(0)
    columns = [answers.bits[answers.question == q] for q in range(5)]
    rates = [answers.counts[answers.question == q] * (answers.counts[answers.question == q] - 1) / (60 * 59)
             for q in range(5)]
    draws = sum(np.where(rng.random(200_000) < r.sum(), rng.choice(b, 200_000, p=r / r.sum()), 0.0)
                for b, r in zip(columns, rates))
    assert 60 * 59 / 2 * np.mean(draws >= loose) <= 0.1 * 1.2
    assert 60 * 59 / 2 * np.mean(draws >= loose - 1.5) > 0.1


def test_the_benchmark_ceiling_scores_every_pair_as_the_joint_rule_does():
    """bench.similarity's oracle ceiling: every pair's joint evidence, the same bits the joint rule
    gives the pair it reports; and the copies above every independent pair (a tie separates nothing)."""
    from bench.similarity import oracle_recall, pair_evidence

    class_ = _short_class(48, 6, 8, seed=7)
    class_["copier"] = [c.replace("y", "mine") for c in class_["s03"]]
    subs = [submission(s, cells, S.Skeleton()) for s, cells in class_.items()]
    answers, names = S.Answers(subs), list(class_)
    matrix = pair_evidence(answers)
    [((i, j), (bits, _))] = S.identical_pairs(subs).items()
    assert {names[i], names[j]} == {"copier", "s03"} and matrix[i, j] == pytest.approx(bits) and bits > 0
    for a, b in [(0, 1), (2, 5), (10, 47), (3, 48)]:
        shared = np.intersect1d(answers.keys[a], answers.keys[b])
        assert matrix[a, b] == pytest.approx(answers.bits[answers.lookup(shared)].sum()) == pytest.approx(matrix[b, a])
    evidence = {("a", "b"): 9.0, ("c", "d"): 5.0, ("e", "f"): 7.0}
    assert oracle_recall(evidence, {("a", "b"), ("c", "d")}, {("e", "f")}) == {("a", "b")}
    assert oracle_recall(evidence, {("e", "f")}, {("a", "b")}) == set()
    assert oracle_recall({("a", "b"): 7.0, ("e", "f"): 7.0}, {("a", "b")}, {("e", "f")}) == set()


def test_identical_answers_of_a_whole_class_propose_no_pair():
    """300 students hand in the same 5 answers: no answer proposes a pair (each is above the cap),
    nothing is scored pair by pair, and nothing is reported."""
    cells = [short_answer(q, 0) for q in range(5)] + [long_answer(random.Random(10))]
    subs = [submission(f"s{i:03d}", cells, S.Skeleton()) for i in range(300)]
    answers = S.Answers(subs)
    assert len(answers.table) == 6 and set(answers.counts.tolist()) == {300}
    assert S.joint_candidates(answers) == []
    assert S.identical_pairs(subs) == {} and S.similar_pairs("a", subs) == []


def test_the_joint_proposals_grow_linearly_with_the_class():
    """Groups of 3 hand in the same 4 answers: the proposals are the pairs of the groups."""
    for size in (30, 300):
        subs = [submission(str(i), [short_answer(q, i // 3) for q in range(4)], S.Skeleton()) for i in range(size)]
        assert len(S.joint_candidates(S.Answers(subs))) == size


def test_a_pair_found_by_its_identical_answers_is_shown_side_by_side():
    class_ = _short_class(48, 6, 8, seed=7)
    class_["<copier>"] = [c.replace("y", "mine") for c in class_["s03"]]
    found = R.ClassSimilarity(0.8, _found(class_), {"a": 49})
    section = R.html_section(found)
    assert "identical once normalised" in section and "&lt;copier&gt;" in section
    assert "mine = x.m0_" in section and "y = x.m0_" in section           # both answers, whole
    assert "identical answers to cell 1, cell 2" in section


# ---------------------------------------------------------------- students who wrote apart

@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_two_students_who_wrote_apart_are_paired_and_their_copies_with_a_long_answer_are_found(seed):
    """tests/answers/written holds the answers of students who each filled the eight notebooks
    alone; each is copied whole by a copier who renames every local (one time in two the
    attributes too), drops the comments and reformats, among 30 classmates drawn from the answer
    banks (who give the joint rule its rates of chance). No pair with one of them or a copier is
    reported but the copy pairs: before the solution's answers were no evidence (a5ce009), six
    pairs of two of them were (identical answers to questions that leave little to choose). What
    is not found: a copy of answers that are all forced or short (nothing in the text tells it
    from a classmate's: 13 of the 32), and one copy with a long answer, of eli's loop of heads,
    whose every fingerprint classmates share (the class's usual way to write it). Seeds 1 to 3
    each find the other 18 of the 19 copies with a long answer of their own. (Two classmates who
    drew the same bank answers may be paired: a coincident draw, measured by
    ``python -m bench.similarity``.)"""
    from bench.similarity import ASSIGNMENTS, read_written, staged, written_class

    written = read_written()
    made = written_class(written, ASSIGNMENTS, seed=seed, crowd=30)
    reported = staged(made, ASSIGNMENTS, S.DEFAULT_THRESHOLD).reported
    theirs = {p for p in reported if not (p[1].startswith("crowd") and p[2].startswith("crowd"))}
    assert len(made.copies) == len(written) * len(ASSIGNMENTS)
    assert theirs <= made.copies, sorted(theirs - made.copies)
    found = len(theirs & made.long_copies)
    assert found >= len(made.long_copies) - 1, (found, sorted(made.long_copies - theirs))


@pytest.mark.slow
def test_students_who_wrote_apart_get_full_marks_from_the_command(tmp_path):
    """Every notebook of the students who wrote apart, and of their copiers, graded by
    ``python -m autograder grade``: full marks on every question the grader checks."""
    import grading_students as G

    from bench.similarity import ASSIGNMENTS, read_written, write_class, written_class

    written = read_written()
    assert written, "tests/answers/written: one file per student"
    made = written_class(written, ASSIGNMENTS, seed=1)
    root = tmp_path / "course"
    write_class(made, root)
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="written-test")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--no-progress",
                           "--timeout", "60"], cwd=G.REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = G.read_csv(root)
    graded = {(s, a) for s, a, _ in rows}
    assert graded == set(made.notebooks), sorted(graded ^ set(made.notebooks))
    short = {key: row for key, row in rows.items() if row[0] != row[1]}
    assert not short, short
