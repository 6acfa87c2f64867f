"""What the grader knows about each question and the student must not: the correct answers
(built from ``vitref``) and the catalogue of known mistakes. Never bundled into the sandbox.

One module per chapter, next to :mod:`autograder.questions`' module of the same name; each
calls :func:`add` (:mod:`._entry`, the catalogue's lowest module) for its questions. Importing
this package imports every chapter, so :func:`entry` finds every question. The catalogue imports
nothing of :mod:`autograder.judging.judge`: the judge looks an entry up and hands it on.
"""
from __future__ import annotations

import importlib
import pkgutil

from ._entry import _ENTRIES, Entry, add

# Every module of this folder whose name has no leading underscore is a chapter's (or the concepts')
# catalogue, named like its module in autograder.questions; importing it adds its entries.
for _chapter in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_chapter}")

__all__ = ["Entry", "add", "entry"]


def entry(qid: str) -> Entry:
    """The catalogue entry of question ``qid`` (ValueError when there is none)."""
    if qid not in _ENTRIES:
        raise ValueError(f"no references or catalogue for question {qid!r}")
    return _ENTRIES[qid]
