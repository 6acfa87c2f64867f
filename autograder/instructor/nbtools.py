"""Instructor tools around nbgrader: generate the exercises, autograde submissions.

    python -m autograder.instructor.nbtools generate    # make assignments: solutions/ -> exercises/
    python -m autograder.instructor.nbtools autograde   # make autograde: instructor/submitted -> gradebook + CSV
    python -m autograder.instructor.nbtools headers     # only refresh the Colab badge / set-up cells

Both commands drive nbgrader (the library, in this process) with the settings of the
repository's ``nbgrader_config.py``; only the gradebook location is changed where noted.

``generate`` first rewrites the first two cells of every solutions notebook (the
"Open in Colab" badge and the Colab set-up cell) from ``repository.url`` and
``repository.branch`` in ``_config.yml``, and the list of questions that ends the intro
cell from the registry (``autograder.questions()``: answer name, title, points), then runs
``nbgrader generate_assignment`` for every ``solutions/<a>/<a>.ipynb``. nbgrader's output is
deterministic (no timestamps, cell ids taken from the source), so ``exercises/`` only changes when ``solutions/`` or
``_config.yml`` change. Each generated notebook must name its assignment by its own marks (its
grade ids and its check cells' lines, which a ``.py`` export keeps: :func:`marks_problem`), so
that ``python -m autograder check`` finds its questions under any file name. The gradebook
that generation needs is a temporary file: nothing but ``exercises/<a>/<a>.ipynb`` is written.

``autograde`` (``make autograde``) grades every submission under the configured submitted
folder (``instructor/submitted/<student>/<assignment>/<assignment>.ipynb``) with the
sandboxed grader (``python -m autograder grade instructor``: student code runs in the
grading sandbox, never in this process) into nbgrader's gradebook
(``instructor/gradebook.db``, or the configured ``db_url``), writes
``instructor/autograded/`` for formgrader and ``generate_feedback``, the grader's own pages
in ``instructor/autograder-feedback/``, ``instructor/grades.csv`` and
``instructor/report.html``, then exports the gradebook with nbgrader's CSV exporter
(``instructor/nbgrader_grades.csv``).

``feedback`` (``make feedback``) runs ``nbgrader generate_feedback`` for every graded
assignment: ``instructor/feedback/<student>/<assignment>/<assignment>.html``.

``autograde-unsandboxed`` (``make autograde-unsandboxed``) is nbgrader's own
``nbgrader autograde``: it executes every student notebook in a Jupyter kernel **with the
instructor's rights and no sandbox** (a notebook can read the solutions, the gradebook and
the other submissions, and rewrite them). Only for notebooks you trust.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import autograder
from autograder.batch import gradebook
from autograder.batch.cli import main as grade_main
from autograder.hosts.identify import marks

HEADER_IDS = ("open-in-colab", "colab-setup")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
NBGRADER_CSV = "nbgrader_grades.csv"


# --------------------------------------------------------------------------- paths

def find_root(start: str | os.PathLike | None = None) -> Path:
    """The repository root: the first folder upwards holding nbgrader_config.py and solutions/."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
            return folder
    raise SystemExit(
        f"no course repository found at or above {here}: expected a folder with "
        "nbgrader_config.py and solutions/ (run this from the repository)")


def assignments(root: Path) -> list[str]:
    """Assignment names: every solutions/<a>/ that holds <a>.ipynb, sorted."""
    names = []
    for folder in sorted((root / "solutions").iterdir()):
        if folder.is_dir() and (folder / f"{folder.name}.ipynb").is_file():
            names.append(folder.name)
    return names


def solution_path(root: Path, assignment: str) -> Path:
    return root / "solutions" / assignment / f"{assignment}.ipynb"


# ------------------------------------------------------------------- header cells

def repository(root: Path) -> tuple[str, str]:
    """(url, branch) from _config.yml's ``repository`` section."""
    import yaml

    with open(root / "_config.yml", encoding="utf-8") as fh:
        config = yaml.safe_load(fh) or {}
    repo = config.get("repository") or {}
    url = str(repo.get("url", "")).rstrip("/")
    if not url.startswith("https://github.com/"):
        raise SystemExit(
            f"_config.yml: repository.url must be a https://github.com/<owner>/<name> URL "
            f"(the Colab badge and set-up cell are built from it), got {url!r}")
    if url.endswith(".git"):
        url = url[: -len(".git")]
    return url, str(repo.get("branch") or "main")


def colab_url(url: str, branch: str, assignment: str) -> str:
    owner_repo = url[len("https://github.com/"):]
    return (f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/"
            f"exercises/{assignment}/{assignment}.ipynb")


# Assignments that go with a chapter of another name (the others share their chapter's name).
CHAPTER_OF = {"09_training": "07_vit"}


def chapter_of(assignment: str) -> str:
    """The book chapter that goes with ``assignment``."""
    return CHAPTER_OF.get(assignment, assignment)


def chapter_url(url: str, branch: str, assignment: str) -> str:
    """The book chapter of an assignment, in the repository."""
    return f"{url}/blob/{branch}/book/{chapter_of(assignment)}.ipynb"


def header_cells(url: str, branch: str, assignment: str) -> list:
    """The two cells every notebook starts with: the Colab badge and the set-up cell."""
    from nbformat.v4 import new_code_cell, new_markdown_cell

    badge = new_markdown_cell(
        f"[![Open In Colab]({COLAB_BADGE})]({colab_url(url, branch, assignment)})\n"
        f"&nbsp; The chapter that goes with these exercises: "
        f"[book/{chapter_of(assignment)}]({chapter_url(url, branch, assignment)})",
        id=HEADER_IDS[0])
    setup = new_code_cell(
        "# Set-up. In Google Colab this installs the course package (vitref + autograder)\n"
        "# from its repository; Colab's own torch satisfies the requirements, so pip keeps it.\n"
        "# Anywhere else (your machine, nbgrader) this cell does nothing.\n"
        "import sys\n"
        "\n"
        "if \"google.colab\" in sys.modules:\n"
        "    import subprocess\n"
        "\n"
        "    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\",\n"
        f"                    \"git+{url}@{branch}\"], check=True)",
        id=HEADER_IDS[1])
    return [badge, setup]


def _strip(cell) -> dict:
    """A cell's content that matters for comparison (source, type, id, metadata)."""
    return {"cell_type": cell.cell_type, "id": cell.get("id"), "source": cell.source,
            "metadata": dict(cell.metadata)}


def refresh_headers(root: Path, check: bool = False) -> list[str]:
    """Rewrite the header cells of every solutions notebook from _config.yml.

    Returns the assignments whose notebooks were (or, with check=True, would be) changed.
    """
    import nbformat

    url, branch = repository(root)
    changed = []
    for assignment in assignments(root):
        path = solution_path(root, assignment)
        nb = nbformat.read(path, as_version=4)
        wanted = header_cells(url, branch, assignment)
        current = [c for c in nb.cells[:2] if c.get("id") in HEADER_IDS]
        if [_strip(c) for c in current] == [_strip(c) for c in wanted]:
            continue
        changed.append(assignment)
        if not check:
            nb.cells = wanted + [c for c in nb.cells if c.get("id") not in HEADER_IDS]
            nbformat.write(nb, path)
    return changed


# ------------------------------------------------------------ the list of questions

QUESTIONS_HEAD = "**The questions**"
INTRO_ID = "intro"


def _graded_order(nb) -> dict[str, int]:
    """{question id: index of its check cell} (``print(autograder.grade("<id>", ...))``)."""
    order: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        m = re.match(r'print\(autograder\.grade\("(\w+)"', cell.source) if cell.cell_type == "code" else None
        if m:
            order.setdefault(m.group(1), index)
    return order


def question_list(nb, assignment: str) -> str:
    """The list of an assignment's questions that ends its intro cell, built from the registry
    (``autograder.questions()``), in the order of their check cells in the notebook."""
    order = _graded_order(nb)
    questions = sorted((q for q in autograder.questions() if q.chapter == assignment),
                       key=lambda q: order.get(q.id, len(nb.cells)))
    lines = [f"* `{q.answer_name}`: {q.title} ({q.points:g} point{'s' * (q.points != 1)})" for q in questions]
    return (f"{QUESTIONS_HEAD} of this notebook, each graded by the check cell under its answer:\n\n"
            + "\n".join(lines))


def refresh_question_lists(root: Path, check: bool = False) -> list[str]:
    """Rewrite the list of questions at the end of each solutions notebook's intro cell (the
    markdown cell with id ``intro``) from the registry. Returns the assignments whose notebooks
    were (or, with check=True, would be) changed."""
    import nbformat

    changed = []
    for assignment in assignments(root):
        path = solution_path(root, assignment)
        nb = nbformat.read(path, as_version=4)
        intro = next((c for c in nb.cells if c.get("id") == INTRO_ID and c.cell_type == "markdown"), None)
        if intro is None:
            raise SystemExit(f"{path.relative_to(root)}: no markdown cell with id {INTRO_ID!r} (the notebook's "
                             "introduction, after the two header cells), where the list of questions goes")
        head = intro.source.find(QUESTIONS_HEAD)
        text = (intro.source[:head] if head >= 0 else intro.source).rstrip()
        wanted = text + "\n\n" + question_list(nb, assignment)
        if intro.source == wanted:
            continue
        changed.append(assignment)
        if not check:
            intro.source = wanted
            nbformat.write(nb, path)
    return changed


# ------------------------------------------------------------------- nbgrader glue

def _nbgrader_env() -> None:
    # nbgrader's gradebook runs the `alembic` executable: make the venv's bin/ findable
    # when the interpreter is called by its path (as the Makefile does).
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def load_config(root: Path, **course_directory):
    """The repository's nbgrader_config.py as a traitlets Config, with CourseDirectory overrides."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    for key, value in course_directory.items():
        setattr(config.CourseDirectory, key, value)
    return config


def _run(converter_class, config, assignment: str, student: str = "*", **traits) -> None:
    """Run one nbgrader converter (GenerateAssignment, Autograde) like its command would."""
    import logging

    from nbgrader.coursedir import CourseDirectory

    _nbgrader_env()
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = assignment
    coursedir.student_id = student
    converter = converter_class(coursedir=coursedir, config=config)
    for name, value in traits.items():
        setattr(converter, name, value)
    converter.log.setLevel(logging.WARNING)
    converter.start()


def generate(root: Path, release: Path | None = None, names: Iterable[str] | None = None,
             db_dir: Path | None = None) -> list[Path]:
    """``nbgrader generate_assignment`` for each assignment into release (default exercises/).

    The gradebook nbgrader insists on lives in db_dir (default: a temporary folder that is
    removed afterwards). Stale assignment folders in the release folder are removed.
    Returns the generated notebooks.
    """
    from nbgrader.converters import GenerateAssignment

    names = list(names) if names is not None else assignments(root)
    release = Path(release) if release is not None else root / "exercises"
    release.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nbgrader-db-") as tmp:
        db = Path(db_dir or tmp) / "gradebook.db"
        config = load_config(root, release_directory=str(release.resolve()),
                             db_url=f"sqlite:///{db}")
        for assignment in names:
            _run(GenerateAssignment, config, assignment, force=True, create_assignment=True)
    if names == assignments(root):
        for folder in release.iterdir():
            if folder.is_dir() and folder.name not in names:
                shutil.rmtree(folder)
    out = []
    for assignment in names:
        path = release / assignment / f"{assignment}.ipynb"
        if not path.is_file():
            raise SystemExit(f"nbgrader did not write {path}")
        problem = marks_problem(path, assignment)
        if problem:
            raise SystemExit(problem)
        out.append(path)
    return out


def marks_problem(path: Path, assignment: str) -> str | None:
    """What keeps the exercise notebook ``path`` from naming ``assignment`` to ``python -m
    autograder check`` under any file name (:mod:`autograder.hosts.identify`), or None: both marks
    must name every question of it, the grade ids (``<id>_answer``, ``<id>_test``) and the check
    cells' ``print(autograder.grade("<id>", ...))`` lines (all a ``.py`` export keeps)."""
    wanted = [q.id for q in autograder.questions(assignment)]
    by_grade_id, by_check_line = marks(path)
    for found, what in ((by_grade_id, "nbgrader grade ids"), (by_check_line, "check cells")):
        if sorted(found) != sorted(wanted):
            return (f"{path}: its {what} name {sorted(found)}, the questions of {assignment} are {sorted(wanted)}: "
                    f"each question needs its answer and check cells (see CONTRIBUTING.md, \"Add a question\")")
    return None


def submissions(submitted: Path) -> dict[str, list[str]]:
    """{assignment: [students]} for every submitted/<student>/<assignment>/ folder."""
    found: dict[str, list[str]] = {}
    if not submitted.is_dir():
        return found
    for student in sorted(p for p in submitted.iterdir() if p.is_dir()):
        for assignment in sorted(p for p in student.iterdir() if p.is_dir()):
            found.setdefault(assignment.name, []).append(student.name)
    return found


def _course_paths(root: Path, course: Path | None):
    """(course folder, config, {submitted/autograded/feedback dirs}, db_url) from nbgrader_config.py."""
    course = Path(course).resolve() if course is not None else root
    base = load_config(root)
    cd = base.CourseDirectory
    paths = {key: str(course / getattr(cd, key)) for key in
             ("submitted_directory", "autograded_directory", "feedback_directory")}
    db = course / cd.db_url[len("sqlite:///"):] if cd.db_url.startswith("sqlite:///") \
        and not cd.db_url.startswith("sqlite:////") else None
    db_url = f"sqlite:///{db}" if db is not None else cd.db_url
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    config = load_config(root, source_directory=str(root / cd.source_directory),
                         db_url=db_url, **paths)
    config.CourseDirectory.root = str(course)
    return course, config, paths, db_url


def autograde(root: Path, course: Path | None = None, csv: Path | None = None,
              extra: list[str] | None = None) -> Path | None:
    """The sandboxed grader on every submission into nbgrader's gradebook, then nbgrader's
    CSV export. The grading root is the folder that holds the configured submitted/,
    autograded/ and feedback/ folders (``instructor/``). Returns the CSV path (None when
    there was nothing to grade)."""
    course, config, paths, db_url = _course_paths(root, course)
    gradebook.require_nbgrader(db_url)
    submitted = Path(paths["submitted_directory"])
    grading_root = submitted.parent
    if not (Path(paths["autograded_directory"]).parent == grading_root
            == Path(paths["feedback_directory"]).parent):
        raise SystemExit("nbgrader_config.py: submitted_directory, autograded_directory and "
                         "feedback_directory must be siblings (e.g. instructor/submitted, "
                         "instructor/autograded, instructor/feedback) for the sandboxed grader")
    if submitted.name != "submitted" or Path(paths["autograded_directory"]).name != "autograded":
        raise SystemExit("nbgrader_config.py: the sandboxed grader expects the folders to be "
                         "named submitted/ and autograded/ (under one grading root)")
    todo = submissions(submitted)
    if not todo:
        print(f"nothing to grade: put submissions in "
              f"{paths['submitted_directory']}/<student>/<assignment>/<assignment>.ipynb")
        return None
    cid = config.CourseDirectory.course_id
    args = [str(grading_root), "--source", str(root / "solutions"), "--db-url", db_url,
            "--course-id", cid, *(extra or [])]
    code = grade_main(args)
    if code != 0:
        raise SystemExit(code)
    csv = Path(csv) if csv is not None else grading_root / NBGRADER_CSV
    gradebook.export_csv(db_url, cid, csv)
    print(f"scores: {csv}")
    return csv


def feedback(root: Path, course: Path | None = None, force: bool = False) -> list[Path]:
    """``nbgrader generate_feedback`` for every assignment with autograded notebooks."""
    from nbgrader.converters import GenerateFeedback

    course, config, paths, db_url = _course_paths(root, course)
    autograded = Path(paths["autograded_directory"])
    names = sorted({p.name for student in autograded.iterdir() if student.is_dir()
                    for p in student.iterdir() if p.is_dir()}) if autograded.is_dir() else []
    if not names:
        print(f"nothing to do: no graded notebook in {autograded} (run `make autograde` first)")
        return []
    for assignment in names:
        _run(GenerateFeedback, config, assignment, "*", force=force)
    pages = sorted(Path(paths["feedback_directory"]).glob("*/*/*.html"))
    print(f"{len(pages)} feedback page(s) in {paths['feedback_directory']}/<student>/<assignment>/")
    return pages


def autograde_unsandboxed(root: Path, course: Path | None = None, csv: Path | None = None) -> Path | None:
    """nbgrader autograde of every submission, then nbgrader export to CSV. **Runs student
    code unsandboxed, with the instructor's rights** (nbgrader executes each notebook in a
    Jupyter kernel of this user).

    course: the folder that holds nbgrader's instructor-side folders (default: the
    repository itself, i.e. the paths configured in nbgrader_config.py). The source
    notebooks are always the repository's solutions/. Returns the CSV path (None when
    there was nothing to grade).
    """
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde, GenerateAssignment
    from nbgrader.plugins import CsvExportPlugin

    course, config, paths, db_url = _course_paths(root, course)
    cd = config.CourseDirectory
    print("warning: nbgrader autograde runs every student notebook unsandboxed, with your rights "
          "(`make autograde` grades in the sandbox)", file=sys.stderr)

    todo = submissions(Path(paths["submitted_directory"]))
    known = set(assignments(root))
    unknown = sorted(set(todo) - known)
    if unknown:
        print(f"warning: no solutions/ notebook for submitted assignment(s) {unknown}; skipped",
              file=sys.stderr)
    todo = {a: s for a, s in todo.items() if a in known}
    if not todo:
        print(f"nothing to grade: put submissions in "
              f"{paths['submitted_directory']}/<student>/<assignment>/<assignment>.ipynb")
        return None

    with tempfile.TemporaryDirectory(prefix="nbgrader-release-") as tmp:
        for assignment, students in sorted(todo.items()):
            # record the assignment's grade cells in the gradebook (release copy thrown away)
            config.CourseDirectory.release_directory = tmp
            _run(GenerateAssignment, config, assignment, force=True, create_assignment=True)
            print(f"autograding {assignment}: {len(students)} submission(s)", flush=True)
            _run(Autograde, config, assignment, "*", force=True, create_student=True)

    csv = Path(csv) if csv is not None else course / "instructor" / NBGRADER_CSV
    csv.parent.mkdir(parents=True, exist_ok=True)
    exporter = CsvExportPlugin(config=config)
    exporter.to = str(csv)
    with Gradebook(db_url, cd.course_id) as gb:
        exporter.export(gb)
    print(f"scores: {csv}")
    return csv


def scores(db_url: str, course_id: str | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """{(student, assignment): (score, max_score)} from an nbgrader gradebook."""
    from nbgrader.api import Gradebook

    _nbgrader_env()
    out = {}
    with Gradebook(db_url, course_id) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                out[(submission.student.id, assignment.name)] = (
                    float(submission.score), float(submission.max_score))
    return out


# --------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.instructor.nbtools", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="regenerate exercises/ from solutions/ (make assignments)")
    gen.add_argument("--release", help="write here instead of exercises/")
    gen.add_argument("assignment", nargs="*", help="only these assignments")
    head = sub.add_parser("headers", help="refresh the Colab badge and set-up cells from _config.yml")
    head.add_argument("--check", action="store_true", help="only report notebooks out of date (exit 1)")
    grade = sub.add_parser("autograde", help="sandboxed grader + nbgrader export (make autograde)")
    grade.add_argument("--course", help="folder holding instructor/ (default: the repository)")
    grade.add_argument("--csv", help=f"CSV destination (default: instructor/{NBGRADER_CSV})")
    grade.add_argument("grade_args", nargs=argparse.REMAINDER,
                       help="more options for `python -m autograder grade` after --, e.g. -- --jobs 4 --force")
    unsafe = sub.add_parser("autograde-unsandboxed",
                            help="nbgrader's in-kernel autograde: runs student code UNSANDBOXED with your rights")
    unsafe.add_argument("--course", help="folder holding instructor/ (default: the repository)")
    unsafe.add_argument("--csv", help=f"CSV destination (default: instructor/{NBGRADER_CSV})")
    fb = sub.add_parser("feedback", help="nbgrader generate_feedback for every graded assignment (make feedback)")
    fb.add_argument("--course", help="folder holding instructor/ (default: the repository)")
    fb.add_argument("--force", action="store_true", help="regenerate existing pages")
    args = parser.parse_args(argv)
    root = find_root()

    if args.command == "headers":
        changed = refresh_headers(root, check=args.check)
        verb = "out of date" if args.check else "updated"
        print(f"{verb}: {', '.join(changed)}" if changed else "header cells up to date")
        return 1 if (args.check and changed) else 0
    if args.command == "generate":
        changed = refresh_headers(root)
        if changed:
            print(f"header cells updated from _config.yml: {', '.join(changed)}")
        changed = refresh_question_lists(root)
        if changed:
            print(f"lists of questions updated from autograder.questions(): {', '.join(changed)}")
        written = generate(root, Path(args.release) if args.release else None,
                           args.assignment or None)
        for path in written:
            print(f"wrote {path.relative_to(root) if path.is_relative_to(root) else path}")
        return 0
    if args.command == "autograde":
        extra = [a for a in args.grade_args if a != "--"]
        autograde(root, args.course, args.csv, extra)
        return 0
    if args.command == "autograde-unsandboxed":
        autograde_unsandboxed(root, args.course, args.csv)
        return 0
    if args.command == "feedback":
        feedback(root, args.course, args.force)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
