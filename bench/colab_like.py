"""Every notebook of the course in a Colab-like environment, outside the repository.

    python -m bench.colab_like                            # all of them: book/, exercises/, solutions/
    python -m bench.colab_like --only 03_attention book/07_vit
    python -m bench.colab_like --keep /tmp/colab --timeout 900

What Colab gives a student, rebuilt offline:

* a fresh virtual environment (in a temporary folder, or ``--keep DIR``) with only what Colab
  has preinstalled: torch and torchvision at requirements.txt's pins, matplotlib, numpy,
  ipykernel, nbclient, nbformat; not the course and none of its other requirements;
* the notebook's own set-up cell, unedited, installs the course: ``pip install
  git+<repository.url of _config.yml>@<branch>``. The kernel's HOME has a .gitconfig whose
  ``insteadOf`` sends that URL to a bare clone of this repository's HEAD (its branch
  ``main``, or the configured branch, points at HEAD); pip fetches the other dependencies
  (einops, tqdm; timm for chapter 7) from the package index, as in Colab (your PIP_*
  variables apply, your user pip.conf does not: HOME is the kernel's);
* ``google.colab`` is importable (a stand-in package on the kernel's PYTHONPATH) and imported
  when the kernel starts (an IPython start-up file), so every notebook takes its Colab branch;
* each notebook is a copy, as committed at HEAD, in a folder outside the repository, and runs
  in the environment's own kernel (nbclient, the environment's ipykernel).

Before each notebook the environment is put back to its preinstalled packages (what an
earlier notebook installed is uninstalled): each notebook starts from a fresh "runtime".
Uncommitted changes are not seen: commit first.

Verdicts. ``book/`` and ``solutions/`` (a student who filled every blank): no cell may fail.
``exercises/`` (the blanks raise by design), run to the end: the set-up cell, the imports and
every given cell run without error; an answer cell fails only because of its blank
(NotImplementedError, or a NameError for a name an earlier blank left undefined); every check
cell prints the checker's feedback (the AssertionError of ``autograder.grade``, saying that the
answer is still blank: "still raises NotImplementedError" for a function or a class, "no answer
yet" for a concept answer, which the blank exercise sets to None above its blank), except that a
check whose answer a blank left undefined stops at that NameError before the checker is called:
counted and shown on the notebook's line, a failure only with ``--strict-checks``. Every notebook
must also have installed the course, from the repository URL at HEAD, during its own run.

One line per notebook (name, ok/FAIL, seconds), then ``colab_like: N notebooks, F failures,
total S s``; the exit status is 1 when a notebook failed. Chapter 7 trains for minutes: the
whole run took 12 minutes on 2 shared cores (bench/RESULTS.md), and about 6 GB of disk for the
environment (torch with its CUDA libraries, as Colab has it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("book", "exercises", "solutions")
# What Colab has preinstalled, of what the course needs; torch and torchvision at requirements.txt's pins.
PINNED = ("torch", "torchvision")
PREINSTALLED = ("matplotlib", "numpy", "ipykernel", "nbclient", "nbformat")
DEFAULT_TIMEOUT = 900     # per cell, as the book build (_config.yml: execute.timeout)
# Environment variables that would make the kernel see something else than a Colab runtime does.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV", "CONDA_PREFIX",
               "IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH", "JUPYTER_RUNTIME_DIR",
               "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "PIP_CONFIG_FILE", "PIP_USER",
               "PIP_REQUIRE_VIRTUALENV", "VITREF_FAST", "MPLBACKEND")
BLANK = "raise NotImplementedError"   # what nbgrader leaves in an answer cell
BLANK_ERRORS = ("NotImplementedError",)
# What the checker's feedback on a blank says (one of these): a function or class answer "still raises
# NotImplementedError"; a concept answer, which the blank exercise sets to None above its blank, "no answer yet"
# (autograder/student/probe.py, ProbeRecorder.run). tests/test_bench_verdicts.py runs the real checker on blanks.
BLANK_FEEDBACK = ("NotImplementedError", "no answer yet")
COURSE = "vitref-course"   # the distribution the set-up cells install
CHECKER_CRASH = "the checker itself failed"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

FAKE_COLAB = '''"""Stand-in for Colab's ``google.colab`` (bench/colab_like.py): importing it works, as in Colab."""
IN_COLAB_LIKE_BENCHMARK = True
'''
# Colab's kernel has google.colab imported before the first cell runs; so does this one.
STARTUP = "import google.colab  # noqa: F401 - bench/colab_like.py: the kernel starts as Colab's does\n"

# Runs in the environment's Python (its nbclient, its kernel), cwd = the notebook's folder.
RUNNER = '''\
import json, os, sys, time
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

src, dst, report, timeout, allow_errors = sys.argv[1:6]
nb = nbformat.read(src, as_version=4)
client = NotebookClient(nb, timeout=int(timeout), allow_errors=allow_errors == "1", kernel_name="python3",
                        resources={"metadata": {"path": os.path.dirname(os.path.abspath(src))}})
start, error = time.perf_counter(), None
try:
    client.execute()
except Exception as exc:  # a failing cell (without allow_errors), a timeout, a dead kernel
    lines = str(exc).strip().splitlines()
    error = type(exc).__name__ + (": " + lines[-1][:500] if lines else "")
finally:
    seconds = time.perf_counter() - start
    nbformat.write(nb, dst)
with open(report, "w") as fh:
    json.dump({"seconds": seconds, "error": error,
               "kernel_argv": KernelSpecManager().get_kernel_spec("python3").argv}, fh)
'''


# ----------------------------------------------------------------------- preparation (pure helpers)

def pins(requirements: str, names=PINNED) -> list[str]:
    """``name==version`` of ``names`` in a requirements.txt text (comments and other lines ignored)."""
    found = {}
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==\s*([^\s;]+)", line)
        if m and m.group(1).lower() in names:
            found[m.group(1).lower()] = f"{m.group(1)}=={m.group(2)}"
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"requirements.txt pins no exact version of {missing}")
    return [found[n] for n in names]


def make_bare_clone(repo: Path, dest: Path, branch: str = "main") -> str:
    """A bare clone of ``repo`` at ``dest`` whose ``branch`` (and HEAD) is ``repo``'s HEAD; its sha."""
    sha = git(repo, "rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", "--bare", "--no-local", str(repo), str(dest)], check=True,
                   capture_output=True)
    git(dest, "update-ref", f"refs/heads/{branch}", sha)
    git(dest, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    return sha


def git(repo: Path, *args: str, env=None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def gitconfig(url: str, bare: Path) -> str:
    """A .gitconfig that sends ``url`` (what the set-up cells install from) to the bare clone."""
    return (f'[url "{bare.resolve().as_uri()}"]\n'
            f"\tinsteadOf = {url}\n"
            "[advice]\n"
            "\tdetachedHead = false\n")


def prepare_home(home: Path, url: str, bare: Path) -> None:
    """The kernel's HOME: the .gitconfig above and the IPython start-up file importing google.colab."""
    (home / ".gitconfig").parent.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text(gitconfig(url, bare), encoding="utf-8")
    startup = home / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-google-colab.py").write_text(STARTUP, encoding="utf-8")


def make_fake_colab(folder: Path) -> Path:
    """``folder/google/colab/__init__.py``; no ``google/__init__.py``, so that ``google`` stays a
    namespace package and other ``google.*`` distributions (protobuf, ...) still import."""
    package = folder / "google" / "colab"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(FAKE_COLAB, encoding="utf-8")
    return folder


def kernel_env(base: dict, home: Path, fake_colab: Path, venv: Path) -> dict:
    """The environment of the notebook runner and its kernel: ``base`` without what would leak
    this machine's Python set-up into it, with the fake HOME, the fake google.colab on
    PYTHONPATH and the environment's bin/ first on PATH."""
    env = {k: v for k, v in base.items() if k not in DROPPED_ENV and not k.startswith("GIT_")}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = str(fake_colab)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), base.get("PATH", os.defpath)])
    env["PYTHONNOUSERSITE"] = "1"
    return env


def extra_packages(base: set[str], now: set[str]) -> list[str]:
    """Distributions installed since the environment was made (normalised names), to uninstall."""
    return sorted(now - base)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ----------------------------------------------------------------------- which notebooks

@dataclass
class Notebook:
    kind: str            # book / exercises / solutions
    name: str            # 03_attention
    path: str            # its path in the repository

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"


def notebooks(paths: list[str]) -> list[Notebook]:
    """The course's notebooks among repository paths: book chapters (``book/NN_*.ipynb``), then
    ``exercises/<a>/<a>.ipynb``, then ``solutions/<a>/<a>.ipynb``."""
    found = []
    for path in paths:
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "book" and re.fullmatch(r"\d\d_\w+\.ipynb", parts[1]):
            found.append(Notebook("book", parts[1][:-6], path))
        elif len(parts) == 3 and parts[0] in KINDS[1:] and parts[2] == f"{parts[1]}.ipynb":
            found.append(Notebook(parts[0], parts[1], path))
    return sorted(found, key=lambda n: (KINDS.index(n.kind), n.name))


def select(all_notebooks: list[Notebook], only: list[str] | None) -> list[Notebook]:
    """``--only``: a NAME picks the notebooks whose label (``exercises/03_attention``), name
    (``03_attention``: all three kinds), kind (``book``) or number (``03``) it is."""
    if not only:
        return list(all_notebooks)
    chosen, unknown = [], []
    for wanted in only:
        wanted = wanted.strip("/").removesuffix(".ipynb")
        hits = [n for n in all_notebooks
                if wanted in (n.label, n.name, n.kind, n.name.split("_", 1)[0])
                or n.path.removesuffix(".ipynb") == wanted]
        if not hits:
            unknown.append(wanted)
        chosen += [n for n in hits if n not in chosen]
    if unknown:
        raise ValueError(f"no notebook matches {unknown}; names look like book/07_vit, exercises/03_attention, "
                         f"03_attention, 03 or book")
    return [n for n in all_notebooks if n in chosen]


# ----------------------------------------------------------------------- verdicts (pure helpers)

def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def errors(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def describe(index: int, cell: dict, error: dict | None = None) -> str:
    where = f"cell {index}" + (f" ({cell['id']})" if cell.get("id") else "")
    if error is None:
        return where
    value = " ".join(str(error.get("evalue", "")).split())
    return f"{where}: {error.get('ename')}: {value[:300]}"


def code_cells(nb: dict) -> list[tuple[int, dict]]:
    return [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]


def clean_run_problems(nb: dict, runner_error: str | None = None) -> list[str]:
    """A notebook that must run with no error (book, solutions): what went wrong, or []."""
    for index, cell in code_cells(nb):
        for error in errors(cell):
            return [describe(index, cell, error)]
    problems = [runner_error] if runner_error else []
    unrun = [describe(i, c) for i, c in code_cells(nb) if c.get("execution_count") is None and source(c).strip()]
    if unrun:
        problems.append(f"{len(unrun)} cell(s) not run, from {unrun[0]}")
    return problems


def nbgrader_role(cell: dict) -> str:
    """``answer`` (an nbgrader solution cell), ``check`` (a grade cell) or ``given`` (anything else)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "check"
    return "given"


def undefined_name(error: dict) -> str | None:
    m = re.fullmatch(r"name '(\w+)' is not defined", str(error.get("evalue", "")))
    return m.group(1) if error.get("ename") == "NameError" and m else None


def is_checker_feedback(error: dict) -> bool:
    """The AssertionError that ``autograder.grade`` raises with the checker's feedback (and not
    the feedback of a checker that crashed)."""
    if error.get("ename") != "AssertionError" or CHECKER_CRASH in str(error.get("evalue", "")):
        return False
    trace = ANSI.sub("", "\n".join(error.get("traceback", [])))
    return "raise AssertionError(result.feedback)" in trace and bool(str(error.get("evalue", "")).strip())


def says_blank(feedback: str) -> bool:
    """Does the checker's feedback say that the answer is still the exercise's blank?"""
    return any(words in feedback for words in BLANK_FEEDBACK)


@dataclass
class ExerciseVerdict:
    problems: list[str] = field(default_factory=list)
    blanks: int = 0           # answer cells holding a blank (nbgrader's `raise NotImplementedError()`)
    feedback: int = 0         # check cells that printed the checker's feedback
    undefined: int = 0        # check cells whose answer a blank left undefined (NameError)
    passed: int = 0           # check cells that passed

    def summary(self) -> str:
        checks = self.feedback + self.undefined + self.passed
        parts = [f"{self.feedback} feedback"]
        if self.undefined:
            parts.append("1 answer left undefined by its blank" if self.undefined == 1
                         else f"{self.undefined} answers left undefined by their blanks")
        if self.passed:
            parts.append(f"{self.passed} passed")
        return (f"{self.blanks} blank{'s' * (self.blanks != 1)}; {checks} check{'s' * (checks != 1)}: "
                f"{', '.join(parts)}")


def exercise_verdict(nb: dict, runner_error: str | None = None, strict: bool = False) -> ExerciseVerdict:
    """A blank exercise notebook run to the end with allow_errors: see the module's docstring.
    ``strict``: a check cell must print the checker's feedback even where its answer's blank left
    the answer undefined (a NameError before the checker is called is then a failure)."""
    verdict = ExerciseVerdict()
    if runner_error:
        verdict.problems.append(runner_error)
    left_undefined = ""      # the source of the answer cells that raised: the names a blank kept from being set
    blank_before = False     # does the last answer cell hold a blank?
    checks = 0
    for index, cell in code_cells(nb):
        role, errs = nbgrader_role(cell), errors(cell)
        if cell.get("execution_count") is None and source(cell).strip():
            verdict.problems.append(f"{describe(index, cell)} ({role}) did not run")
            continue
        checks += role == "check"
        if role == "given":
            verdict.problems += [f"{describe(index, cell, e)} (set-up or given code)" for e in errs]
        elif role == "answer":
            blank_before = BLANK in source(cell)
            verdict.blanks += blank_before
            for error in errs:
                name = undefined_name(error)
                if error.get("ename") in BLANK_ERRORS or (name and re.search(rf"\b{name}\b", left_undefined)):
                    left_undefined += source(cell) + "\n"
                else:
                    verdict.problems.append(f"{describe(index, cell, error)} (answer cell: not its blank)")
        else:
            if not errs:
                verdict.passed += 1
            for error in errs:
                name = undefined_name(error)
                if is_checker_feedback(error):
                    verdict.feedback += 1
                    if blank_before and not says_blank(str(error.get("evalue", ""))):
                        verdict.problems.append(f"{describe(index, cell, error)} (the checker's feedback does not "
                                                f"say that the answer is still blank: neither "
                                                f"{' nor '.join(map(repr, BLANK_FEEDBACK))})")
                elif name and re.search(rf"\b{name}\b", left_undefined) and not strict:
                    verdict.undefined += 1
                else:
                    verdict.problems.append(f"{describe(index, cell, error)} (check cell crashed)")
    if not checks:
        verdict.problems.append("no check cell (nbgrader grade cell) found")
    return verdict


def install_problem(direct_url: dict | None, url: str, branch: str, sha: str) -> str | None:
    """Did the set-up cell install the course from ``url@branch`` at ``sha``? (pip's direct_url.json)"""
    if direct_url is None:
        return "the course (vitref-course) was not installed by the set-up cell"
    vcs = direct_url.get("vcs_info") or {}
    if vcs.get("vcs") != "git" or direct_url.get("url", "").rstrip("/") != url:
        return f"the course was installed from {direct_url.get('url')!r}, not from git+{url}"
    if vcs.get("requested_revision") != branch or vcs.get("commit_id") != sha:
        return (f"the course was installed at {vcs.get('requested_revision')}={vcs.get('commit_id', '?')[:12]}, "
                f"not {branch}=HEAD={sha[:12]}")
    return None


# ----------------------------------------------------------------------- running

class Environment:
    """The Colab-like virtual environment and the kernel's HOME, in ``work``."""

    def __init__(self, work: Path, url: str, branch: str):
        self.work, self.url, self.branch = work, url, branch
        self.venv, self.home = work / "venv", work / "home"
        self.python = self.venv / "bin" / "python"
        self.fake_colab = work / "fake-colab"
        self.base_file = self.venv / "colab-like-preinstalled.json"

    def create(self) -> str:
        """Make (or, with --keep, reuse) the environment; a line saying what it holds."""
        if self.base_file.is_file() and self.python.exists():
            if COURSE in json.loads(self.base_file.read_text(encoding="utf-8")):
                raise RuntimeError(f"{self.venv} was made with the course preinstalled: remove it")
            self.reset()
            return f"environment reused: {self.venv}"
        shutil.rmtree(self.venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        wanted = pins((ROOT / "requirements.txt").read_text(encoding="utf-8")) + list(PREINSTALLED)
        done = subprocess.run([str(self.python), "-I", "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               *wanted], capture_output=True, text=True, cwd=self.work)
        if done.returncode:
            raise RuntimeError(f"pip install {' '.join(wanted)} failed:\n{done.stderr[-3000:]}")
        subprocess.run([str(self.python), "-I", "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"],
                       check=True, capture_output=True, cwd=self.work)
        installed = self.installed()
        if COURSE in installed:
            raise RuntimeError(f"{self.venv}: the course is installed before any notebook ran")
        self.base_file.write_text(json.dumps(sorted(installed)), encoding="utf-8")
        return f"environment: {self.venv} ({', '.join(wanted)}; {len(installed)} distributions)"

    def prepare(self, sha_repo: Path) -> str:
        """The bare clone of HEAD, the kernel's HOME and the fake google.colab; HEAD's sha."""
        bare = self.work / "transformers-from-scratch.git"
        shutil.rmtree(bare, ignore_errors=True)
        sha = make_bare_clone(sha_repo, bare, self.branch)
        shutil.rmtree(self.home, ignore_errors=True)
        prepare_home(self.home, self.url, bare)
        make_fake_colab(self.fake_colab)
        self.env = kernel_env(dict(os.environ), self.home, self.fake_colab, self.venv)
        return sha

    def installed(self) -> set[str]:
        out = self.run_python("import importlib.metadata as m, json; "
                              "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
        return {normalise(n) for n in json.loads(out) if n}

    def reset(self) -> None:
        """Uninstall what was installed after the environment was made (a fresh Colab runtime)."""
        base = set(json.loads(self.base_file.read_text(encoding="utf-8")))
        extra = extra_packages(base, self.installed())
        if extra:
            subprocess.run([str(self.python), "-I", "-m", "pip", "uninstall", "-y", "-q", *extra], check=True,
                           capture_output=True, cwd=self.work)

    def course_direct_url(self) -> dict | None:
        out = self.run_python("import importlib.metadata as m\n"
                              "try:\n    t = m.distribution('" + COURSE + "').read_text('direct_url.json')\n"
                              "except m.PackageNotFoundError:\n    t = None\nprint(t or 'null')")
        return json.loads(out)

    def run_python(self, code: str) -> str:
        """``code``'s output in the environment's Python, isolated (-I) and in ``work``: never the
        repository's folder, whose vitref_course.egg-info would pass for an installed course."""
        return subprocess.run([str(self.python), "-I", "-c", code], check=True, capture_output=True, text=True,
                              cwd=self.work).stdout


@dataclass
class Outcome:
    notebook: Notebook
    seconds: float
    problems: list[str]
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        text = f"{self.notebook.label:<36} {'ok' if self.ok else 'FAIL':<4} {self.seconds:7.1f} s"
        if self.detail:
            text += f"  ({self.detail})"
        return "\n".join([text] + [f"    {p}" for p in self.problems])


def run_notebook(env: Environment, nb: Notebook, sha: str, timeout: int, strict: bool = False) -> Outcome:
    """Copy ``nb`` as committed at HEAD out of the repository, run it in the environment's kernel, judge it."""
    folder = env.work / "notebooks" / nb.kind / nb.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy = folder / f"{nb.name}.ipynb"
    copy.write_bytes(subprocess.run(["git", "-C", str(ROOT), "show", f"{sha}:{nb.path}"], check=True,
                                    capture_output=True).stdout)
    executed, report = folder / f"{nb.name}.executed.ipynb", folder / "run.json"
    runner = env.work / "run_notebook.py"
    runner.write_text(RUNNER, encoding="utf-8")
    env.reset()
    if env.course_direct_url() is not None:
        return Outcome(nb, 0.0, [f"{COURSE} is still installed after the environment was reset"])
    start = time.perf_counter()
    done = subprocess.run([str(env.python), str(runner), str(copy), str(executed), str(report), str(timeout),
                           "1" if nb.kind == "exercises" else "0"],
                          cwd=folder, env=env.env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode or not report.is_file() or not executed.is_file():
        return Outcome(nb, seconds, [f"the notebook runner failed (exit {done.returncode}): "
                                     f"{done.stderr.strip()[-1500:]}"])
    result = json.loads(report.read_text(encoding="utf-8"))
    executed_nb = json.loads(executed.read_text(encoding="utf-8"))
    detail = ""
    if nb.kind == "exercises":
        verdict = exercise_verdict(executed_nb, result["error"], strict)
        problems, detail = verdict.problems, verdict.summary()
    else:
        problems = clean_run_problems(executed_nb, result["error"])
    kernel = Path(result["kernel_argv"][0])
    if kernel.parent != env.python.parent:
        problems.append(f"the kernel ran {kernel}, not the environment's Python {env.python}")
    not_installed = install_problem(env.course_direct_url(), env.url, env.branch, sha)
    if not_installed:
        problems.append(not_installed)
    return Outcome(nb, seconds, problems, detail)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.colab_like", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run these notebooks only: book/07_vit, exercises/03_attention, 03_attention (all "
                             "three kinds), 03, book, exercises, solutions")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="work in DIR and keep it (environment, clone, executed notebooks); a later run with "
                             "the same DIR reuses the environment")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per cell (default %(default)s)")
    parser.add_argument("--strict-checks", action="store_true",
                        help="exercises: a check cell whose answer a blank left undefined (NameError) fails too")
    args = parser.parse_args(argv)

    from autograder.instructor.nbtools import repository

    start = time.perf_counter()
    tracked = git(ROOT, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    try:
        chosen = select(notebooks(tracked), args.only)
    except ValueError as error:
        parser.error(str(error))
    if shutil.which("git") is None:
        print("colab_like: git is needed (pip installs the course from a git URL)", file=sys.stderr)
        return 2
    dirty = git(ROOT, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        print(f"note: {len(dirty.splitlines())} tracked file(s) differ from HEAD; the notebooks and the course "
              "are taken as committed at HEAD", flush=True)
    url, branch = repository(ROOT)
    if args.keep:
        work = args.keep.resolve()
        if work == ROOT or ROOT in work.parents:
            parser.error(f"--keep {work}: must be outside the repository")
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="vitref-colab-like-"))
    env = Environment(work, url, branch)
    outcomes = []
    try:
        sha = env.prepare(ROOT)
        print(f"course: git+{url}@{branch} -> {sha[:12]} (HEAD), installed by each notebook's set-up cell",
              flush=True)
        made = time.perf_counter()
        print(f"{env.create()}: {time.perf_counter() - made:.0f} s", flush=True)
        for nb in chosen:
            outcome = run_notebook(env, nb, sha, args.timeout, args.strict_checks)
            outcomes.append(outcome)
            print(outcome.line(), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work} (executed notebooks in {work / 'notebooks'})")
    failures = sum(not o.ok for o in outcomes)
    print(f"colab_like: {len(outcomes)} notebooks, {failures} failures, total {time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
