"""Grading a whole class (``python -m autograder grade ROOT``), one module per job:

* :mod:`~autograder.batch.cli`: the ``grade`` command (its options, the run, the summary);
* :mod:`~autograder.batch.tasks`: what there is to grade (one task per submitted folder, read
  without following links), the grader's version, the shards;
* :mod:`~autograder.batch.text`: the student's text (messages, names) made safe where it enters;
* :mod:`~autograder.batch.sources`: the source notebooks (the gradebook's grade cells), the course id;
* :mod:`~autograder.batch.submission`: grading one submission (the sandboxed run, the judges);
* :mod:`~autograder.batch.pool`: the grading jobs, each with its own sandbox;
* :mod:`~autograder.batch.state`: the saved results a second run resumes from;
* :mod:`~autograder.batch.outputs`: ``grades.csv`` and each submission's pages;
* :mod:`~autograder.batch.gradebook` (nbgrader's gradebook), :mod:`~autograder.batch.formgrader`
  (the autograded notebooks), :mod:`~autograder.batch.feedback` (the feedback pages),
  :mod:`~autograder.batch.sanitize` (students' markdown in them), :mod:`~autograder.batch.report`
  (the class report), :mod:`~autograder.batch.export` (``python -m autograder export`` and ``report``);
* :mod:`~autograder.batch.similarity` (answers alike across the class: a winnowing fingerprint
  index) and :mod:`~autograder.batch.similarity_report` (``similarity.csv``, the report's section).
"""
