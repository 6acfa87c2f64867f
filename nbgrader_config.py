"""nbgrader configuration for the course (one file, at the repository root).

solutions/<assignment>/<assignment>.ipynb is nbgrader's *source* directory and
exercises/<assignment>/ its *release* directory: `make assignments` regenerates
exercises/ from solutions/. Submissions and the gradebook live under instructor/
(gitignored)."""
c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "instructor/submitted"
c.CourseDirectory.autograded_directory = "instructor/autograded"
c.CourseDirectory.feedback_directory = "instructor/feedback"
c.CourseDirectory.db_url = "sqlite:///instructor/gradebook.db"
c.CourseDirectory.course_id = "vit-from-scratch"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "data", "runs"]
