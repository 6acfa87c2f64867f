"""Student-style answers used by the autograder tests (not part of the package).

* ``bank.py``: the schema of the answer banks; ``chNN_<chapter>.py``: the banks of a chapter's
  questions: each question's solution (``@solution``, the solutions notebook's answer, held equal to
  it by tests/test_answer_banks.py), variants, realistic right answers, realistic wrong answers with
  how each must be named, run by tests/test_answer_banks.py;
* ``solutions.py``: the solutions by answer name (``S.softmax``), and ``PARTS``, the building blocks
  the catalogue's composite mistakes need;
* ``submission.py``: the whole submission (every answer name, one file) written from the banks, for the
  CLI, bench and threat tests;
* ``given.py``: code the notebooks give students (run from their locked given cells), which some answers build on.
"""
