"""Student-style answers used by the autograder tests (not part of the package).

* ``solutions.py``: one correct answer per question, written the way the notebooks'
  solutions are (the notebook solutions should stay consistent with these);
* ``variants.py``: other correct formulations that must also pass.
"""
