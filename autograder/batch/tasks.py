"""What there is to grade: one :class:`Task` per ``ROOT/submitted/<student>/<assignment>/``
folder (:func:`discover`), the grader's version that keys the saved results
(:func:`grader_version`), and the shard a submission belongs to (:func:`shard_of`).

The submitted tree is the students' (a zip, ``nbgrader collect``), so it is read, never
followed: :func:`read_notebook` opens each part below ``submitted/`` with ``O_NOFOLLOW`` and
reads a regular file through the descriptor it checked. A link (to the instructor's solutions,
to ``/proc/self/mem``), a named pipe, a device or a read error is that submission's
``problem``: zero on its questions with the reason, and the discovery goes on."""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import autograder
from autograder.batch import text


@dataclass
class Task:
    student: str
    assignment: str
    folder: str
    notebook: str | None          # the notebook that is graded (None: nothing to grade)
    digest: str                   # content hash of the notebook + grader version
    qids: list[str]
    note: str = ""                # e.g. "several notebooks; graded x.ipynb"
    base: str = ""                # the trusted folder above the submission (ROOT/submitted; "": the
    #                               folder): every part below it is opened without following links
    problem: str = ""             # why the submission is not read (a link, a pipe...): zeros, the reason


def _hash_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.parent.name + "/" + path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


# what decides a grade: a change in these folders (or in vitref's graded modules) regrades
# everything on the next run; the batch machinery itself (this folder) and instructor tools do not
VERSIONED_FOLDERS = ("questions", "student", "judging", "hosts")


def graded_vitref_files() -> list[Path]:
    """The vitref modules the references are built from (``vitref.graded_modules()``: not its
    training, data or plotting code, so a training change regrades nothing)."""
    try:
        # inner import: optional, a grading install without vitref hashes the grader's folders only
        import vitref
    except ImportError:
        return []
    return [Path(p) for p in vitref.graded_modules() if Path(p).is_file()]


def grader_version() -> str:
    """A hash of the code that decides a grade: questions, student side, judges, hosts and
    vitref's graded modules. ``AUTOGRADER_GRADER_VERSION`` pins it (e.g. to keep grades
    after a cosmetic change)."""
    pinned = os.environ.get("AUTOGRADER_GRADER_VERSION")
    if pinned:
        return pinned
    package = Path(__file__).resolve().parent.parent
    files = [p for folder in VERSIONED_FOLDERS for p in (package / folder).rglob("*.py")]
    return _hash_files(files + graded_vitref_files())[:16]


def questions_by_assignment() -> dict[str, list]:
    """The registered questions grouped by assignment (the question's chapter)."""
    out: dict[str, list] = {}
    for q in autograder.questions():
        out.setdefault(q.chapter, []).append(q)
    return out


MAX_NOTEBOOK_MB = 50        # a submitted notebook larger than this is not read


class Refused(Exception):
    """A submitted path the grader does not read; the message says why and what to submit."""


_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a named pipe (FIFO)",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFDIR: "a folder", stat.S_IFREG: "a regular file"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _why(dir_fd: int, part: str, shown: str, last: bool, error: OSError) -> str:
    """Why ``part`` (in the folder ``dir_fd``) could not be opened, from its own lstat."""
    what = "the notebook file" if last else "the folder"
    try:
        mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        return f"{shown} is a symbolic link: submit {what} itself"
    if mode is not None and not last and not stat.S_ISDIR(mode):
        return f"{shown} is {_kind(mode)}, not a folder"
    if mode is not None and last and not stat.S_ISREG(mode):
        return f"{shown} is {_kind(mode)}: submit {what} itself"
    return f"{shown} could not be read ({error.strerror or error})"


def read_notebook(path, base=None, refuse: frozenset = frozenset()) -> bytes:
    """The bytes of the submitted file ``path``, read without following anything: each part of
    ``path`` below ``base`` (the trusted folder, e.g. ``ROOT/submitted``; default: the file's
    folder) is opened relative to the one above it with ``O_NOFOLLOW``, the file is checked on
    the descriptor that was opened (a regular file of at most ``MAX_NOTEBOOK_MB``) and read
    through it. :class:`Refused` with the reason otherwise: a symbolic link (to the
    instructor's solutions, to ``/proc/self/mem``), a named pipe, a device, a read error, or a
    file in ``refuse`` (``(st_dev, st_ino)`` pairs: the source notebooks, which a hard link in an
    extracted archive could name)."""
    path = Path(path)
    base = Path(base) if base else path.parent
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        raise Refused(f"{text.name(str(path))} is not under {text.name(str(base))}") from None
    shown = [text.name(base.name)]
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise Refused(f"{text.name(base.name)} could not be read ({error.strerror or error})") from None
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            shown.append(text.name(part))
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                opened = os.open(part, flags, dir_fd=fd)
            except OSError as error:
                raise Refused(_why(fd, part, "/".join(shown), last, error)) from None
            os.close(fd)
            fd = opened
        where = "/".join(shown)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{where} is {_kind(info.st_mode)}: submit the notebook file itself")
        if (info.st_dev, info.st_ino) in refuse:
            raise Refused(f"{where} is the instructor's source notebook (a hard link to it): "
                          f"submit your own notebook")
        cap = MAX_NOTEBOOK_MB << 20
        if info.st_size > cap:
            raise Refused(f"the notebook is {info.st_size >> 20} MB, more than the {MAX_NOTEBOOK_MB} MB accepted")
        chunks, size = [], 0
        try:
            while size <= cap:
                chunk = os.read(fd, min(1 << 22, cap + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as error:
            raise Refused(f"{where} could not be read ({error.strerror or error})") from None
        if size > cap:
            raise Refused(f"the notebook is more than the {MAX_NOTEBOOK_MB} MB accepted")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _entries(folder) -> list[os.DirEntry]:
    """The entries of ``folder``, by name (names that are not UTF-8 come as surrogates)."""
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def _ids(names: list[str]) -> dict[str, str]:
    """{name as listed: its id (:func:`autograder.batch.text.name`)}; two names with the same
    id (``jos\\xe9`` written out beside the latin-1 byte) are told apart by a hash of the name."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for raw in sorted(names):
        shown = text.name(raw)
        if shown in used:
            digest = hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:8]
            shown = f"{shown}~{digest}"
        used.add(shown)
        out[raw] = shown
    return out


def _pick_notebook(entries: list, assignment: str, source_names: list[str],
                   where: str) -> tuple[os.DirEntry | None, str]:
    """The notebook to grade among a submitted folder's entries (``where``: how the folder is
    shown), and a note; links and other files that are not folders count as candidates (and
    are refused when read), so that a link is never passed over for another notebook."""
    notebooks = [e for e in entries if e.name.endswith(".ipynb") and not e.is_dir(follow_symlinks=False)]
    if not notebooks:
        return None, f"no notebook (.ipynb) in {where}/"
    by_name = {e.name: e for e in notebooks}
    for wanted in [f"{assignment}.ipynb"] + [f"{n}.ipynb" for n in source_names]:
        if wanted in by_name:
            note = "" if len(notebooks) == 1 else f"several notebooks submitted; graded {text.name(wanted)}"
            return by_name[wanted], note
    if len(notebooks) == 1:
        return notebooks[0], ""
    return notebooks[0], (f"several notebooks submitted and none named {text.name(assignment)}.ipynb; "
                          f"graded {text.name(notebooks[0].name)}")


def _digest(version: str, qids: list[str], content: bytes) -> str:
    h = hashlib.sha256(version.encode())
    h.update(",".join(qids).encode())
    h.update(content)
    return h.hexdigest()[:32]


def _inodes(folder) -> frozenset:
    """``(st_dev, st_ino)`` of every file under ``folder`` (the source notebooks)."""
    found = set()
    if folder is not None:
        for path in Path(folder).rglob("*"):
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.add((info.st_dev, info.st_ino))
    return frozenset(found)


@dataclass
class _Discovery:
    """What every task of one discovery is made with: the questions, the source notebooks (and
    their inodes, refused when submitted), the grader's version and the trusted folder."""
    questions: dict[str, list]
    sources: dict
    version: str
    base: str
    sources_inodes: frozenset

    def qids(self, assignment: str) -> list[str]:
        return [q.id for q in self.questions.get(assignment, [])]

    def refused(self, student: str, assignment: str, folder: str, reason: str) -> Task:
        qids = self.qids(assignment)
        return Task(student, assignment, folder, None, _digest(self.version, qids, reason.encode()), qids,
                    base=self.base, problem=reason)

    def student_tasks(self, student_entry: os.DirEntry, student: str) -> list[Task]:
        """The tasks of one ``submitted/<student>`` entry: one per assignment folder."""
        if student_entry.is_symlink():
            return [self.refused(student, "", student_entry.path,
                                 f"submitted/{student} is a symbolic link: submit the folder itself")]
        if not student_entry.is_dir(follow_symlinks=False):
            return []
        try:
            folders = _entries(student_entry.path)
        except OSError as error:
            return [self.refused(student, "", student_entry.path,
                                 f"submitted/{student} could not be read ({error.strerror or error})")]
        folder_ids = _ids([e.name for e in folders])
        tasks = []
        for folder in folders:
            task = self.assignment_task(student, folder, folder_ids[folder.name])
            if task is not None:
                tasks.append(task)
        return tasks

    def assignment_task(self, student: str, folder: os.DirEntry, assignment: str) -> Task | None:
        """The task of one ``submitted/<student>/<assignment>`` entry (None: not a folder)."""
        where = f"submitted/{student}/{assignment}"
        if folder.is_symlink():
            return self.refused(student, assignment, folder.path,
                                f"{where} is a symbolic link: submit the folder itself")
        if not folder.is_dir(follow_symlinks=False):
            return None
        qids = self.qids(assignment)
        src = self.sources.get(assignment)
        try:
            entry, note = _pick_notebook(_entries(folder.path), assignment,
                                         [src.notebook] if src else [], where)
        except OSError as error:
            return self.refused(student, assignment, folder.path,
                                f"{where} could not be read ({error.strerror or error})")
        if entry is None:
            return Task(student, assignment, folder.path, None, _digest(self.version, qids, b""),
                        qids, note, base=self.base)
        try:
            content = read_notebook(entry.path, self.base, self.sources_inodes)
        except Refused as why:
            return Task(student, assignment, folder.path, entry.path,
                        _digest(self.version, qids, str(why).encode()), qids, note,
                        base=self.base, problem=str(why))
        return Task(student, assignment, folder.path, entry.path, _digest(self.version, qids, content),
                    qids, note, base=self.base)


def discover(root: Path, questions: dict[str, list], sources: dict, version: str,
             source_dir=None) -> list[Task]:
    """One task per ROOT/submitted/<student>/<assignment>/ folder, read without following a
    link: a student or assignment folder that is a link, or a notebook that is a link, a pipe
    or a device, or cannot be read, is a task with that ``problem`` (a zero with the reason),
    never the end of the discovery. Students and assignments are named by their printable ids
    (:func:`autograder.batch.text.name`); ``folder`` and ``notebook`` keep the paths as listed.
    ``source_dir``: a submitted file that is one of its files (a hard link) is refused too."""
    submitted = root / "submitted"
    if not submitted.is_dir():
        raise SystemExit(f"{submitted} does not exist: expected submitted/<student>/<assignment>/*.ipynb "
                         f"under the grading root {root}")
    discovery = _Discovery(questions, sources, version, str(submitted), _inodes(source_dir))
    students = _entries(submitted)
    student_ids = _ids([e.name for e in students])
    tasks = []
    for student_entry in students:
        tasks += discovery.student_tasks(student_entry, student_ids[student_entry.name])
    return tasks


def shard_of(student: str, assignment: str, count: int) -> int:
    """The shard (1..count) of a submission: a stable hash of student and assignment, the
    same on every machine and Python (not ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{student}\0{assignment}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1
