"""nbgrader configuration for the course (one file, at the repository root).

solutions/<assignment>/<assignment>.ipynb is nbgrader's *source* directory and
exercises/<assignment>/ its *release* directory: `make assignments` regenerates
exercises/ from solutions/. Submissions and the gradebook live under instructor/
(gitignored): `make autograde` grades instructor/submitted/ with the sandboxed grader
(`python -m autograder grade instructor`) into this gradebook and writes
instructor/autograded/, which `nbgrader formgrader` and `nbgrader generate_feedback`
(instructor/feedback/) read. For a class graded by several machines, point db_url at one
PostgreSQL database (the same URL as `python -m autograder grade --db-url`)."""
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

# The gradebook below lives in instructor/ (gitignored); SQLite cannot create a file in a
# missing folder, so make sure it exists when nbgrader is run from the repository root.
os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructor"), exist_ok=True)

c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "instructor/submitted"
c.CourseDirectory.autograded_directory = "instructor/autograded"
c.CourseDirectory.feedback_directory = "instructor/feedback"
c.CourseDirectory.db_url = "sqlite:///instructor/gradebook.db"
c.CourseDirectory.course_id = "vit-from-scratch"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "data", "runs"]

# Executing a submission: a generous per-cell limit (first torch import on a cold laptop).
c.Execute.timeout = 300

# nbgrader scores a test cell 0 as soon as it has *any* stderr output. Python warnings
# (torch, einops, numpy deprecations) go to stderr, so drop stderr outputs that are
# warnings ("<file>:<line>: SomethingWarning: ...") before grading; errors still fail.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?m)^.*:\d+: \w*Warning: "
