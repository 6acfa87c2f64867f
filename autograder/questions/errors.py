"""The exception a question's recipe raises when an answer's result has the wrong structure.

It lives here, beside the recipes that raise it, so that :mod:`autograder.questions` imports
nothing of :mod:`autograder.student` (the student side's probe catches it and reports its
message; the judge does the same in the grader).
"""
from __future__ import annotations


class CaseFailure(Exception):
    """The answer's result has the wrong structure (e.g. not a tuple of two tensors)."""
