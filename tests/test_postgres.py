"""One gradebook in PostgreSQL for a class graded by several machines (`--shard I/N`,
`--db-url postgresql://...`), against a real PostgreSQL server started for the test.

The server is Debian's `postgresql` package (installed here when it is missing and the
test runs as root with apt-get), in a temporary data directory, as an unprivileged user,
on a free port. Without it the tests are skipped with the reason (visibly, -ra).
"""
from __future__ import annotations

import glob
import multiprocessing
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import grading_students as S

pytestmark = pytest.mark.slow   # starts a PostgreSQL server (make test-fast skips it)

ASSIGNMENTS = ("01_tokens", "02_positional_encoding")
STUDENTS = [f"s{i:02d}" for i in range(8)]


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _install_postgres() -> str:
    """apt-get install postgresql when possible; returns why not otherwise."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "PostgreSQL is not installed and this is not root with apt-get (apt-get install postgresql)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    proc = subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        proc = subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], env=env,
                              capture_output=True, text=True, timeout=900)
    return "" if proc.returncode == 0 else f"apt-get install postgresql failed: {proc.stderr[-500:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A running PostgreSQL server: yields a function name -> URL of a fresh database."""
    bindir = _pg_bin()
    if bindir is None:
        why = _install_postgres()
        bindir = _pg_bin()
        if bindir is None:
            pytest.skip(f"no PostgreSQL server available: {why}")
    import psycopg  # the driver of the grading extra (SQLAlchemy's default for postgresql://)

    data = tempfile.mkdtemp(prefix="autograder-pg-")
    run_as: list[str] = []
    if os.geteuid() == 0:              # initdb refuses root: run the server as nobody
        nobody = pwd.getpwnam("nobody")
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        run_as = ["runuser", "-u", "nobody", "--"]
    port = _free_port()
    subprocess.run(run_as + [str(bindir / "initdb"), "-D", data, "-U", "grader", "-A", "trust",
                             "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=300)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
    started = subprocess.run(run_as + [str(bindir / "pg_ctl"), "-D", data, "-o", opts, "-w", "-t", "120",
                                       "-l", os.path.join(data, "server.log"), "start"],
                             capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    count = [0]

    def database() -> str:
        count[0] += 1
        name = f"gradebook{count[0]}"
        with psycopg.connect(host="127.0.0.1", port=port, user="grader", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://grader@127.0.0.1:{port}/{name}"

    try:
        yield database
    finally:
        subprocess.run(run_as + [str(bindir / "pg_ctl"), "-D", data, "-m", "immediate", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


# ----------------------------------------------------------- concurrent writers

def _writer(db_url: str, students: list[str], barrier, queue) -> None:
    """One process writing its results to the shared gradebook, all starting at once."""
    from autograder.batch import gradebook
    from autograder.batch.sources import load_sources
    from autograder.batch.tasks import questions_by_assignment
    questions = questions_by_assignment()
    sources = load_sources(S.REPO / "solutions", questions)
    results = []
    for student in students:
        for a in ASSIGNMENTS:
            rows = [{"id": q.id, "title": q.title, "passed": True, "score": float(q.points),
                     "max_score": float(q.points), "feedback": "", "reason": "", "mistake": None}
                    for q in questions[a]]
            results.append({"student": student, "assignment": a, "questions": rows, "status": "ok",
                            "score": sum(r["score"] for r in rows),
                            "max_score": sum(r["max_score"] for r in rows)})
    barrier.wait()
    try:
        attempts = gradebook.write(db_url, "vit-from-scratch", sources, results)
        queue.put(("ok", attempts))
    except Exception as error:  # noqa: BLE001 - reported to the test
        queue.put(("error", f"{type(error).__name__}: {error}"))


def _submissions(db_url: str) -> dict:
    from nbgrader.api import Gradebook, SubmittedAssignment
    with Gradebook(db_url, "vit-from-scratch") as gb:
        subs = gb.db.query(SubmittedAssignment).all()
        out: dict = {}
        for sub in subs:
            key = (sub.student.id, sub.assignment.name)
            out.setdefault(key, []).append((float(sub.score), float(sub.max_score),
                                            sum(len(nb.grades) for nb in sub.notebooks)))
        students = sorted(st.id for st in gb.students)
        assignments = sorted(a.name for a in gb.assignments)
    return {"subs": out, "students": students, "assignments": assignments}


def test_concurrent_writers_on_an_empty_database(postgres):
    """Four processes write overlapping students and the same assignments into one empty
    PostgreSQL gradebook at the same moment (nbgrader creating its tables, the course, the
    same Student/Assignment/GradeCell rows): every row ends up there exactly once."""
    db_url = postgres()
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    groups = [STUDENTS[0:4], STUDENTS[2:6], STUDENTS[4:8], STUDENTS[0:8:2]]   # overlapping
    procs = [ctx.Process(target=_writer, args=(db_url, g, barrier, queue)) for g in groups]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    found = _submissions(db_url)
    assert found["students"] == STUDENTS
    assert found["assignments"] == sorted(ASSIGNMENTS)
    assert sorted(found["subs"]) == sorted((s, a) for s in STUDENTS for a in ASSIGNMENTS)
    for key, rows in found["subs"].items():
        assert len(rows) == 1, f"{key} recorded {len(rows)} times"
        score, max_score, grades = rows[0]
        # full automatic marks; the written question waits for the instructor (in the maximum)
        assert score == max_score - S.written_points(key[1]) > 0 and grades > 0, key


# --------------------------------------------------------------- shards, end to end

def _class(root: Path) -> dict:
    """Honest (slow: a 1 s cell) and blank notebooks; returns {(student, assignment): full?}."""
    expected = {}
    for i, student in enumerate(STUDENTS):
        for a in ASSIGNMENTS:
            honest = (i + len(a)) % 3 != 0
            nb = S.load(a) if honest else S.load(a, "exercises")
            if honest:
                nb = S.insert_cell(nb, "import time\ntime.sleep(1)")
            S.write(nb, root, student, a)
            expected[(student, a)] = honest
    return expected


def _read_csv(path: Path) -> dict:
    """{(student, assignment, question): (score, max_score, reason)}; no key twice."""
    import csv
    out = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            key = (row["student"], row["assignment"], row["question"])
            assert key not in out, f"duplicate row {key} in {path.name}"
            out[key] = (float(row["score"]), float(row["max_score"]), row["reason"])
    return out


def _shard_cmd(root: Path, db_url: str, shard: str) -> list[str]:
    return [sys.executable, "-m", "autograder", "grade", str(root), "--db-url", db_url,
            "--shard", shard, "--jobs", "1", "--no-progress", "--timeout", "20"]


def test_two_shards_at_once_one_killed_and_resumed(postgres, tmp_path):
    from autograder.batch import tasks
    db_url = postgres()
    root = tmp_path / "class"
    expected = _class(root)
    shard_of = {key: tasks.shard_of(*key, 2) for key in expected}
    mine = {i: sorted(k for k, s in shard_of.items() if s == i) for i in (1, 2)}
    assert len(mine[1]) >= 3 and len(mine[2]) >= 3, mine      # the split is stable: a fixed class
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="pg-test", OMP_NUM_THREADS="1")
    started = time.monotonic()
    one = subprocess.Popen(_shard_cmd(root, db_url, "1/2"), cwd=S.REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    two = subprocess.Popen(_shard_cmd(root, db_url, "2/2"), cwd=S.REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    states = root / ".autograder" / "results"

    def done(keys) -> int:
        return sum((states / s / f"{a}.json").exists() for s, a in keys)

    deadline = time.monotonic() + 300
    while done(mine[2]) == 0:
        assert two.poll() is None, two.communicate()
        assert time.monotonic() < deadline, "shard 2 graded nothing in 300 s"
        time.sleep(0.05)
    os.killpg(two.pid, signal.SIGKILL)              # a machine lost: the job, its sandbox, all
    two.communicate(timeout=60)
    killed_after = done(mine[2])
    assert killed_after < len(mine[2]), "shard 2 finished before it could be killed"
    out1, err1 = one.communicate(timeout=600)
    assert one.returncode == 0, out1 + err1
    assert f"grading {len(mine[1])} submission(s)" in out1 and "(shard 1 of 2)" in out1, out1

    # shard 1 is in the gradebook; shard 2's graded submissions only in its state files
    assert sorted(_submissions(db_url)["subs"]) == mine[1]

    # the lost shard runs again: what it had graded is kept, the rest is graded
    resumed = subprocess.run(_shard_cmd(root, db_url, "2/2"), cwd=S.REPO, env=env, text=True,
                             capture_output=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"grading {len(mine[2]) - killed_after} submission(s)" in resumed.stdout, resumed.stdout
    assert f"({killed_after} unchanged, skipped)" in resumed.stdout, resumed.stdout
    print(f"two shards of {len(expected)} notebooks, one killed and resumed: "
          f"{time.monotonic() - started:.1f} s")

    found = _submissions(db_url)
    assert sorted(found["subs"]) == sorted(expected)
    for key, rows in found["subs"].items():
        assert len(rows) == 1, f"{key} recorded {len(rows)} times"
        score, max_score, _ = rows[0]
        full = max_score - S.written_points(key[1])      # the written question is graded by hand
        assert (score == full) if expected[key] else (score == 0), (key, rows)
    assert found["students"] == STUDENTS

    # one CSV per shard, together every row exactly once; export merges them and the gradebook
    rows1, rows2 = _read_csv(root / "grades-1-of-2.csv"), _read_csv(root / "grades-2-of-2.csv")
    assert not set(rows1) & set(rows2)
    assert {k[:2] for k in rows1} == set(mine[1]) and {k[:2] for k in rows2} == set(mine[2])
    export = subprocess.run([sys.executable, "-m", "autograder", "export", str(root), "--db-url", db_url],
                            cwd=S.REPO, capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stdout + export.stderr
    assert S.read_csv(root) == {**rows1, **rows2}
    import csv
    with open(root / "nbgrader_grades.csv", newline="") as fh:
        nbg = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)}
    assert nbg == {k: v[0][0] for k, v in found["subs"].items()}
    assert (root / "report.html").is_file()


def test_shards_are_a_partition(tmp_path):
    """--shard I/N: every submission in exactly one shard, the same on every run."""
    from autograder.batch.cli import parse_shard
    from autograder.batch.tasks import shard_of
    keys = [(f"student{i}", a) for i in range(200) for a in ("01_tokens", "03_attention", "07_vit")]
    for n in (1, 2, 3, 7):
        shards = [shard_of(s, a, n) for s, a in keys]
        assert set(shards) == set(range(1, n + 1))
        assert shards == [shard_of(s, a, n) for s, a in keys]
    sizes = [sum(shard_of(s, a, 4) == i for s, a in keys) for i in (1, 2, 3, 4)]
    assert min(sizes) > 100, sizes                     # about 150 each
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "x", "1-2"):
        with pytest.raises(SystemExit, match="I/N"):
            parse_shard(bad)
