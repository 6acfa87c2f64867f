"""The whole submission: every question's solution in one Python file, written from the answer banks.

The CLI, bench and threat tests hand a student's whole submission to the autograder; this module writes
one from the banks' ``@solution`` (and ``solution_value``) answers, so that a new question's solution
is written once, in its bank, and reaches them with no other edit. Each chapter's solutions go in a
function of their own, ``_chapter_<NN>_<name>()``, with the code they use (the notebook's given code
from ``given.py``, the chapter's other answers, library imports at the top), as each notebook is a
namespace of its own (chapter 4's ``MultiHeadAttention`` is the student's, chapter 8's is given);
the answer names are bound at the top level from what each function returns, as a notebook leaves them.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import autograder

from .bank import solutions

PLAIN_VALUES = (bool, int, float, str)


def _own(value: Any) -> bool:
    """Whether a function or class is defined in tests/answers (its source goes into the submission)."""
    return (getattr(value, "__module__", "") or "").rsplit(".", 1)[0] == __package__


def _import_line(name: str, value: Any) -> str:
    if isinstance(value, ModuleType):
        return f"import {value.__name__}" if name == value.__name__ else f"import {value.__name__} as {name}"
    module = value.__module__
    top = module.split(".")[0]
    if getattr(importlib.import_module(top), value.__name__, None) is value:
        module = top                                   # einops.rearrange rather than einops.einops.rearrange
    alias = "" if name == value.__name__ else f" as {name}"
    return f"from {module} import {value.__name__}{alias}"


def _start(node: ast.AST) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _definition(obj: Any) -> tuple[str, ast.AST]:
    """The source of a function or class without its decorators, and its parsed node. (A class is
    found by the lines of its methods: a chapter file may define several classes of one name, as
    chapter 6's notebook does, and inspect would give the first.)"""
    module_source = inspect.getsource(sys.modules[obj.__module__])
    nodes = [n for n in ast.parse(module_source).body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == obj.__name__]
    if inspect.isclass(obj):
        lines = {f.__code__.co_firstlineno for f in vars(obj).values() if hasattr(f, "__code__")}
        nodes = [n for n in nodes if any(n.lineno <= line <= n.end_lineno for line in lines)] or nodes
    else:
        nodes = [n for n in nodes if _start(n) <= obj.__code__.co_firstlineno <= n.end_lineno]   # 3.11: decorators
    assert len(nodes) == 1, f"{obj!r}: expected one top-level definition of it in {obj.__module__}, found {len(nodes)}"
    node = nodes[0]
    node.decorator_list = []                           # @solution(...) registers the answer: not part of it
    lines = module_source.splitlines(keepends=True)
    end = node.end_lineno
    while end < len(lines) and lines[end].startswith(" ") and lines[end].lstrip().startswith("#"):
        end += 1                                       # a closing comment (### END SOLUTION) is the definition's
    return "".join(lines[node.lineno - 1:end]), node


def _free_names(node: ast.AST) -> list[str]:
    """The names a definition reads that it does not bind itself, in the order they first appear."""
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg] if a is not None}
    bound |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node}
    loaded = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [name for name in dict.fromkeys(loaded) if name not in bound]


class _Chapter:
    """One chapter's definitions, each made by a function of its own (a cell of its own, as in the
    notebook) that takes what the definition reads as parameters and returns it, into a top-level name
    of its own (``_<chapter>_<name>``): a name each definition reads means what it means in the bank's
    module, whatever another chapter calls by that name."""

    def __init__(self, chapter: str, imports: dict[str, str]):
        self.chapter = chapter
        self.imports = imports                         # name -> import line, shared by every chapter
        self.cells: list[str] = []
        self.slots: dict[int, str] = {}                # id(definition) -> its top-level name

    def _import(self, name: str, value: Any, where: str) -> None:
        line = _import_line(name, value)
        assert self.imports.setdefault(name, line) == line, (
            f"{where}: {name!r} is imported as {line!r} and as {self.imports[name]!r}: use one name per import")

    def define(self, obj: Any) -> str:
        """The top-level name that holds ``obj`` once the cells so far have run."""
        if id(obj) in self.slots:
            return self.slots[id(obj)]
        source, node = _definition(obj)
        module = vars(sys.modules[obj.__module__])
        where = f"{obj.__module__}.{obj.__name__}"
        arguments = {}                                 # parameter -> argument
        for name in _free_names(node):
            if name not in module:
                continue                               # a builtin
            value = module[name]
            if isinstance(value, ModuleType) or (callable(value) and not _own(value)):
                self._import(name, value, where)
            elif callable(value):
                arguments[name] = self.define(value)
            elif isinstance(value, PLAIN_VALUES):
                arguments[name] = repr(value)
            else:
                raise TypeError(f"{where} reads {name!r}, a {type(value).__name__}: the whole submission copies "
                                f"functions, classes, modules and plain numbers or strings only")
        slot = f"_{self.chapter}_{obj.__name__}"
        taken = set(self.slots.values())
        slot = next(f"{slot}_{n}" if n else slot for n in range(len(taken) + 1)
                    if (f"{slot}_{n}" if n else slot) not in taken)
        self.slots[id(obj)] = slot
        body = source + f"\nreturn {obj.__name__}\n"
        self.cells.append(f"def _make{slot}({', '.join(arguments)}):\n{textwrap.indent(body, '    ')}\n\n"
                          f"{slot} = _make{slot}({', '.join(arguments.values())})\n")
        return slot


def _chapter_cells(chapter: str, questions: list, found: dict[str, Any], imports: dict[str, str]) -> list[str]:
    body = _Chapter(chapter, imports)
    answers: dict[str, str] = {}                       # answer name -> what it is bound to
    for q in questions:
        answer = found[q.id]
        if q.kind == "value":
            answers[q.answer_name] = repr(answer)
            continue
        assert getattr(answer, "__name__", None) == q.answer_name, (
            f"{q.id}'s @solution is named {getattr(answer, '__name__', answer)!r}: its answer name is {q.answer_name}")
        answers[q.answer_name] = body.define(answer)
    return [*body.cells, "".join(f"{name} = {value}\n" for name, value in answers.items())]


def submission_source(questions=None) -> str:
    """Python source defining the answer name of every question (by default the registry's) as its
    solution; a question without a solution fails with where to add it."""
    questions = list(autograder.questions() if questions is None else questions)
    found = solutions()
    missing = [q.id for q in questions if q.id not in found]
    assert not missing, (f"no solution for {missing}: add @solution(<id>) (or solution_value(<id>, <number>)) to "
                         f"the question's chapter file tests/answers/ch<chapter>.py")
    imports: dict[str, str] = {}
    chapters = list(dict.fromkeys(q.chapter for q in questions))
    cells = [cell for c in chapters for cell in _chapter_cells(c, [q for q in questions if q.chapter == c], found,
                                                                 imports)]
    header = ('"""Every question\'s solution, written by tests/answers/submission.py from the answer banks."""\n'
              + "\n".join(sorted(set(imports.values()))) + "\n\n\n")
    return header + "\n\n".join(cells)


def write_submission(path, questions=None) -> Path:
    """Write :func:`submission_source` to ``path`` (a ``.py`` file) and return the path."""
    path = Path(path)
    path.write_text(submission_source(questions), encoding="utf-8")
    return path
