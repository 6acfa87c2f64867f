"""The grading sandbox itself (autograder.hosts.sandbox + autograder.student.zygote), probed with small
scripts run the way student notebooks are run: what a student process can see, write,
reach and use. The script's global RESULT comes back as JSON."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autograder.hosts import sandbox
from autograder.student import wire

pytestmark = pytest.mark.slow   # starts the grading sandbox for every test (make test-fast skips it)

REPO = Path(__file__).resolve().parents[1]


def _uids_alive(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


@pytest.fixture(scope="module", params=["bwrap", "namespaces"])
def zygote(request, tmp_path_factory):
    """A zygote running the test payload (plain scripts) in each isolation mode this
    machine offers as root: 'bwrap' (the default here) and 'namespaces' (the fallback)."""
    if request.param == "bwrap":
        assert sandbox.mode() == "bwrap", "bubblewrap should work here (make setup installs it)"
    secret = tmp_path_factory.mktemp("grading-root")
    (secret / "gradebook.db").write_text("secret")
    z = sandbox.Zygote(payload="autograder.student.zygote:script_payload", preload=("numpy",),
                       preload_checks=False, hide=(str(secret), str(REPO)),
                       sandbox_mode=request.param, memory_mb=512)
    z.start()
    z.secret = secret
    yield z
    z.close()


def run(z, source: str, timeout: float = 20, memory_mb: int = 512, **kw):
    result = z.run(source.encode(), [], sandbox.Limits(timeout=timeout, memory_mb=memory_mb, **kw),
                   name="student.py")
    data = json.loads(result.data) if result.data else None
    return result, data


def test_student_runs_unprivileged(zygote):
    r, data = run(zygote, """
import os
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
RESULT = {'uid': os.getuid(), 'euid': os.geteuid(), 'capeff': status['CapEff'].strip(),
          'capbnd': status['CapBnd'].strip(), 'nnp': status['NoNewPrivs'].strip(),
          'cwd': os.getcwd(), 'files': sorted(os.listdir('.')), 'pid': os.getpid()}
""")
    assert r.status == "ok", r
    res = data["result"]
    assert res["uid"] == res["euid"] == zygote.uid != 0
    assert int(res["capeff"], 16) == 0 and int(res["capbnd"], 16) == 0 and res["nnp"] == "1"
    assert res["files"] == ["student.py"]         # only its own submission in its working dir
    assert res["pid"] <= 3                        # its own pid namespace


def test_no_network(zygote):
    r, data = run(zygote, """
import socket
out = []
for host in [("1.1.1.1", 53), ("127.0.0.1", 22), ("pypi.org", 443)]:
    try:
        socket.create_connection(host, timeout=2).close(); out.append("connected")
    except OSError as e:
        out.append(type(e).__name__)
RESULT = out
""")
    assert "result" in data, data
    assert "connected" not in data["result"], data


# the datasets' own files (their labels would answer the training question's held-out images)
DATA = [os.path.join(folder, name) for d in sandbox.data_dirs() for folder, _, files in os.walk(d)
        for name in sorted(files)[:2]] + list(sandbox.data_dirs())


def test_the_dataset_folders_exist_here():
    """The premise of the next test: this machine has Fashion-MNIST where the sandbox must hide it."""
    assert any(os.path.isfile(p) for p in DATA), DATA


def test_course_and_grades_invisible(zygote):
    secret = zygote.secret
    r, data = run(zygote, f"""
import os
paths = {[str(REPO / 'solutions'), str(REPO / 'vitref'), str(REPO / 'autograder' / 'judging' / 'judge.py'),
          str(secret / 'gradebook.db'), str(REPO / 'nbgrader_config.py')] + list(DATA)!r}
seen = {{}}
for p in paths:
    try:
        open(p).read(1); seen[p] = 'read'
    except OSError as e:
        seen[p] = type(e).__name__
    try:
        if os.listdir(p):
            seen[p] = 'listed'
    except OSError:
        pass
try:
    import vitref; seen['vitref'] = 'imported'
except ImportError as e:
    seen['vitref'] = str(e)
try:
    import autograder.judging.judge; seen['judge'] = 'imported'
except ImportError as e:
    seen['judge'] = 'ImportError'
try:
    import autograder.judging.catalogue; seen['catalogue'] = 'imported'
except ImportError as e:
    seen['catalogue'] = 'ImportError'
RESULT = seen
""")
    assert "result" in data, data
    res = data["result"]
    for path, what in res.items():
        assert what not in ("read", "listed", "imported"), (path, what)
    assert "not available while your notebook is graded" in res["vitref"] or \
        "No module named" in res["vitref"]


def test_read_only_system_and_private_tmp(zygote):
    venv_file = str(Path(sys.prefix) / "student-was-here")
    r, data = run(zygote, f"""
out = {{}}
for p in ['/usr/lib/x', '/etc/passwd', {venv_file!r}, '/tmp/mine', '/dev/shm/mine']:
    try:
        open(p, 'a').write('x'); out[p] = 'written'
    except OSError as e:
        out[p] = type(e).__name__
RESULT = out
""")
    res = data["result"]
    assert res["/tmp/mine"] == "written" and res["/dev/shm/mine"] == "written"
    assert all(v != "written" for k, v in res.items() if not k.startswith(("/tmp", "/dev/shm"))), res
    assert not os.path.exists(venv_file)
    # the next student starts from empty /tmp and /dev/shm
    r, data = run(zygote, "import os\nRESULT = [os.path.exists('/tmp/mine'), os.path.exists('/dev/shm/mine')]")
    assert data["result"] == [False, False]


def test_limits(zygote):
    r, data = run(zygote, """
import os
out = {}
try:
    x = bytearray(3 << 30); out['mem'] = 'allocated'
except MemoryError:
    out['mem'] = 'MemoryError'
try:
    with open('big', 'wb') as fh:
        fh.write(b'x' * (80 << 20))
    out['file'] = 'written'
except OSError as e:
    out['file'] = e.errno
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        n += 1
except OSError:
    pass
out['forks'] = n
RESULT = out
""", memory_mb=512)
    res = data["result"]
    assert res["mem"] == "MemoryError"
    assert res["file"] == 27            # EFBIG
    assert res["forks"] < 64
    # nothing of that student survives it on the host (its sleeping children included)
    time.sleep(0.5)
    assert _uids_alive(zygote.uid) == []


@pytest.mark.alone       # wall-clock limits: make test runs it on its own, after the rest
def test_wall_timeout_kills_everything(zygote):
    start = time.monotonic()
    r, _ = run(zygote, """
import os, signal
signal.signal(signal.SIGALRM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True: pass
while True: pass
""", timeout=3)
    assert r.status == "timeout"
    assert 2.5 < time.monotonic() - start < 20
    time.sleep(0.5)
    assert _uids_alive(zygote.uid) == []
    # the zygote is still serving
    r, data = run(zygote, "RESULT = 42")
    assert data["result"] == 42


def test_exit_and_signal_statuses(zygote):
    assert run(zygote, "import os\nos._exit(7)")[0].code == 7
    r, _ = run(zygote, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (r.status, r.signal) == ("signal", 11)
    # kill(-1) reaches every process it may signal (on Linux, not itself): none outside
    r, data = run(zygote, "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
                          "except OSError as e:\n    RESULT = type(e).__name__\n")
    assert (r.status, data["result"]) == ("ok", "ProcessLookupError")   # nobody else to signal
    # the grader's own process is untouched and the zygote still answers
    assert run(zygote, "RESULT = 'alive'")[1]["result"] == "alive"


FORKED_ALLOCATIONS = """
import os, time
pids = []
for i in range(N):
    pid = os.fork()
    if pid == 0:
        block = bytearray(300 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(1)
        os._exit(0)
    pids.append(pid)
RESULT = [os.waitpid(pid, 0)[1] for pid in pids]
"""


def test_memory_is_limited_for_all_processes_of_a_submission(zygote):
    """--memory bounds the sum over the student's processes (a cgroup), not each process:
    three children of 300 MB under a 512 MB allowance do not all survive; one alone does."""
    assert zygote.group is not None, "a writable memory cgroup exists on this machine (cgroup v1 or v2)"
    r, data = run(zygote, FORKED_ALLOCATIONS.replace("N", "1"), memory_mb=512)
    assert data["result"] == [0], (r, data)
    r, data = run(zygote, FORKED_ALLOCATIONS.replace("N", "3"), memory_mb=512)
    assert r.status == "ok" and 0 < data["result"].count(9) < 3, (r, data)   # SIGKILL by the OOM killer
    assert run(zygote, "RESULT = 'alive'")[1]["result"] == "alive"            # the zygote survived


def test_frames_reject_garbage():
    good = wire.frame({"event": "cell", "index": 0}) + wire.frame({"event": "done"})
    assert [h["event"] for h, _ in wire.frames(good)] == ["cell", "done"]
    assert wire.frames(good[:-3]) == [({"event": "cell", "index": 0}, b"")]
    assert wire.frames(b"\xff\xff\xff\xff garbage") == []
    assert wire.frames(b"\x00\x00\x00\x02[]\x00\x00\x00\x00") == []


def test_result_arrays_are_read_back_exactly_and_malformed_blobs_refused():
    arrays = {"a0": np.arange(6, dtype=np.float64).reshape(2, 3), "a1": np.array([True, False]),
              "a2": np.array(7, dtype=np.int64), "a3": np.zeros((0, 4))}
    blob = wire.arrays_bytes(arrays)
    back = wire._load_arrays(blob, "biuf")
    assert list(back) == list(arrays)
    for name, value in arrays.items():
        assert back[name].dtype == value.dtype and np.array_equal(back[name], value)
    assert back["a0"].flags.writeable                  # a copy, not a view of the sent bytes
    head = blob[8:8 + int.from_bytes(blob[4:8], "big")]

    def forged(meta, data=b""):
        text = json.dumps(meta).encode()
        return b"ARR1" + len(text).to_bytes(4, "big") + text + data

    refusals = {
        b"PK\x03\x04" + blob[4:]: "not an array blob",                           # an .npz (a zip) is not read
        blob + b"x": "left over",
        blob[:-1]: "larger than the bytes sent",
        forged([["a0", "|O8", [1]]], b"\0" * 8): "not accepted",                   # objects (pickles) never
        forged([["a0", ">f8", [1]]], b"\0" * 8): "not accepted",                   # big-endian is refused
        forged([["a0", "<f8", [2 ** 62, 2 ** 62]]]): "larger than the bytes sent",
        forged([["a0", "<f8", [-1]]]): "malformed shape",
        forged([["a0", "<f8", [1]], ["a0", "<f8", [1]]], b"\0" * 16): "not accepted",   # a name twice
        forged({"a0": 1}): "malformed array list",
    }
    for bad, reason in refusals.items():
        with pytest.raises(ValueError, match=reason):
            wire._load_arrays(bad, "biuf")
    with pytest.raises(ValueError, match="has dtype <U3"):
        wire._load_arrays(wire.arrays_bytes({"s": np.array(["abc"])}), "biuf")    # strings: inputs only
    assert head.startswith(b"[[")
    with pytest.raises(ValueError, match="not an array blob"):
        wire.read_result({"tree": {}}, b"garbage")
