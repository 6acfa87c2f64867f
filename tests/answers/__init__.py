"""Student-style answers used by the autograder tests (not part of the package).

* ``solutions.py``: one correct answer per question, written the way the notebooks' solutions
  are (the notebook solutions should stay consistent with these); also a whole submission file;
* ``bank.py``: the schema of the answer banks; ``chNN_<chapter>.py``: the banks of a chapter's
  questions (variants, realistic right answers, realistic wrong answers with how each must be
  named), run by tests/test_answer_banks.py;
* ``given.py``: code the notebooks give students (copied), which some answers build on.
"""
