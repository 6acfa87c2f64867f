"""The similarity report on a synthetic class: precision, recall and the stage's time.

    python -m bench.similarity                       # 100 students x 8 assignments, then 1,000 students
    python -m bench.similarity --students 100 --large 0 --seed 3
    python -m bench.similarity --students 30 --large 0 --seed 1 --own-line
    python -m bench.similarity --sweep 3     # 24 classes: 10 to 100 students, both kinds, 3 seeds

``--own-line`` gives every independent answer a line of the student's own above the bank's
text: no two independent answers are then identical once normalised, though most of their text
still is (the model answer); a class closer to one whose students wrote apart. Both kinds of
class, small and large, are in bench/RESULTS.md section 8: what counts there is
``precision_all``, every reported pair that is not a copy counted as false.

The class is written from the answer banks (``tests/answers/``): per assignment (01 to 08) and
question, every **independent** student hands in an answer drawn from the question's bank (80%
a right one: the solution, a variant or a realistic right answer; 20% a realistic wrong one) in
their own hand: each of a dozen equivalent idioms taken or not (``x.size(-1)`` for
``x.shape[-1]``, ``.reshape`` for ``.view``, ``~mask.bool()`` for ``mask == 0``...), the operands
of ``+`` and ``*`` in either order, ``dim`` by position, a nested call's argument put in a
variable first, their own letters in einsum equations, their own names for locals and for the
attributes the given code does not fix, two neighbouring layers defined in either order,
sometimes their own formatting. A **copier** (10% of the class) takes an independent student's
answers (all of them; or, one copier in three, half the questions) and disguises them: every
local renamed, in half the copies the attributes the given code does not fix too (an editor's
"rename symbol" on ``self.w_q``), comments and docstrings removed, reformatted (``ast.unparse``,
or two-space indentation and blank lines). Each notebook is the course's solutions notebook with its answer
cells replaced, written under ``ROOT/submitted/``; the stage is timed as ``grade`` runs it
(:func:`autograder.batch.similarity_report.check_class` on the discovered tasks, reading the
notebooks included).

A reported copy pair (a copier and the student copied, or two copiers of one student) is a true
positive, a reported independent pair a false positive. The banks hold a few answers per
question, so many independent students draw the same one: a pair who drew the same bank answer
for every question where both have a long answer (a **coincident draw**) hands in the same text
twice, in two hands, and is printed apart (precision with and without them); to the two
students named it is an accusation all the same, so the target is on ``precision_all``, which
counts it as false. A copy is found
only when the copied text is rare in the class: by its fingerprints when a long answer is copied
(one under ``MIN_TOKENS`` tokens of their own, most of 01_tokens and 03_attention, never
decides a pair, nor one that more than ``rare_cap`` students wrote alike), or by its answers
identical on several questions in a combination chance does not explain (the joint rule of
:mod:`autograder.batch.similarity`: a copy of half the questions is often too little); the
recall is printed for all copies and for the copies of a long answer. Beside it, a **ceiling**: the
copies that a threshold on the joint evidence, set knowing which pairs are copies, could report
with no independent pair, coincident draws included (every pair scored, :func:`pair_evidence`);
what no threshold separates from chance is out of any such rule's reach in this class.

The last line: ``similarity: precision=P precision_all=P recall=R recall_long=R seconds_100x8=S seconds_1000x8=S``.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import io
import itertools
import json
import random
import re
import shutil
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import autograder
from autograder.batch import similarity
from autograder.batch.similarity_report import assignment_skeleton, check_class, fingerprint_notebooks, skeleton_sources
from autograder.batch.sources import load_sources
from autograder.batch.tasks import discover, questions_by_assignment

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ["01_tokens", "02_positional_encoding", "03_attention", "04_multihead_attention",
               "05_blocks", "06_patch_embedding", "07_vit", "08_decoder"]
TARGET_SHARE = 0.05          # the stage's time, of the grading time of the same class
TARGET_PRECISION = 0.9       # every reported pair not a copy counted as false (coincident draws too)
RIGHT_SHARE = 0.8
COPIER_SHARE = 0.1
ATTRIBUTE_RENAMES = 0.5       # of the copies: the attributes the given code does not fix renamed too
PARTIAL_SHARE = 0.3           # of the copiers: half the questions copied, the others their own

# equivalent ways to write the same thing: each independent student takes each or not
IDIOMS = [
    (r"\.transpose\((-?\d+), (-?\d+)\)", r".transpose(\2, \1)"),
    (r"\.shape\[(-?\d+)\]", r".size(\1)"),
    (r"= (\w+)\.shape$", r"= \1.size()"),
    (r"\.view\(", ".reshape("),
    (r"\bF\.softmax\(", "torch.softmax("),
    (r"\btorch\.softmax\((\w+), dim=(-?\d+)\)", r"\1.softmax(dim=\2)"),
    (r"\b(\w+) @ (\w+)\b(?![.\[(])", r"torch.matmul(\1, \2)"),
    (r"\.unsqueeze\(0\)", "[None]"),
    (r"nn\.Linear\((\w+), (\w+)\)", r"nn.Linear(\1, \2, bias=True)"),
    (r"nn\.Dropout\((\w+)\)", r"nn.Dropout(p=\1)"),
    (r"\.(sum|mean)\(dim=(-?\d+)", r".\1(\2"),
    (r"math\.sqrt\((\w+)\)", r"\1 ** 0.5"),
    (r"\bfloat\([\"']-inf[\"']\)", "-float('inf')"),
    (r"\b(\w+) == 0\b", r"~\1.bool()"),
    (r"^(\s*)return (?!.*,)([^\n]+)$", r"\1result = \2\n\1return result"),
    (r"\bsuper\(\)\.__init__\(\)", "super(__CLASS__, self).__init__()"),
]
EINSUM = re.compile(r"einsum\((['\"])([a-z ,.>-]+)\1")


# ---------------------------------------------------------------- answers from the banks

def _bank_modules():
    """tests/answers as a package (the repository root is on sys.path under ``python -m``)."""
    from tests.answers import bank
    return bank


def _top_level_source(answer, name: str) -> str | None:
    """The source of a bank answer written at the top level of its file, renamed to ``name``
    (the notebook's answer name), its decorators dropped; None for one a helper builds."""
    try:
        source = inspect.getsource(answer)
    except (OSError, TypeError):
        return None
    if source[:1].isspace():
        return None
    try:
        definition = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    own = getattr(answer, "__name__", "")
    text = "\n".join(source.splitlines()[definition.lineno - 1:]) + "\n"      # without its decorators
    return re.sub(rf"\b{re.escape(own)}\b", name, text) if own else text


def answer_pools(questions: list) -> dict[str, tuple[list[str], list[str]]]:
    """``{qid: (right sources, wrong sources)}`` for the questions that have a bank."""
    bank = _bank_modules()
    banks, solutions = bank.load(), bank.solutions()
    pools = {}
    for q in questions:
        b = banks.get(q.id)
        if b is None:
            continue
        right = [_top_level_source(a, q.answer_name) for a in [solutions.get(q.id), *b.variants, *b.right] if a]
        wrong = [_top_level_source(a, q.answer_name) for a, _ in b.wrong]
        right, wrong = [s for s in right if s], [s for s in wrong if s]
        if right:
            pools[q.id] = (right, wrong or right)
    return pools


# ---------------------------------------------------------------- how a student writes it

def local_names(source: str) -> list[str]:
    """The names a source binds inside its functions (not parameters, not attributes), in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: dict[str, None] = {}
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        parameters = {a.arg for a in [*function.args.args, *function.args.kwonlyargs, *function.args.posonlyargs]}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in parameters:
                found[node.id] = None
    return list(found)


def rename(source: str, mapping: dict[str, str]) -> str:
    """``source`` with the names of ``mapping`` replaced where they are variables (not after a
    dot, not a keyword argument's name)."""
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    brackets: list[str] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for index, tok in enumerate(tokens):
        if tok.string in "([{" and tok.type == tokenize.OP:
            brackets.append(tok.string)
        elif tok.string in ")]}" and tok.type == tokenize.OP and brackets:
            brackets.pop()
        if tok.type != tokenize.NAME or tok.string not in mapping:
            continue
        previous = tokens[index - 1].string if index else ""
        following = tokens[index + 1].string if index + 1 < len(tokens) else ""
        if previous == "." or (following == "=" and brackets[-1:] == ["("]):
            continue
        edits.append((tok.start[0] - 1, tok.start[1], tok.end[1], mapping[tok.string]))
    for row, start, end, new in sorted(edits, reverse=True):
        lines[row] = lines[row][:start] + new + lines[row][end:]
    return "".join(lines)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            setattr(node, "body", body[1:] or [ast.Pass()])
    return tree


def unparsed(source: str) -> str:
    """Reformatted as ``ast.unparse`` writes it: no comment, no docstring, its own spacing."""
    return ast.unparse(_without_docstrings(ast.parse(source))) + "\n"


def respaced(source: str) -> str:
    """Comments removed, two-space indentation, a blank line after every block opener."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    for tok in reversed([t for t in tokens if t.type == tokenize.COMMENT]):
        row = tok.start[0] - 1
        lines[row] = lines[row][:tok.start[1]].rstrip() + "\n"
    out = []
    for line in lines:
        stripped = line.lstrip(" ")
        indent = (len(line) - len(stripped)) // 2
        out.append(" " * indent + stripped)
        if stripped.rstrip().endswith(":"):
            out.append("\n")
    return "".join(out)


ATTRIBUTE_STYLES = ["{}_layer", "my_{}", "{}_proj", "w_{}", "{}_", "{}_fn", "the_{}", "{}_module"]


def attributes(source: str, given: str) -> list[str]:
    """The attributes an answer creates (``self.name = ...``) that the given code does not name."""
    found = dict.fromkeys(re.findall(r"\bself\.(\w+)\s*=[^=]", source))
    return [name for name in found if not re.search(rf"\b{re.escape(name)}\b", given)]


def _relabelled(match: re.Match, rng: random.Random) -> str:
    """An einsum equation with its index letters renamed consistently (the same computation)."""
    letters = sorted(set(re.findall(r"[a-z]", match.group(2))))
    mapping = dict(zip(letters, rng.sample("abcdefghijklmnopqrstuvwxyz", len(letters))))
    return f"einsum({match.group(1)}{''.join(mapping.get(c, c) for c in match.group(2))}{match.group(1)}"


def _swap_neighbours(source: str, rng: random.Random) -> str:
    """Two neighbouring layer definitions (``self.x = nn.Linear(...)``) in the other order, or not."""
    lines = source.split("\n")
    layer = re.compile(r"^\s+self\.\w+ = nn\.\w+\(.*\)$")
    for i in range(len(lines) - 1):
        if layer.match(lines[i]) and layer.match(lines[i + 1]) and rng.random() < 0.5:
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines)


DIM_FIRST = {"sum", "mean", "softmax", "log_softmax", "amax", "amin", "cumsum", "argmax", "std", "var", "unsqueeze"}


class Rewriter(ast.NodeTransformer):
    """Equivalent code as different students write it: the operands of ``+`` and ``*`` in either
    order, ``dim=`` given by position, a nested call's argument first put in a variable."""

    def __init__(self, rng: random.Random):
        self.rng, self.fresh = rng, 0

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        plain = not any(isinstance(side, (ast.Constant, ast.List, ast.Tuple, ast.JoinedStr))
                        and not isinstance(getattr(side, "value", 0), (int, float)) for side in (node.left, node.right))
        if isinstance(node.op, (ast.Add, ast.Mult)) and plain and self.rng.random() < 0.4:
            node.left, node.right = node.right, node.left
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        method = isinstance(node.func, ast.Attribute) and node.func.attr in DIM_FIRST
        if method and not node.args and [k.arg for k in node.keywords][:1] == ["dim"] and self.rng.random() < 0.5:
            node.args, node.keywords = [node.keywords[0].value], node.keywords[1:]
        return node

    def _hoisted(self, statements: list) -> list:
        out = []
        for statement in statements:
            value = getattr(statement, "value", None)
            if isinstance(statement, (ast.Assign, ast.Return)) and isinstance(value, ast.Call) and value.args \
                    and isinstance(value.args[0], (ast.Call, ast.BinOp)) and self.rng.random() < 0.4:
                self.fresh += 1
                name = f"part{self.fresh}"
                out.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=value.args[0], lineno=0))
                value.args[0] = ast.Name(name, ast.Load())
            out.append(statement)
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if isinstance(node, (ast.FunctionDef, ast.For, ast.If, ast.With)):
            node.body = self._hoisted(node.body)
        return node


def rewritten(source: str, rng: random.Random) -> str:
    """``source`` through :class:`Rewriter` (unchanged when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    return ast.unparse(ast.fix_missing_locations(Rewriter(rng).visit(tree))) + "\n"


def own_hand(source: str, rng: random.Random, given: str = "") -> str:
    """An independent student's answer: each idiom taken or not (everywhere), their own names
    for locals and for the attributes the given code does not fix, sometimes their own formatting."""
    cls = re.search(r"^class (\w+)", source, flags=re.MULTILINE)
    for pattern, replacement in IDIOMS:
        if "__CLASS__" in replacement:
            if cls is None:
                continue
            replacement = replacement.replace("__CLASS__", cls.group(1))
        if rng.random() < 0.5:
            source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    source = EINSUM.sub(lambda m: _relabelled(m, rng), source)
    source = _swap_neighbours(source, rng)
    for name in attributes(source, given):
        if rng.random() < 0.7:
            new = rng.choice(ATTRIBUTE_STYLES).format(name)
            source = re.sub(rf"\bself\.{re.escape(name)}\b", f"self.{new}", source)
    source = rewritten(source, rng)
    if rng.random() < 0.5:
        source = rename(source, {n: f"{n}_{rng.randrange(100)}" for n in local_names(source)})
    return respaced(source) if rng.random() < 0.3 else source


def disguised(source: str, rng: random.Random, given: str = "") -> str:
    """A copier's version: every local renamed, comments and docstrings gone, reformatted; in
    ``ATTRIBUTE_RENAMES`` of the copies, the attributes the given code does not fix renamed too
    (an editor's "rename symbol" on ``self.w_q``)."""
    names = local_names(source)
    source = rename(source, {n: f"v{rng.randrange(10**6)}_{i}" for i, n in enumerate(names)})
    if rng.random() < ATTRIBUTE_RENAMES:
        for i, name in enumerate(attributes(source, given)):
            source = re.sub(rf"\bself\.{re.escape(name)}\b", f"self.a{rng.randrange(10**6)}_{i}", source)
    return unparsed(source) if rng.random() < 0.5 else respaced(source)


# ---------------------------------------------------------------- the class

@dataclass
class SyntheticClass:
    """The notebooks by (student, assignment); the copy pairs ``(assignment, a, b)`` (a < b)
    and those with a long answer copied; every student's bank draws and long answers (the
    questions whose answer counts), by question."""

    notebooks: dict[tuple[str, str], dict] = field(default_factory=dict)
    copies: set[tuple[str, str, str]] = field(default_factory=set)
    long_copies: set[tuple[str, str, str]] = field(default_factory=set)
    draws: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    long: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def coincident(self, pair: tuple[str, str, str]) -> bool:
        """Whether two independent students drew the same bank answer for every question where
        both have a long answer: the same text handed in twice (in their own hands), which
        no comparison of texts can tell from a copy; such pairs are left out of the precision."""
        assignment, a, b = pair
        both = self.long[(a, assignment)] & self.long[(b, assignment)]
        return bool(both) and all(self.draws[(a, assignment)][q] == self.draws[(b, assignment)][q] for q in both)


def _answer_cell(notebook: dict, qid: str) -> dict | None:
    for cell in notebook["cells"]:
        if ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") == f"{qid}_answer":
            return cell
    return None


def _draw(pools: dict, rng: random.Random, given: str, own_line: bool = False) -> tuple[dict[str, str], dict[str, int]]:
    """An independent student's answers (a bank answer per question, in their own hand) and
    which bank answer each is (right ones numbered from 0, wrong ones from 1000); ``own_line``:
    each answer with a line of the student's own above it (``note = N``), so that no two
    independent answers are identical once normalised while the rest stays the bank's text."""
    answers, draws = {}, {}
    for qid, (right, wrong) in pools.items():
        is_right = rng.random() < RIGHT_SHARE
        index = rng.randrange(len(right if is_right else wrong))
        answers[qid] = own_hand((right if is_right else wrong)[index], rng, given)
        if own_line:
            answers[qid] = f"note = {rng.randrange(10 ** 9)}\n" + answers[qid]
        draws[qid] = index if is_right else 1000 + index
    return answers, draws


def _copy(origin: tuple[dict, dict], pools: dict, rng: random.Random, given: str,
          own_line: bool = False) -> tuple[dict, dict, set]:
    """A copier's answers (disguised copies of all of ``origin``'s, or of half of them), their
    bank draws and the questions copied."""
    qids = list(pools)
    partial = rng.random() < PARTIAL_SHARE and len(qids) > 1
    taken = set(rng.sample(qids, len(qids) // 2)) if partial else set(qids)
    own, own_draws = _draw(pools, rng, given, own_line)
    answers = {q: disguised(origin[0][q], rng, given) if q in taken else own[q] for q in qids}
    return answers, {q: origin[1][q] if q in taken else own_draws[q] for q in qids}, taken


def _long(answers: dict[str, str], skeleton: similarity.Skeleton) -> set[str]:
    return {q for q, source in answers.items() if similarity.fingerprint_cell(q, source, skeleton).long}


def _given(assignment: str) -> tuple[dict, similarity.Skeleton, str]:
    """The solutions notebook of ``assignment`` (whose answer cells a class's notebooks replace),
    its skeleton and the given code as one source."""
    base = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    given_sources = skeleton_sources(ROOT / "solutions", assignment)
    skeleton = assignment_skeleton(ROOT / "solutions", assignment, autograder.questions(assignment))
    return base, skeleton, "\n".join(given_sources)


def _assignment_class(assignment: str, students: list[str], rng: random.Random, made: SyntheticClass,
                      own_line: bool = False) -> None:
    """Every student's notebook of one assignment, into ``made``, with the copy pairs."""
    pools = answer_pools(autograder.questions(assignment))
    base, skeleton, given = _given(assignment)
    copiers = sorted(rng.sample(students, max(1, round(COPIER_SHARE * len(students)))))
    honest = [s for s in students if s not in copiers]
    written = {student: _draw(pools, rng, given, own_line) for student in honest}
    copied_from: dict[str, str] = {}
    for student in copiers:
        origin = copied_from[student] = rng.choice(honest)
        answers, draws, taken = _copy(written[origin], pools, rng, given, own_line)
        written[student] = (answers, draws)
        long = bool(_long({q: written[origin][0][q] for q in taken}, skeleton))
        for other in [origin] + [c for c, o in copied_from.items() if o == origin and c != student]:
            first, second = sorted((student, other))
            made.copies.add((assignment, first, second))
            if long:
                made.long_copies.add((assignment, first, second))
    for student in students:
        answers, made.draws[(student, assignment)] = written[student]
        made.long[(student, assignment)] = _long(answers, skeleton)
        made.notebooks[(student, assignment)] = _filled(base, answers)


def _filled(base: dict, answers: dict[str, str]) -> dict:
    """The notebook ``base`` with its answer cells' sources replaced by ``answers`` (by question)."""
    notebook = json.loads(json.dumps(base))
    for qid, source in answers.items():
        cell = _answer_cell(notebook, qid)
        if cell is not None:
            cell["source"] = source
    return notebook


def build_class(students: int, assignments: list[str], seed: int, own_line: bool = False) -> SyntheticClass:
    rng = random.Random(seed)
    names = [f"student{i:04d}" for i in range(students)]
    made = SyntheticClass()
    for assignment in assignments:
        _assignment_class(assignment, names, rng, made, own_line)
    return made


# ---------------------------------------------------------------- a class written by hand

WRITTEN = ROOT / "tests" / "answers" / "written"


def answer_sources(notebook: dict, assignment: str) -> dict[str, str]:
    """``{qid: source}``: the answer cells of a filled notebook of ``assignment``."""
    found = {}
    for q in autograder.questions(assignment):
        cell = _answer_cell(notebook, q.id)
        if cell is not None:
            source = cell["source"]
            found[q.id] = source if isinstance(source, str) else "".join(source)
    return found


def read_written(folder: Path = WRITTEN) -> dict[str, dict[str, dict[str, str]]]:
    """student -> assignment -> ``{qid: source}``: the answers of students who wrote apart, one
    JSON file per student in ``folder`` (made by ``--save-written`` from their notebooks)."""
    return {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))}


def written_class(written: dict[str, dict[str, dict[str, str]]], assignments: list[str], seed: int,
                  crowd: int = 0) -> SyntheticClass:
    """A class of the students who wrote their answers apart (independent of one another), a copier
    of each who hands in all of that student's answers disguised (:func:`disguised`), and
    ``crowd`` independent students drawn from the banks with a line of their own per answer (so
    that the class's rates of chance are not those of a handful of students)."""
    rng = random.Random(seed)
    made = SyntheticClass()
    authors = sorted(written)
    for assignment in assignments:
        pools = answer_pools(autograder.questions(assignment)) if crowd else {}     # the banks: seconds to read
        base, skeleton, given = _given(assignment)
        handed: dict[str, tuple[dict[str, str], dict[str, int]]] = {}
        for index, author in enumerate(authors):
            answers = written[author][assignment]
            own = {q: 2000 + index for q in answers}                  # a draw no one else makes
            handed[author] = (answers, own)
            copier = f"copier_of_{author}"
            handed[copier] = ({q: disguised(s, rng, given) for q, s in answers.items()}, own)
            pair = (assignment, *sorted((author, copier)))
            made.copies.add(pair)
            if _long(answers, skeleton):
                made.long_copies.add(pair)
        for index in range(crowd):
            handed[f"crowd{index:04d}"] = _draw(pools, rng, given, own_line=True)
        for student, (answers, draws) in handed.items():
            made.draws[(student, assignment)] = draws
            made.long[(student, assignment)] = _long(answers, skeleton)
            made.notebooks[(student, assignment)] = _filled(base, answers)
    return made


def save_written(folder: Path, student: str, out: Path = WRITTEN) -> Path:
    """``--save-written``: the answer cells of one student's filled notebooks (``folder``/NN_name.ipynb),
    as ``out``/student.json, the form :func:`read_written` reads."""
    answers = {}
    for assignment in ASSIGNMENTS:
        notebook = json.loads((folder / f"{assignment}.ipynb").read_text(encoding="utf-8"))
        answers[assignment] = answer_sources(notebook, assignment)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{student}.json"
    path.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def write_class(made: SyntheticClass, root: Path) -> None:
    for (student, assignment), notebook in made.notebooks.items():
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{assignment}.ipynb").write_text(json.dumps(notebook, indent=1), encoding="utf-8")


# ---------------------------------------------------------------- measuring

@dataclass
class Measured:
    seconds: float
    reported: set[tuple[str, str, str]]
    compared: int


def run_stage(root: Path, assignments: list[str], threshold: float) -> Measured:
    """The similarity stage as ``grade`` runs it: on the discovered tasks, reading included."""
    questions = {a: qs for a, qs in questions_by_assignment().items() if a in assignments}
    source_dir = ROOT / "solutions"
    tasks = discover(root, questions, load_sources(source_dir, questions), "bench", source_dir)
    start = time.perf_counter()
    found = check_class(tasks, source_dir, questions, threshold)
    seconds = time.perf_counter() - start
    return Measured(seconds, {(p.assignment, p.student_a, p.student_b) for p in found.pairs},
                    sum(found.compared.values()))


def scores(made: SyntheticClass, reported: set) -> dict[str, float]:
    """Precision (the reported pairs that are copies, among those that are not coincident
    draws) and recall (of all copies; of the copies of a long answer)."""
    hits = reported & made.copies
    coincident = {p for p in reported - made.copies if made.coincident(p)}
    judged = reported - coincident
    return {"precision": len(hits) / len(judged) if judged else 1.0,
            "precision_all": len(hits) / len(reported) if reported else 1.0,
            "recall": len(hits) / len(made.copies) if made.copies else 1.0,
            "recall_long": len(reported & made.long_copies) / len(made.long_copies) if made.long_copies else 1.0,
            "false_positives": len(judged - hits), "coincident": len(coincident), "copies": len(made.copies),
            "long_copies": len(made.long_copies), "found": len(hits), "reported": len(reported)}


def per_assignment(made: SyntheticClass, reported: set, assignments: list[str]) -> list[str]:
    lines = [f"{'assignment':<24} copies  long  found  false+  coincident"]
    for a in assignments:
        copies = {p for p in made.copies if p[0] == a}
        mine = {p for p in reported if p[0] == a}
        coincident = {p for p in mine - copies if made.coincident(p)}
        lines.append(f"{a:<24} {len(copies):>6} {len({p for p in made.long_copies if p[0] == a}):>5} "
                     f"{len(mine & copies):>6} {len(mine - copies - coincident):>7} {len(coincident):>11}")
    return lines


def pair_evidence(answers: similarity.Answers) -> np.ndarray:
    """``(n, n)``: every pair's joint evidence, the summed surprisal (bits) of the answers the two
    hand in identically (the grader's :func:`~autograder.batch.similarity.identical_pairs` scores
    only the pairs its index proposes; here all pairs, quadratic: for measuring only)."""
    handed = np.zeros((len(answers.keys), len(answers.table)))              # (students, answers)
    for student, rows in enumerate(answers.rows):
        handed[student, rows] = 1.0
    return (handed * answers.bits) @ handed.T


def oracle_recall(evidence: dict[tuple[str, str], float], copies: set[tuple[str, str]],
                  independent: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The copy pairs a threshold on the joint evidence, set knowing which pairs are copies, could
    report with no independent pair: those above every independent pair's evidence. An upper
    bound on what identical answers can tell in this class, not a method."""
    top = max((evidence[p] for p in independent), default=0.0)
    return {p for p in copies if evidence[p] > top}


def ceiling(made: SyntheticClass, assignments: list[str]) -> tuple[set, set]:
    """The copy pairs ``(assignment, a, b)`` an oracle threshold on the joint evidence finds
    (:func:`oracle_recall` per assignment, above every independent pair, coincident draws
    included), and all the copy pairs."""
    questions = questions_by_assignment()
    above = set()
    for assignment in assignments:
        skeleton = assignment_skeleton(ROOT / "solutions", assignment, questions[assignment])
        students = sorted(s for s, a in made.notebooks if a == assignment)
        submissions = fingerprint_notebooks([(s, json.dumps(made.notebooks[(s, assignment)]).encode())
                                             for s in students], questions[assignment], skeleton)
        matrix = pair_evidence(similarity.Answers(submissions))
        evidence = {(a, b): float(matrix[i, j]) for (i, a), (j, b) in itertools.combinations(enumerate(students), 2)}
        copies = {(a, b) for (x, a, b) in made.copies if x == assignment}
        independent = {p for p in evidence if p not in copies}
        above |= {(assignment, a, b) for a, b in oracle_recall(evidence, copies, independent)}
    return above, set(made.copies)


def verdict(result: dict, seconds: float, grading_seconds: float) -> tuple[bool, list[str]]:
    """Whether the targets are met: the stage within ``TARGET_SHARE`` of the grading time, the
    precision counting every independent pair reported (``precision_all``: a coincident draw is an
    independent pair to the students named) at least ``TARGET_PRECISION``; and what misses them."""
    problems = []
    if seconds > TARGET_SHARE * grading_seconds:
        problems.append(f"the stage took {seconds:.2f} s, more than {100 * TARGET_SHARE:g}% of {grading_seconds:g} s")
    if result["precision_all"] < TARGET_PRECISION:
        problems.append(f"precision_all {result['precision_all']:.3f} < {TARGET_PRECISION}")
    return not problems, problems


def measure(students: int, assignments: list[str], seed: int, threshold: float,
            own_line: bool = False) -> tuple[SyntheticClass, Measured]:
    made = build_class(students, assignments, seed, own_line)
    return made, staged(made, assignments, threshold)


def staged(made: SyntheticClass, assignments: list[str], threshold: float) -> Measured:
    """The stage run on ``made``, written to a folder of its own for the time of the run."""
    folder = Path(tempfile.mkdtemp(prefix="bench-similarity-"))
    try:
        write_class(made, folder)
        return run_stage(folder, assignments, threshold)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def written_report(folder: Path, crowd: int, seed: int, threshold: float) -> int:
    """``--written``: the class of :func:`written_class`; every pair of two students who wrote
    apart that is reported is printed (a false accusation), then the copies found."""
    written = read_written(folder)
    made = written_class(written, ASSIGNMENTS, seed, crowd)
    measured = staged(made, ASSIGNMENTS, threshold)
    result = scores(made, measured.reported)
    print(f"class: {len(written)} students who wrote apart ({', '.join(sorted(written))}), a copier of each, "
          f"{crowd} drawn from the banks; seed {seed}, threshold {threshold:g}")
    print("\n".join(per_assignment(made, measured.reported, ASSIGNMENTS)))
    apart = sorted(p for p in measured.reported - made.copies if p[1] in written and p[2] in written)
    for assignment, a, b in apart:
        print(f"  reported, though written apart: {assignment} {a} {b}")
    missed = sorted(made.copies - measured.reported)
    for assignment, a, b in missed:
        print(f"  copy not reported: {assignment} {a} {b}"
              + ("" if (assignment, a, b) in made.long_copies else " (no long answer copied)"))
    print(f"written apart: {len(apart)} of {len(written) * (len(written) - 1) // 2 * len(ASSIGNMENTS)} pairs reported; "
          f"other independent pairs reported: {result['reported'] - result['found'] - len(apart)}; "
          f"copies found {result['found']} of {result['copies']} (recall {result['recall']:.3f}; "
          f"{result['recall_long']:.3f} of the {result['long_copies']} with a long answer)")
    return 0 if not apart else 1


SWEEP_SIZES = (10, 20, 30, 100)


def sweep(seeds: int, threshold: float) -> int:
    """``--sweep``: classes of every size in ``SWEEP_SIZES`` drawn from the banks and with a line of
    their own (``--own-line``), ``seeds`` seeds each, one line per class, then the totals; a false
    pair is every reported pair that is not a copy (coincident draws included)."""
    totals = {False: [0, 0, 0], True: [0, 0, 0]}                 # reported, copies found, copies
    print(f"{'class':<22} {'reported':>8} {'false':>6} {'precision_all':>13} {'recall':>7}")
    for own_line in (False, True):
        for students in SWEEP_SIZES:
            for seed in range(1, seeds + 1):
                made, measured = measure(students, ASSIGNMENTS, seed, threshold, own_line)
                result = scores(made, measured.reported)
                kind = "own line" if own_line else "banks"
                print(f"{kind + f' {students} seed {seed}':<22} {result['reported']:>8} "
                      f"{result['reported'] - result['found']:>6} {result['precision_all']:>13.3f} "
                      f"{result['recall']:>7.3f}")
                for index, value in enumerate((result["reported"], result["found"], result["copies"])):
                    totals[own_line][index] += value
    for own_line, (reported, found, copies) in totals.items():
        print(f"total, {'own line' if own_line else 'banks'}: {reported} reported, {reported - found} false, "
              f"recall {found / copies:.3f} of {copies} copies")
    return 0


def main(argv=None) -> int:
    global ATTRIBUTE_RENAMES
    parser = argparse.ArgumentParser(prog="python -m bench.similarity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--large", type=int, default=1000, help="students of the timing-only class (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threshold", type=float, default=similarity.DEFAULT_THRESHOLD)
    parser.add_argument("--own-line", action="store_true",
                        help="every independent answer gets a line of its own above the bank's text (no two identical)")
    parser.add_argument("--attribute-renames", type=float, default=ATTRIBUTE_RENAMES, metavar="SHARE",
                        help="the share of the copies whose attributes are renamed too (0: locals only)")
    parser.add_argument("--grading-seconds", type=float, default=214.0,
                        help="the grading time of 100 x 8 to compare with (For instructors: bench.grading, 214 s)")
    parser.add_argument("--sweep", type=int, default=0, metavar="SEEDS",
                        help="no timing: classes of 10, 20, 30 and 100 students of both kinds, SEEDS seeds each")
    parser.add_argument("--written", type=Path, nargs="?", const=WRITTEN, default=None, metavar="DIR",
                        help=f"no timing: the students who wrote apart (default {WRITTEN.relative_to(ROOT)}), "
                             "a copier of each, and --crowd students drawn from the banks")
    parser.add_argument("--crowd", type=int, default=30, help="with --written: students drawn from the banks")
    parser.add_argument("--save-written", nargs=2, metavar=("FOLDER", "STUDENT"),
                        help="store the answer cells of FOLDER/NN_name.ipynb as --written's STUDENT.json")
    args = parser.parse_args(argv)
    ATTRIBUTE_RENAMES = args.attribute_renames        # read by disguised(), deep in the class's making
    if args.save_written:
        print(save_written(Path(args.save_written[0]), args.save_written[1]))
        return 0
    if args.written:
        return written_report(args.written, args.crowd, args.seed, args.threshold)
    if args.sweep:
        return sweep(args.sweep, args.threshold)
    made, small = measure(args.students, ASSIGNMENTS, args.seed, args.threshold, args.own_line)
    result = scores(made, small.reported)
    print(f"class: {args.students} students x {len(ASSIGNMENTS)} assignments ({small.compared} notebooks), "
          f"seed {args.seed}, threshold {args.threshold:g}"
          + (", a line of their own per answer" if args.own_line else ""))
    print("\n".join(per_assignment(made, small.reported, ASSIGNMENTS)))
    print(f"reported {result['reported']} pairs: {result['found']} copies, {result['false_positives']} independent "
          f"pairs, {result['coincident']} independent pairs that drew the same bank answers (coincident draws)")
    print(f"precision {result['precision']:.3f} leaving out the coincident draws, "
          f"{result['precision_all']:.3f} counting them as false positives")
    print(f"recall {result['recall']:.3f} of {result['copies']} copy pairs; {result['recall_long']:.3f} of the "
          f"{result['long_copies']} with a long answer copied")
    above, copies = ceiling(made, ASSIGNMENTS)
    print(f"ceiling: a threshold on the joint evidence set knowing the copies would find "
          f"{len(above) / len(copies):.3f} with no independent pair; with the fingerprints' finds, "
          f"{len(above | (small.reported & copies)) / len(copies):.3f}")
    print(f"similarity stage, {small.compared} notebooks: {small.seconds:.2f} s "
          f"({100 * small.seconds / args.grading_seconds:.1f}% of {args.grading_seconds:g} s of grading)")
    large_seconds = float("nan")
    if args.large:
        big, large = measure(args.large, ASSIGNMENTS, args.seed + 1, args.threshold, args.own_line)
        large_seconds = large.seconds
        big_result = scores(big, large.reported)
        print(f"similarity stage, {args.large} students x {len(ASSIGNMENTS)} ({large.compared} notebooks): "
              f"{large.seconds:.2f} s; precision {big_result['precision']:.3f}, precision_all "
              f"{big_result['precision_all']:.3f}, recall {big_result['recall']:.3f}, "
              f"recall of the long copies {big_result['recall_long']:.3f}")
    met, problems = verdict(result, small.seconds, args.grading_seconds)
    print(f"targets (stage <= {100 * TARGET_SHARE:g}% of grading, precision_all >= {TARGET_PRECISION}): "
          + ("met" if met else "NOT met: " + "; ".join(problems)))
    print(f"similarity: precision={result['precision']:.3f} precision_all={result['precision_all']:.3f} "
          f"recall={result['recall']:.3f} "
          f"recall_long={result['recall_long']:.3f} seconds_{args.students}x8={small.seconds:.2f} "
          f"seconds_{args.large}x8={large_seconds:.2f}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
