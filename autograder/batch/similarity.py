"""Answers of one assignment that are suspiciously alike: a winnowing fingerprint index.

What a copier changes is normalised away (:func:`normalise`): comments, docstrings and bare
string statements, whitespace, line breaks, indentation, parentheses, trailing commas and
semicolons; every name the student chooses (locals, parameters, helpers, and the attributes a
cell assigns that the skeleton does not use, ``self.w_q``: :func:`own_attributes`) becomes ``V``.
Kept as written: keywords, builtins, the attributes read (``x.amax``, ``self.training``) or
fixed by the skeleton (``self.cls_token``), keyword-argument names (``dim=``) and the names the
notebook's skeleton imports or defines (``torch``, ``F``, ``rearrange``; its given classes and
the answer names). Numbers are kept by value
(``1e9`` = ``1000000000.0``), strings by content (either quote).

Each answer (a code cell) gives the hashes of its k-grams of ``K`` normalised tokens, and
winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003: the rightmost smallest hash of every
``WINDOW`` consecutive k-grams) keeps a few of them: every run of ``K + WINDOW - 1`` tokens
two answers share gives them a fingerprint in common, whatever surrounds it. A k-gram of the
skeleton (the released notebook, the source notebook minus its solution regions: the given
code, the signatures, the test cells) is dropped, so what is given is never evidence.

A fingerprint that ``n`` submissions of the assignment have weighs ``1 / n``: what many
students share is how the class writes it (the popular formulation of an answer), not evidence
of copying; what only two share is. A pair's **score** is the weight of the fingerprints they
share divided by the weight of all the fingerprints of the smaller of the two (so a copy inside
more code still scores 1), counting only **long answers**: cells with at least ``MIN_TOKENS``
normalised tokens that are not the skeleton's. Many independent right answers to a small
question are the same few tokens (a one-line softmax), so an answer too short to tell never
decides a pair, alone or together.

**The solution's answer, written the way anyone might, is no evidence.** Where a question leaves
little to choose (a pattern string, a two-line ``forward``, a prediction), students who never met
hand in the same text: the solution's, or one a few edits from it (a variable inlined, arguments
by keyword, a tuple assignment split). Four students who filled the notebooks apart
(``tests/answers/written``) handed in identical answers, two of them or more, to 25 of the 34
questions: 91 pairs of answers alike, all but one at most 8 token edits from the solution's
answer. Where the rest of the class writes otherwise, such an answer looks rare. So a cell
whose own tokens are at most ``NEAR_EDITS`` edits (insertions, deletions, substitutions:
Levenshtein, ``rapidfuzz``) from the solution's answer to its question (the source notebook's
cell, :attr:`Skeleton.solutions`) is **forced**: it is never long and has no answer digest, so
neither rule counts it. A copy of such an answer is not found; nothing in its text tells it
from a classmate's.

Pairs are proposed by an inverted index, fingerprint -> the submissions that have it, over the
*rare* fingerprints only (those at most :func:`rare_cap` submissions share: 3% of the class, at
least 3, at most ``MAX_SHARED``): the work is linear in the class (at most ``MAX_SHARED - 1``
proposals per fingerprint of a submission), never all pairs of students. A proposed pair that
shares at least ``MIN_RARE`` rare fingerprints and a weight of ``MIN_EVIDENCE`` is scored, and
reported when its score reaches the threshold (``DEFAULT_THRESHOLD``, 0.9: a copy of a
13-line answer with one line changed reaches it, with two about 0.84; in the 24 classes of
``python -m bench.similarity --sweep 3``,
0.8 let through 24 independent pairs and 0.9 nine, with 551 and 549 copies found; ``grade
--similarity-threshold``) and the class contradicts none of the long answers it rests on
(:func:`_uncontradicted`): on each question of its shared rare fingerprints, the class shows no
chance (:func:`_chance_collisions`, :meth:`Collisions.shown`): no two pairs of hands hand in the
same answer (or, against a pair whose own answers there are not identical, near-identical long
ones: a fingerprint pair the joint rule does not report) **while handing in different answers to
another question both answer** (one such pair alone may be a copy with an answer of its own: it
is listed, and hides nothing), and no answer there is one more than :func:`joint_cap` of the
class hand in. Where the
class shows independent students writing a long answer alike, one more pair that does is no
evidence by itself; only the joint rule's chance bound can report it (in the 24 synthetic classes
of ``python -m bench.similarity --sweep 3``, the independent pairs reported went from 213 to 23
with this check and the joint rule below: ``bench/RESULTS.md`` section 8). A copier's pair is
identical wherever both answered, so it is no such evidence: three copies of three students' one
long answer do not make one another look like chance (section 8.4). And two classmates who wrote
a long answer nearly alike (a line apart) do not explain a pair alike to the last token. So the
copy of one answer that a dozen students wrote the same way is not found by its fingerprints:
nothing in the text tells it from the others.

**Identical answers, jointly** (:func:`identical_pairs`). A copier's answers are the same text
once normalised on every question copied; independent students often hand in the same short
answer to one question, but rarely the same answers to several. Per question (a cell label), a
submission's **answer** is a digest of its own normalised tokens (the skeleton's left out) in
the cells of that label; ``c_h`` of the ``n`` submissions hand in answer ``h``, whose
**surprisal** is ``log2(n / c_h)`` bits. A pair's **joint evidence** ``S`` is the sum of the
surprisals of the answers they hand in identically. The chance of it: two independent students
both hand in ``h`` with the probability the class's pairs show, ``c_h (c_h - 1) / (n (n - 1))``
(an answer one student wrote is no one's coincidence), independently from one question to the
next; the law of ``S`` is the convolution of the questions' laws (:func:`chance_threshold`). A
pair is reported when it hands in identical answers to at least ``MIN_IDENTICAL`` questions
that at most half the class answers so (``MIN_BITS``: one answer never decides, and an answer
everyone hands in does not make a second; the copy of one long answer is the fingerprints'
case, where the class does not contradict it) and ``S`` reaches the least ``t`` with
``n (n - 1) / 2 · P(S >= t) <= ALPHA``: a union (Bonferroni) bound,
at most ``ALPHA`` pairs of the class expected to reach it by chance. The copies must not
count as chance (:func:`coincidence_rates`): for a rare answer (handed in by at most
:func:`joint_cap`), the rate is read from the pairs that coincide on that question **alone**,
divided by the share of the class's pairs that coincide on no other question. A copier's pair
coincides on every question it copied, so it is left out; independent students coincide on one
question whatever they do on the others, so under independence this is the class's rate. (Counting
the copies as chance, in a class of 100 where every answer is a student's own, ten whole copies
of two answers put the bound at 11.6 bits, over each one's 11.3.) For a common answer, the
class's share of pairs of hands, a group of submissions reported as copies by the fingerprints
(:func:`hands`) counted once. Pairs are proposed by an index of the answers at most
:func:`joint_cap` submissions hand in (10% of the class, at least 3, at most ``MAX_SHARED``):
at most ``MAX_SHARED - 1`` proposals per answer of a submission (:func:`joint_candidates`).
Such a pair is listed whatever its score (the threshold is the fingerprints'), with the
identical cells shown whole.

Why not a library. copydetect (PyPI 0.5.0, installs here with pip, pure Python; needs numpy,
matplotlib, jinja2, pygments, tqdm, all here already) renames identifiers (pygments' names to
``V``, ``F``, ``O``) and winnows k-grams of the characters of what is left, but it compares
every test file with every reference file (``CopyDetector._comparison_loop``): 0.7 ms per pair
of notebooks measured here (a loaded 2-core machine), so about 48 minutes for 1,000 students x 8
assignments (499,500 pairs each). It also reads files from disk, turns attribute names into
``V`` as well (``torch.exp(x)`` and ``torch.log(x)`` both become ``V.V(V)``, so independent
answers look more alike) and has no weight for how many students share a fingerprint. Dolos
(npm) runs under Node.js, outside the grader's process. What they would give is :func:`winnow`.

The sources are students' and never run: the work per submission is bounded (``MAX_CELLS``
cells, ``MAX_CELL_CHARS`` characters per cell and ``MAX_SUBMISSION_CHARS`` in all), a cell
Python's tokenizer cannot finish is read on by a plain regular expression, and nothing here
can raise on a submission's text.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import io
import itertools
import keyword
import math
import re
import tokenize
import zlib
from dataclasses import dataclass, field

import numpy as np

K = 8                       # tokens per k-gram: a shorter run in common is noise
WINDOW = 4                  # winnowing window: any run of K + WINDOW - 1 = 11 shared tokens is seen
MIN_TOKENS = 60             # a cell with fewer tokens of its own (not the skeleton's: ~5 lines) is too short to tell
RARE_SHARE = 0.03           # a fingerprint more of the class shares does not propose a pair...
MIN_SHARED, MAX_SHARED = 3, 30   # ...but one 3 submissions share does; one more than 30 share never (linear work)
MIN_RARE = 2                # rare fingerprints a pair must share to be scored
MIN_EVIDENCE = 3.0          # the least shared weight that can make a pair (6 fingerprints only the two have)
DEFAULT_THRESHOLD = 0.9     # the score from which a pair is reported (a copy with a line in ten changed)
ALPHA = 0.01                # the joint rule: the expected chance pairs of a class, at most
MIN_IDENTICAL = 2           # the joint rule: the least questions answered identically...
MIN_BITS = 1.0              # ...each with an answer at most half the class hands in (1 bit)
JOINT_SHARE = 0.1           # an answer more of the class hands in proposes no pair (at most MAX_SHARED)
BIT_STEPS = 8               # the joint rule's law of chance evidence: on a grid of 1/8 bit
NEAR_EDITS = 8              # a cell at most this many token edits from the solution's answer is forced (no evidence)

MAX_CELL_CHARS = 20_000     # characters of one cell read (an answer is a few hundred)
MAX_CELLS = 300             # code cells of one submission read
MAX_SUBMISSION_CHARS = 200_000

_BASE = np.uint64(0x100000001B3)
# not the soft keywords: ``_``, ``match`` and ``case`` are names a student chooses (``for _, w in pairs``)
_KEEP_ALWAYS = frozenset(dir(builtins)) | frozenset(keyword.kwlist)
_DROPPED_OPS = frozenset({"(", ")", ";"})
_ASSIGNING = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "**=", "&=", "|=", "^=", ">>=", "<<="})
_CLOSERS = frozenset({")", "]", "}"})
_FALLBACK = re.compile(r"#[^\n]*|[^\W\d]\w*|\d[\w.]*|'[^'\n]*'?|\"[^\"\n]*\"?|\S")
_MAGIC = re.compile(r"^[ \t]*[%!]", re.MULTILINE)


@dataclass(frozen=True)
class Token:
    """A normalised token and where it was in the cell's source (character offsets)."""

    text: str
    start: int
    end: int


# ---------------------------------------------------------------- normalising a cell

def _line_starts(source: str) -> list[int]:
    starts = [0]
    for match in re.finditer("\n", source):
        starts.append(match.end())
    return starts


def _raw_tokens(source: str) -> list[tuple[str, str, int, int]]:
    """``(kind, text, start, end)`` of the significant tokens of ``source``: Python's tokenizer
    (comments, line breaks and docstrings dropped), and from where it gives up, a regular
    expression (an unfinished string or bracket, a bad indentation: read on, never raised)."""
    starts = _line_starts(source)
    out: list[tuple[str, str, int, int]] = []
    line: list[tuple[str, str, int, int]] = []      # the logical line so far (docstrings)
    resume = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = tokenize.tok_name.get(tok.type, "OP")
            start = starts[tok.start[0] - 1] + tok.start[1] if tok.start[0] <= len(starts) else len(source)
            end = starts[tok.end[0] - 1] + tok.end[1] if tok.end[0] <= len(starts) else len(source)
            resume = end
            if kind in ("NEWLINE", "ENDMARKER"):
                if not all(k == "STRING" for k, *_ in line):    # a bare string is a docstring
                    out.extend(line)
                line = []
            elif kind not in ("NL", "COMMENT", "INDENT", "DEDENT", "ENCODING"):
                line.append((kind, tok.string, start, end))
    except (tokenize.TokenError, SyntaxError, ValueError, IndexError) as error:
        position = error.args[1] if len(error.args) > 1 and isinstance(error.args[1], tuple) else None
        if position and isinstance(position[0], int) and 0 < position[0] <= len(starts):
            resume = max(resume, min(len(source), starts[position[0] - 1] + max(0, int(position[1] or 0))))
        out.extend(line)
        out.extend(_fallback_tokens(source, resume))
    return out


def _fallback_tokens(source: str, begin: int) -> list[tuple[str, str, int, int]]:
    out = []
    for match in _FALLBACK.finditer(source, begin):
        text = match.group()
        if text.startswith("#"):
            continue
        kind = ("NAME" if text[0].isalpha() or text[0] == "_" else "NUMBER" if text[0].isdigit()
                else "STRING" if text[0] in "'\"" else "OP")
        out.append((kind, text, match.start(), match.end()))
    return out


def _number(text: str) -> str:
    try:
        return "N" + repr(float(text.replace("_", "")))
    except ValueError:
        return "N"


def _string(text: str) -> str:
    if len(text) > 200:
        return f"S{zlib.crc32(text.encode('utf-8', 'surrogatepass')):x}"
    try:
        return "S" + repr(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "S"


def _magic_as_comments(source: str) -> str:
    """``source`` with its ``%magic`` and ``!shell`` lines made comments (the same length)."""
    return _MAGIC.sub(lambda m: m.group()[:-1] + "#", source)


def _attribute_key(raw: list[tuple[str, str, int, int]], index: int) -> tuple[str, str]:
    """``(base, name)`` of the attribute name at ``raw[index]`` (after a dot): what is written
    before the dot (``self``), and the name."""
    return (raw[index - 2][1] if index >= 2 else "", raw[index][1])


def own_attributes(raw: list[tuple[str, str, int, int]], given: frozenset = frozenset()) -> frozenset:
    """``{(base, name)}``: the attributes a cell assigns (``self.w_q = ...``, ``x.total += 1``; at the
    top level of a statement, not inside brackets) that ``given`` (the attribute names the notebook's
    skeleton uses) does not fix: names the student chose, which an editor's rename changes
    everywhere. With the name written before the dot (``self``), so that assigning ``self.softmax``
    does not make ``x.softmax`` a name of the student's."""
    names = set()
    depth = 0
    for index, (kind, text, _start, _end) in enumerate(raw):
        if kind == "OP" and text in ("(", "[", "{"):
            depth += 1
        elif kind == "OP" and text in _CLOSERS:
            depth = max(0, depth - 1)
        elif kind == "NAME" and depth == 0 and index and raw[index - 1][1] == "." and index + 1 < len(raw) \
                and raw[index + 1][0] == "OP" and raw[index + 1][1] in _ASSIGNING and text not in given:
            names.add(_attribute_key(raw, index))
    return frozenset(names)


def _dotted_names(source: str) -> set[str]:
    """The names written after a dot in ``source`` (attributes read or set, ``torch.nn`` included)."""
    raw = _raw_tokens(_magic_as_comments(source[:MAX_CELL_CHARS]))
    return {text for (_, dot, *_), (kind, text, *_) in zip(raw, raw[1:]) if dot == "." and kind == "NAME"}


def normalise(source: str, keep: frozenset = frozenset(), attributes: frozenset = frozenset()) -> list[Token]:
    """The tokens of a cell as a copier cannot change them (see the module's docstring);
    ``keep``: names the notebook defines, kept as written; ``attributes``: the attribute names
    its skeleton uses (every other attribute the cell assigns is the student's name,
    :func:`own_attributes`). ``%magic`` and ``!shell`` lines are comments here; at most
    :data:`MAX_CELL_CHARS` characters are read."""
    source = _magic_as_comments(source[:MAX_CELL_CHARS])
    raw = _raw_tokens(source)
    chosen = own_attributes(raw, attributes)
    out: list[Token] = []
    brackets: list[str] = []
    previous = ""
    for index, (kind, text, start, end) in enumerate(raw):
        following = raw[index + 1][1] if index + 1 < len(raw) else ""
        if kind == "OP" and text in ("(", "[", "{"):
            brackets.append(text)
        elif kind == "OP" and text in _CLOSERS and brackets:
            brackets.pop()
        if kind == "NAME":
            named_argument = following == "=" and brackets[-1:] == ["("]
            if previous == ".":
                text = "V" if _attribute_key(raw, index) in chosen else text
            elif not (text in _KEEP_ALWAYS or text in keep or named_argument):
                text = "V"
        elif kind == "NUMBER":
            text = _number(text)
        elif kind == "STRING":
            text = _string(text)
        elif kind.startswith("FSTRING"):       # Python 3.12: an f-string's parts; one S for it
            text = "S" if kind == "FSTRING_START" else ""
        elif text in _DROPPED_OPS or (text == "," and following in _CLOSERS):
            text = ""
        previous = raw[index][1]
        if text:
            out.append(Token(text, start, end))
    return out


def defined_names(sources: list[str]) -> frozenset:
    """The names a notebook's skeleton imports or defines at the top level (modules, given
    classes and functions, answer names); not the variables it assigns (``P = ...`` in a test
    cell), which students use as locals too."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(_magic_as_comments(source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


# ---------------------------------------------------------------- hashing and winnowing

_TOKEN_IDS: dict[str, int] = {}


def _token_ids(tokens: list[Token]) -> np.ndarray:
    ids = np.empty(len(tokens), dtype=np.uint64)
    for index, token in enumerate(tokens):
        value = _TOKEN_IDS.get(token.text)
        if value is None:
            value = zlib.crc32(token.text.encode("utf-8", "surrogatepass")) * 0x9E3779B1 + len(token.text)
            if len(token.text) <= 64 and len(_TOKEN_IDS) < 1_000_000:       # bounded: a name can be long
                _TOKEN_IDS[token.text] = value
        ids[index] = value & 0xFFFFFFFFFFFFFFFF
    return ids


def kgram_hashes(tokens: list[Token]) -> np.ndarray:
    """The hash of every run of :data:`K` tokens (uint64; empty for a shorter cell); the
    same tokens give the same hashes in every process."""
    ids = _token_ids(tokens)
    count = len(ids) - K + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    hashes = np.zeros(count, dtype=np.uint64)
    for offset in range(K):
        hashes = hashes * _BASE + ids[offset:offset + count]
    return hashes


def winnow(hashes: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The positions winnowing keeps: in every ``window`` consecutive hashes, the rightmost
    smallest (sorted, each once). Fewer hashes than a window: the smallest of them."""
    if len(hashes) == 0:
        return np.zeros(0, dtype=np.int64)
    if len(hashes) <= window:
        return np.array([len(hashes) - 1 - int(np.argmin(hashes[::-1]))])
    windows = np.lib.stride_tricks.sliding_window_view(hashes, window)
    rightmost = window - 1 - np.argmin(windows[:, ::-1], axis=1)
    return np.unique(np.arange(len(windows)) + rightmost)


# ---------------------------------------------------------------- a class's submissions

@dataclass
class Skeleton:
    """What an assignment gives every student: names kept as written, k-grams never evidence;
    and the solution's answer to each question, from which a cell a few edits away is forced."""

    keep: frozenset = frozenset()
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    attributes: frozenset = frozenset()         # the attribute names it uses (``.cls_token``), kept as written
    solutions: dict[str, list[list[str]]] = field(default_factory=dict)   # label -> own tokens of its solution cells

    @classmethod
    def of(cls, sources: list[str], solutions: list[tuple[str, str]] = ()) -> Skeleton:
        """``sources``: the given code; ``solutions``: ``(label, source)`` of the solution's answer cells."""
        keep = defined_names(sources)
        attributes = frozenset(name for source in sources for name in _dotted_names(source))
        parts = [kgram_hashes(normalise(s, keep, attributes)) for s in sources]
        skeleton = cls(keep, np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64), attributes)
        for label, source in solutions:
            skeleton.solutions.setdefault(label, []).append(_own_texts(source, skeleton)[1])
        return skeleton

    def forced(self, label: str, own: list[str]) -> bool:
        """Whether a cell of ``label`` whose own tokens are ``own`` is at most :data:`NEAR_EDITS`
        token edits from the solution's answer (a question without one: never)."""
        solutions = self.solutions.get(label, ())
        if not own or not solutions:
            return False
        # here, not at the top: the student's `check` imports this module and needs no rapidfuzz
        from rapidfuzz.distance import Levenshtein
        return any(Levenshtein.distance(own, solution, score_cutoff=NEAR_EDITS) <= NEAR_EDITS for solution in solutions)


def _own_texts(source: str, skeleton: Skeleton) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``(hashes of every k-gram, the cell's own token texts, which k-grams are its own)`` of a cell:
    its own tokens are those in a k-gram that is not the ``skeleton``'s, in order."""
    tokens = normalise(source, skeleton.keep, skeleton.attributes)
    every = kgram_hashes(tokens)
    own_kgram = ~np.isin(every, skeleton.hashes)
    covered = np.zeros(len(tokens) + 1, dtype=np.int64)
    starts = np.flatnonzero(own_kgram)
    np.add.at(covered, starts, 1)
    np.add.at(covered, starts + K, -1)
    mine = np.cumsum(covered)[:len(tokens)] > 0
    return every, [t.text for t, m in zip(tokens, mine) if m], own_kgram


@dataclass
class Cell:
    """One code cell of a submission: its label (the question it answers, else ``cell N``),
    its source, and its fingerprints (hash, position of the k-gram) outside the skeleton."""

    label: str
    source: str
    hashes: np.ndarray
    positions: np.ndarray
    own_tokens: int                 # tokens in k-grams that are not the skeleton's
    answer: int = 0                 # a digest of those tokens in order (0: none, or forced; :func:`answer_digest`)
    forced: bool = False            # a few edits from the solution's answer (:meth:`Skeleton.forced`): no evidence

    @property
    def long(self) -> bool:
        return self.own_tokens >= MIN_TOKENS and not self.forced


@dataclass
class Submission:
    student: str
    cells: list[Cell]


def fingerprint_cell(label: str, source: str, skeleton: Skeleton, cache: dict | None = None) -> Cell:
    """A cell's fingerprints outside the skeleton (``cache``: by the label and a digest of the source,
    for the cells most students leave as given). The source is kept only for a cell with tokens of
    its own; a forced cell (:meth:`Skeleton.forced`) has no answer digest."""
    source = source[:MAX_CELL_CHARS]
    digest = hashlib.blake2b(label.encode("utf-8", "surrogatepass") + b"\x00" + source.encode("utf-8", "surrogatepass"),
                             digest_size=16).digest()
    if cache is not None and digest in cache:
        hashes, positions, own, answer, forced = cache[digest]
        return Cell(label, source if own else "", hashes, positions, own, answer, forced)
    every, texts, own_kgram = _own_texts(source, skeleton)
    kept = winnow(every)
    kept = kept[own_kgram[kept]]
    forced = skeleton.forced(label, texts)
    answer = 0 if forced else answer_digest(texts)
    if cache is not None and len(cache) < 200_000:
        cache[digest] = (every[kept], kept, len(texts), answer, forced)
    return Cell(label, source if texts else "", every[kept], kept, len(texts), answer, forced)


def answer_digest(texts: list[str]) -> int:
    """A 63-bit digest of a cell's own normalised tokens (0 for none): two answers identical
    once normalised, the skeleton's tokens left out, have the same digest."""
    if not texts:
        return 0
    joined = "\x00".join(texts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(joined, digest_size=8).digest(), "little") >> 1 or 1


def fingerprint_submission(student: str, cells: list[tuple[str, str]], skeleton: Skeleton,
                           cache: dict | None = None) -> Submission:
    """``cells``: ``(label, source)`` of the submission's code cells; at most :data:`MAX_CELLS`
    of them and :data:`MAX_SUBMISSION_CHARS` characters in all are read."""
    out, budget = [], MAX_SUBMISSION_CHARS
    for label, source in cells[:MAX_CELLS]:
        if budget <= 0:
            break
        source = source[:min(MAX_CELL_CHARS, budget)]
        budget -= len(source)
        out.append(fingerprint_cell(label, source, skeleton, cache))
    return Submission(student, out)


# ---------------------------------------------------------------- pairs

@dataclass
class Match:
    """Two cells of a pair that share fingerprints, with the character spans they share."""

    label_a: str
    label_b: str
    weight: float
    source_a: str
    spans_a: list[tuple[int, int]]
    source_b: str
    spans_b: list[tuple[int, int]]
    identical: bool = False         # the two cells are identical once normalised (the joint rule)


@dataclass
class Pair:
    assignment: str
    student_a: str
    student_b: str
    score: float                    # shared weight / weight of the smaller submission (long cells)
    shared: float                   # the shared weight
    matches: list[Match] = field(default_factory=list)
    bits: float = 0.0               # joint evidence of the identical answers (0: under the chance bound)
    identical: list[str] = field(default_factory=list)   # the questions answered identically (the joint rule)

    @property
    def questions(self) -> list[str]:
        """The labels of the matched cells, the heaviest first, each once."""
        return list(dict.fromkeys(label for m in self.matches for label in (m.label_a, m.label_b)))


def _long_fingerprints(submission: Submission) -> np.ndarray:
    parts = [cell.hashes for cell in submission.cells if cell.long]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)


class Frequencies:
    """How many submissions have each fingerprint, and its weight ``1 / count``: a fingerprint
    few students share weighs more than one many share."""

    def __init__(self, prints: list[np.ndarray]):
        every = np.concatenate(prints) if prints else np.zeros(0, dtype=np.uint64)
        self.hashes, self.counts = np.unique(every, return_counts=True)
        self.weights = 1.0 / np.maximum(self.counts, 1)

    def weight(self, hashes: np.ndarray) -> float:
        """The summed weight of ``hashes`` (fingerprints of the class)."""
        return float(self.weights[np.searchsorted(self.hashes, hashes)].sum()) if len(hashes) else 0.0

    def rare(self, cap: int) -> np.ndarray:
        """The fingerprints that 2 to ``cap`` submissions share."""
        return self.hashes[(self.counts >= 2) & (self.counts <= cap)]


def rare_cap(submissions: int) -> int:
    """How many submissions may share a fingerprint for it to propose a pair: ``RARE_SHARE`` of
    the class, at least ``MIN_SHARED``, at most ``MAX_SHARED`` (so the proposals stay linear)."""
    return int(min(MAX_SHARED, max(MIN_SHARED, math.ceil(RARE_SHARE * submissions))))


def candidates(prints: list[np.ndarray], rare: np.ndarray) -> dict[tuple[int, int], int]:
    """``{(i, j): rare fingerprints they share}`` from the inverted index of the ``rare``
    fingerprints (each held by at most :func:`rare_cap` submissions): never all pairs."""
    owners = [np.full(int(np.isin(p, rare).sum()), i, dtype=np.int64) for i, p in enumerate(prints)]
    hashes = np.concatenate([p[np.isin(p, rare)] for p in prints]) if prints else np.zeros(0, dtype=np.uint64)
    if len(hashes) == 0:
        return {}
    owner = np.concatenate(owners)
    order = np.lexsort((owner, hashes))
    hashes, owner = hashes[order], owner[order]
    starts = np.flatnonzero(np.concatenate([[True], hashes[1:] != hashes[:-1]]))
    sizes = np.diff(np.concatenate([starts, [len(hashes)]]))
    count, keys = len(prints), []
    for size in np.unique(sizes):
        members = owner[starts[sizes == size][:, None] + np.arange(size)]        # (groups, size)
        keys.extend(members[:, a] * count + members[:, b] for a, b in itertools.combinations(range(size), 2))
    found, shared = np.unique(np.concatenate(keys), return_counts=True) if keys else ([], [])
    return {(int(k) // count, int(k) % count): int(n) for k, n in zip(found, shared)}


# ---------------------------------------------------------------- identical answers, jointly

def answer_keys(submission: Submission) -> dict[int, str]:
    """``{key: label}``: a key per question (cell label) the submission answers, from its own
    normalised tokens in the cells of that label, in order; a question with none has no key."""
    digests: dict[str, list[int]] = {}
    for cell in submission.cells:
        if cell.answer:
            digests.setdefault(cell.label, []).append(cell.answer)
    out = {}
    for label, parts in digests.items():
        text = label.encode("utf-8", "surrogatepass") + b"\x00" + b"".join(p.to_bytes(8, "little") for p in parts)
        out[int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1] = label
    return out


class Answers:
    """The class's answers: every submission's keys (sorted, ``(answers,)`` int64) and their rows in
    the table of keys, how many submissions hand in each key, its surprisal ``log2(n / count)``
    (bits) and its question."""

    def __init__(self, submissions: list[Submission]):
        labels: dict[int, str] = {}
        self.keys = []
        for submission in submissions:
            mine = answer_keys(submission)
            labels.update(mine)
            self.keys.append(np.array(sorted(mine), dtype=np.int64))
        every = np.concatenate(self.keys) if self.keys else np.zeros(0, dtype=np.int64)
        self.table, self.counts = np.unique(every, return_counts=True)
        self.bits = np.log2(max(len(submissions), 1) / np.maximum(self.counts, 1))
        names = sorted(set(labels.values()))
        self.question = np.array([names.index(labels[int(k)]) for k in self.table], dtype=np.int64)
        self.labels = labels
        self.rows = [self.lookup(k) for k in self.keys]     # each submission's answers, as rows of the table

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The rows of ``keys`` (keys of the class) in :attr:`table`."""
        return np.searchsorted(self.table, keys)


def class_share(written: np.ndarray, students: int) -> np.ndarray:
    """Per answer, the share of the class's pairs that both hand it in: ``c (c - 1) / (n (n - 1))``
    for an answer ``c`` of the ``n`` students (or hands, :func:`hands`) hand in."""
    return written * (written - 1) / (students * (students - 1))


def chance_threshold(answers: Answers, students: int, both: np.ndarray | None = None, alpha: float = ALPHA) -> float:
    """The joint evidence (bits) from which a pair is reported: the least ``t`` at which the
    expected number of the class's pairs reaching ``t`` by chance, ``pairs · P(S >= t)``, is at
    most ``alpha`` (``S``'s law: see the module's docstring; computed on a grid of
    ``1 / BIT_STEPS`` bit, every surprisal rounded up, so ``P`` is over-estimated, never under).
    ``both``: per answer, the chance that two independent students both hand it in
    (:func:`coincidence_rates`); by default the share of the class's pairs that do."""
    if students < 2 or len(answers.table) == 0:
        return math.inf
    if both is None:
        both = class_share(answers.counts, students)
    steps = np.ceil(answers.bits * BIT_STEPS - 1e-9).astype(np.int64)
    law = np.ones(1)                                                    # P(S = s / BIT_STEPS)
    for question in np.unique(answers.question):
        mine = answers.question == question
        one = np.zeros(int(steps[mine].max()) + 1)
        np.add.at(one, steps[mine], both[mine])                           # both hand in that answer
        one[0] += max(0.0, 1.0 - float(both[mine].sum()))                 # they differ (or one has none)
        law = np.convolve(law, one)
    tail = np.append(np.cumsum(law[::-1])[::-1], 0.0)                 # P(S >= s / BIT_STEPS)
    expected = students * (students - 1) / 2 * tail
    return float(np.flatnonzero(expected <= alpha)[0]) / BIT_STEPS


def joint_cap(students: int) -> int:
    """How many submissions may hand in one answer for it to propose a pair (``JOINT_SHARE`` of
    the class, at least ``MIN_SHARED``, at most ``MAX_SHARED``: linear proposals)."""
    return int(min(MAX_SHARED, max(MIN_SHARED, math.ceil(JOINT_SHARE * students))))


def joint_candidates(answers: Answers) -> list[tuple[int, int]]:
    """The pairs that may hand in ``MIN_IDENTICAL`` identical answers, proposed by the answers at
    most :func:`joint_cap` submissions hand in (linear work): those they share there, plus at most
    the common answers both could share. (No bound on bits here: the bound is
    :func:`identical_pairs`'s.)"""
    count, cap, rows = len(answers.keys), joint_cap(len(answers.keys)), answers.rows
    common = [answers.counts[r] > cap for r in rows]
    common_n = np.array([int(c.sum()) for c in common] or [0])
    owner = np.concatenate([np.full(int((~c).sum()), i) for i, c in enumerate(common)] or [np.zeros(0, int)])
    row = np.concatenate([r[~c] for r, c in zip(rows, common)] or [np.zeros(0, int)])
    order = np.lexsort((owner, row))
    owner, row = owner[order], row[order]
    starts = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]])) if len(row) else np.zeros(0, int)
    sizes = np.diff(np.concatenate([starts, [len(row)]]))
    keys = []
    for size in np.unique(sizes[sizes >= 2]):
        group = starts[sizes == size]
        members = owner[group[:, None] + np.arange(size)]                    # (groups, size)
        for a, b in itertools.combinations(range(size), 2):
            keys.append(members[:, a] * count + members[:, b])
    if not keys:
        return []
    found, shared = np.unique(np.concatenate(keys), return_counts=True)
    first, second = found // count, found % count
    possible = shared + np.minimum(common_n[first], common_n[second]) >= MIN_IDENTICAL
    return [(int(i), int(j)) for i, j in zip(first[possible], second[possible])]


def _roots(count: int, copies: set[tuple[int, int]]) -> np.ndarray:
    """``(count,)``: each submission's hand, the least member of its group of ``copies`` (pairs,
    joined transitively)."""
    root = np.arange(count)
    for i, j in sorted(copies):
        a, b = root[i], root[j]
        root[root == max(a, b)] = min(a, b)                    # a few pairs: O(pairs · n) at most
    return root


def hands(answers: Answers, copies: set[tuple[int, int]]) -> np.ndarray:
    """How many hands wrote each answer of the class (``(answers,)``): its submissions, the
    members of a group of ``copies`` (pairs, joined transitively) counted once."""
    count = len(answers.keys)
    root = _roots(count, copies)
    rows = np.concatenate(answers.rows or [np.zeros(0, int)])
    owners = np.concatenate([np.full(len(k), root[i]) for i, k in enumerate(answers.keys)] or [np.zeros(0, int)])
    distinct = np.unique(rows * count + owners) // count
    return np.bincount(distinct, minlength=len(answers.table)).astype(float)


def coincidence_rates(answers: Answers, written: np.ndarray, copies: set[tuple[int, int]] = frozenset()) -> np.ndarray:
    """``(answers,)``: the chance that two independent students both hand in each answer. For an
    answer many hand in (more than :func:`joint_cap`), the share of the class's pairs of hands
    (``written``, :func:`hands`) that do. For a rare one, what the pairs that coincide **on that
    question alone** show: a copier's pair coincides on every question copied, and counting it
    would make a copy look like chance, while independent students coincide on one question
    whatever they do on the others. So the pairs of its holders that hand in no other telling
    answer alike (bits >= ``MIN_BITS``; not ``copies``) are counted, and divided by the share of
    pairs that coincide on no other question, ``prod (1 - P_q)``, ``P_q`` the share of the class's
    pairs that hand in a telling answer alike on question ``q``: under independence from one
    question to the next, the same rate as the class's, the copies left out. The pairs counted are
    those of the rare answers' holders: at most ``joint_cap(n)^2 / 2`` per answer, linear work."""
    count = len(answers.keys)
    if count < 2:
        return np.zeros(len(answers.table))
    pairs = count * (count - 1) / 2
    both = class_share(written, count)
    telling = answers.bits >= MIN_BITS
    rare = (answers.counts >= 2) & (answers.counts <= joint_cap(count))
    if not rare.any():
        return both
    shares = np.bincount(answers.question[telling], weights=both[telling],
                         minlength=int(answers.question.max()) + 1)            # P_q
    apart = np.array([np.prod(np.delete(1.0 - shares, q)) for q in range(len(shares))])
    holders: dict[int, list[int]] = {}
    for student, rows in enumerate(answers.rows):
        for row in rows[rare[rows]].tolist():
            holders.setdefault(row, []).append(student)
    told = [set(rows[telling[rows]].tolist()) for rows in answers.rows]
    alone = np.zeros(len(answers.table))
    for row, who in holders.items():
        alone[row] = sum(1 for a, b in itertools.combinations(who, 2)
                         if (a, b) not in copies and not (told[a] & told[b]) - {row})
    both[rare] = alone[rare] / pairs / np.maximum(apart[answers.question[rare]], 1e-12)
    return both


def identical_pairs(submissions: list[Submission], copies: set[tuple[int, int]] = frozenset(),
                    answers: Answers | None = None) -> dict[tuple[int, int], tuple[float, list[str]]]:
    """``{(i, j): (bits, questions)}``: the pairs whose answers are identical (once normalised) on
    at least ``MIN_IDENTICAL`` telling questions, whose summed surprisal reaches
    :func:`chance_threshold` under :func:`coincidence_rates` (``copies``, pairs reported already,
    count as one hand each and are no coincidence). ``answers``: the submissions' :class:`Answers`,
    if built already."""
    answers = Answers(submissions) if answers is None else answers
    copies = set(copies)
    both = coincidence_rates(answers, hands(answers, copies), copies)
    threshold = chance_threshold(answers, len(submissions), both)
    out: dict[tuple[int, int], tuple[float, list[str]]] = {}
    for i, j in joint_candidates(answers):
        shared = np.intersect1d(answers.keys[i], answers.keys[j], assume_unique=True)
        rows = answers.lookup(shared)
        telling = shared[answers.bits[rows] >= MIN_BITS]         # answers at most half the class hands in
        evidence = float(answers.bits[rows].sum())
        if len(telling) >= MIN_IDENTICAL and evidence >= threshold:
            out[(i, j)] = (evidence, sorted(answers.labels[int(k)] for k in telling))
    return out


# ---------------------------------------------------------------- pairs

def _pair_score(prints: list[np.ndarray], table: Frequencies, totals: list[float], i: int, j: int
                ) -> tuple[float, float]:
    """``(score, shared weight)`` of submissions ``i`` and ``j``: the weight of the fingerprints they
    share, and that weight over the weight of the smaller one's (0 when it has none)."""
    shared = table.weight(np.intersect1d(prints[i], prints[j], assume_unique=True))
    smaller = min(totals[i], totals[j])
    return (shared / smaller if smaller > 0 else 0.0), shared


def _fingerprint_pairs(prints: list[np.ndarray], table: Frequencies, totals: list[float], rare_prints: np.ndarray,
                       threshold: float) -> dict[tuple[int, int], tuple[float, float]]:
    """``{(i, j): (score, shared weight)}`` of the pairs the fingerprint rule reports, proposed by
    the ``rare_prints``."""
    out = {}
    for (i, j), rare in candidates(prints, rare_prints).items():
        if rare < MIN_RARE:
            continue
        score, shared = _pair_score(prints, table, totals, i, j)
        if shared >= MIN_EVIDENCE and score >= threshold:
            out[(i, j)] = (score, shared)
    return out


def similar_pairs(assignment: str, submissions: list[Submission], keep: frozenset = frozenset(),
                  threshold: float = DEFAULT_THRESHOLD) -> list[Pair]:
    """The pairs of ``submissions`` (one assignment) that either rule reports, the highest score
    first, each with its matched cells (``keep``: the skeleton's names, for the spans): the
    fingerprint score reaches ``threshold``, or the identical answers reach the chance bound."""
    prints = [_long_fingerprints(s) for s in submissions]
    table = Frequencies(prints)
    totals = [table.weight(p) for p in prints]
    rare_prints = table.rare(rare_cap(len(prints)))
    answers = Answers(submissions)
    by_answers = identical_pairs(submissions, answers=answers)
    by_prints = _fingerprint_pairs(prints, table, totals, rare_prints, threshold)
    shared_labels = {pair: _shared_long_labels(submissions[pair[0]], submissions[pair[1]], rare_prints)
                     for pair in by_prints}
    chance = _chance_collisions(answers, set(by_answers),
                                {pair: labels for pair, labels in shared_labels.items() if pair not in by_answers})
    by_prints = {(i, j): found for (i, j), found in by_prints.items()
                 if (i, j) in by_answers or _uncontradicted(i, j, shared_labels[(i, j)], chance)}
    if set(by_prints) - set(by_answers):
        by_answers = identical_pairs(submissions, set(by_prints), answers)
    pairs = []
    for i, j in sorted(set(by_prints) | set(by_answers)):
        a, b = sorted((submissions[i], submissions[j]), key=lambda s: s.student)
        score, shared = by_prints.get((i, j)) or _pair_score(prints, table, totals, i, j)
        bits, identical = by_answers.get((i, j), (0.0, []))
        matches = _matches(a, b, table, keep, rare_prints)
        matches += _identical_matches(a, b, identical, {m.label_a for m in matches})
        pairs.append(Pair(assignment, a.student, b.student, round(min(score, 1.0), 3), round(shared, 1),
                          matches, round(bits, 1), identical))
    return sorted(pairs, key=lambda p: (-p.score, -p.bits, p.student_a, p.student_b))


@dataclass
class Collisions:
    """Per question (cell label), what the class shows of chance: the pairs of hands that hand in the
    same answer (``identical``) or near-identical long ones (``near``) and yet differ on another
    question both answer, and how many pairs of hands hand in an answer more than :func:`joint_cap`
    of the class hand in (``common``); ``keys``: each submission's ``{label: answer key}``."""

    identical: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    near: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    common: dict[str, float] = field(default_factory=dict)
    keys: list[dict[str, int]] = field(default_factory=list)

    def shown(self, i: int, j: int, label: str) -> bool:
        """Whether the class shows chance on ``label`` against the pair ``(i, j)``: at least two pairs
        show it there, the pair itself counted if it is one of them (near-identical ones only when
        ``i`` and ``j``'s own answers are not identical: a pair alike to the last token is more than
        students who write nearly alike explain), or an answer there is common. One such pair alone
        may be a copy with an answer of its own elsewhere: it is listed (nothing contradicts it) and
        contradicts no other. The pair's own identical answer, if it rests on ``label``, is rare:
        never one of the common."""
        mine = self.keys[i].get(label)
        against = self.identical.get(label, set())
        if mine is None or mine != self.keys[j].get(label):
            against = against | self.near.get(label, set())
        return len(against) >= 2 or self.common.get(label, 0.0) > 0


def _differ_elsewhere(mine: dict[str, int], theirs: dict[str, int], labels: set[str]) -> bool:
    """Whether two submissions (``{label: answer key}`` each) hand in different answers to a question
    not in ``labels`` that both answer: what two students who did not copy each other show."""
    return any(label not in labels and label in theirs and theirs[label] != key for label, key in mine.items())


def _chance_collisions(answers: Answers, copies: set[tuple[int, int]],
                       near: dict[tuple[int, int], set[str]]) -> Collisions:
    """What the class shows of chance (:class:`Collisions`). A pair of hands that hand in the same
    answer to a question (or near-identical long answers, ``near``: the fingerprint pairs and the
    labels they rest on) is chance's evidence only when the two hand in different answers to
    another question both answer (:func:`_differ_elsewhere`): a copier's pair is identical on all
    it copied, so the copies of a class do not make one another look like chance. An answer more
    than :func:`joint_cap` of the class hand in is the class's way to write it: its pairs of hands
    count whatever they do elsewhere. ``copies``: pairs already reported, one hand each. Linear
    work: at most ``joint_cap(n)^2 / 2`` pairs per rare answer."""
    count = len(answers.keys)
    by_label = [{answers.labels[int(k)]: int(k) for k in keys} for keys in answers.keys]
    out = Collisions(keys=by_label)
    if count < 2:
        return out
    root = _roots(count, copies)
    written = hands(answers, copies)
    cap = joint_cap(count)
    holders: dict[int, list[int]] = {}
    for student, rows in enumerate(answers.rows):
        for row in rows.tolist():
            holders.setdefault(row, []).append(student)
    for row, who in holders.items():
        label = answers.labels[int(answers.table[row])]
        if answers.counts[row] > cap:
            out.common[label] = out.common.get(label, 0.0) + written[row] * (written[row] - 1) / 2
            continue
        distinct = list({int(root[s]): s for s in who}.values())             # one submission per hand
        for a, b in itertools.combinations(sorted(distinct), 2):
            if _differ_elsewhere(by_label[a], by_label[b], {label}):
                out.identical.setdefault(label, set()).add((a, b))
    for (i, j), labels in near.items():
        if _differ_elsewhere(by_label[i], by_label[j], labels):
            for label in labels:
                if by_label[i].get(label) is None or by_label[i].get(label) != by_label[j].get(label):
                    out.near.setdefault(label, set()).add((i, j))
    return out


def _rare_cell_pairs(a: Submission, b: Submission, rare: np.ndarray):
    """``(cell of a, cell of b, their common fingerprints)`` for the long cells of ``a`` and ``b``
    that share a ``rare`` fingerprint: what a pair rests on (a cell whose shared text most of the
    class also has, the class's usual answer, is not evidence of this pair)."""
    for cell_a in (c for c in a.cells if c.long):
        for cell_b in (c for c in b.cells if c.long):
            common = np.intersect1d(cell_a.hashes, cell_b.hashes)
            if np.isin(common, rare).any():
                yield cell_a, cell_b, common


def _shared_long_labels(a: Submission, b: Submission, rare: np.ndarray) -> set[str]:
    """The questions (cell labels) of the long cells of ``a`` and ``b`` that share a ``rare`` fingerprint."""
    return {label for cell_a, cell_b, _ in _rare_cell_pairs(a, b, rare) for label in (cell_a.label, cell_b.label)}


def _uncontradicted(i: int, j: int, labels: set[str], chance: Collisions) -> bool:
    """Whether the class contradicts none of the long answers a fingerprint pair (submissions ``i``
    and ``j``) rests on (its ``labels``): on none of those questions does the class show chance
    (:meth:`Collisions.shown`: two pairs of hands alike there and different elsewhere, or an
    answer many hand in). Where independent students are seen to write one long answer alike, one more pair
    that does is no evidence by itself: only the joint rule's chance bound decides it."""
    return not any(chance.shown(i, j, label) for label in labels)


def _identical_matches(a: Submission, b: Submission, questions: list[str], shown: set[str]) -> list[Match]:
    """The cells of the ``questions`` whose answers ``a`` and ``b`` hand in identical (once
    normalised), not already ``shown``, the whole of each marked."""
    out = []
    for label in questions:
        if label in shown:
            continue
        cells_a = [c for c in a.cells if c.label == label and c.answer]
        cells_b = [c for c in b.cells if c.label == label and c.answer]
        for cell_a, cell_b in zip(cells_a, cells_b):
            out.append(Match(label, label, 0.0, cell_a.source, [(0, len(cell_a.source))], cell_b.source,
                             [(0, len(cell_b.source))], identical=True))
    return out


def _spans(source: str, positions: np.ndarray, keep: frozenset) -> list[tuple[int, int]]:
    """The character spans of the k-grams starting at token ``positions``, merged."""
    tokens = normalise(source, keep)
    spans: list[tuple[int, int]] = []
    for position in sorted(int(p) for p in positions):
        last = min(position + K, len(tokens)) - 1
        if position > last:
            continue
        start, end = tokens[position].start, tokens[last].end
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _matches(a: Submission, b: Submission, table: Frequencies, keep: frozenset, rare: np.ndarray) -> list[Match]:
    """The long cells of ``a`` and ``b`` that share a ``rare`` fingerprint (:func:`_rare_cell_pairs`),
    the heaviest first: the class's usual answer is not shown as if it were evidence."""
    out = []
    for cell_a, cell_b, common in _rare_cell_pairs(a, b, rare):
        spans_a = _spans(cell_a.source, cell_a.positions[np.isin(cell_a.hashes, common)], keep)
        spans_b = _spans(cell_b.source, cell_b.positions[np.isin(cell_b.hashes, common)], keep)
        out.append(Match(cell_a.label, cell_b.label, round(table.weight(common), 1), cell_a.source, spans_a,
                         cell_b.source, spans_b))
    return sorted(out, key=lambda m: -m.weight)
