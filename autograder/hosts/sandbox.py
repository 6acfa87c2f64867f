"""The grading sandbox: where student notebooks run when `python -m autograder grade` grades them.

Two layers, so that one notebook costs milliseconds of set-up rather than a fresh Python
with torch (about 1.7 s of CPU here):

1. A *zygote* process (:mod:`autograder.student.zygote`) per grading job, started inside
   bubblewrap (``bwrap``): no network, no IPC or pid sharing with the host, and a file
   system made only of read-only binds of the system (``/usr``, ``/etc``), the Python
   runtime, the virtual environment's site-packages *minus* the course's own packages
   (``vitref``, ``autograder``, editable-install hooks), and a *bundle*: a temporary copy
   of the code that must run next to the student (the zygote, the notebook runner and the
   probes; not ``vitref``, not the judges). Nothing else of the machine is there: not the
   repository, not ``solutions/``, not the gradebook or the submissions. The zygote imports
   torch etc. once and never runs student code.
2. For each submission the zygote forks; the fork takes fresh mount, pid, network, IPC
   and UTS namespaces, a fresh tmpfs ``/tmp`` (holding only this student's notebook) and
   ``/dev/shm``, then forks the process that runs the notebook. That process gets resource
   limits (memory, CPU time, processes, file size, open files), becomes an unprivileged
   uid with no capabilities (``no_new_privs``), and runs the notebook's code cells and the
   probes. It hands back plain data (arrays and strings); the grader's own process judges.
   A wall-clock timeout kills the whole pid namespace.

Where bubblewrap is missing or cannot create its namespaces, :func:`mode` says so and the
zygote runs without the outer layer: as root the per-submission namespaces, limits and
the unprivileged uid still apply and the course, grades and submissions folders are hidden
behind empty mounts; without root only the resource limits, a scrubbed environment and
a private working directory remain (see "Grading a class" in book/for_instructors.md).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cgroup import cpu_group, job_group
from .training import held_back


BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
BUNDLE_MOUNT = "/opt/grader"        # where the bundle appears inside the sandbox
HIDDEN_PACKAGES = ("vitref", "autograder")
UID_BASE = 1_900_000_000            # student processes run as UID_BASE + slot: owns no file
ZYGOTE_BASE_MB = 2048               # room for the zygote's imports in its job's cgroup, before it is ready


@dataclass
class Limits:
    """Per-submission limits. timeout: wall seconds; memory_mb: data the student may
    allocate (on top of what the preloaded libraries already map)."""
    timeout: float = 120.0
    memory_mb: int = 2048
    nproc: int = 32
    fsize_mb: int = 64
    tmpfs_mb: int = 256

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, timeout: float, memory_mb: int, per: str) -> None:
        """The command-line options ``--timeout`` (seconds) and ``--memory`` (MB) a :class:`Limits` is
        built from, with their defaults; ``per`` says what one limit covers ("submission", "notebook")."""
        parser.add_argument("--timeout", type=float, default=timeout,
                            help=f"wall-clock seconds per {per} (default {timeout:g})")
        parser.add_argument("--memory", type=int, default=memory_mb,
                            help=f"memory per {per} in MB (default {memory_mb})")


@dataclass
class RunResult:
    status: str                 # ok | timeout | exit | signal | error
    data: bytes = b""           # what the payload function returned (untrusted)
    code: int | None = None
    signal: int | None = None
    wall: float = 0.0
    output: str = ""            # tail of the student's stdout/stderr
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def describe(self, limits: Limits) -> str:
        """Why the notebook did not finish, in words for the feedback."""
        if self.status == "timeout":
            return self.reason or f"the notebook did not finish within the time limit of {limits.timeout:g} s"
        if self.status == "signal":
            known = self.signal in signal.Signals._value2member_map_
            name = signal.Signals(self.signal).name if known else str(self.signal)
            if self.signal == signal.SIGXCPU:
                return f"the notebook used more than {limits.timeout:g} s of CPU time"
            if self.signal == signal.SIGKILL:
                return "the notebook's process was killed (memory or time limit)"
            if self.signal == signal.SIGXFSZ:
                return f"the notebook wrote a file larger than {limits.fsize_mb} MB"
            return f"the notebook's process died ({name})"
        if self.status == "exit":
            return f"the notebook's process exited with status {self.code} before its answers could be checked"
        if self.status == "error":
            return self.reason or "the sandbox failed"
        return ""


# ------------------------------------------------------------------------- mode

def _bwrap_base() -> list[str]:
    args = [BWRAP, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
             "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    return args


@functools.lru_cache(maxsize=None)
def mode() -> str:
    """'bwrap' (full sandbox), 'namespaces' (root without bwrap) or 'limits' (neither)."""
    if os.environ.get("AUTOGRADER_SANDBOX") in ("bwrap", "namespaces", "limits"):
        return os.environ["AUTOGRADER_SANDBOX"]
    if os.geteuid() == 0 and os.path.exists(BWRAP):
        base, prefix = os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)
        probe = _bwrap_base() + ["--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN",
                                 "--ro-bind", base, base, python_executable(), "-c", "pass"]
        if prefix != base:
            probe[-3:-3] = ["--ro-bind", prefix, prefix]
        try:
            ok = subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return "bwrap"
    if os.geteuid() == 0:
        return "namespaces"
    return "limits"


# ----------------------------------------------------------------------- bundle

def _package_dir() -> Path:
    return Path(__file__).resolve().parent.parent


# The bundle is what runs beside the student: every module of these folders, and nothing
# else of the package (not autograder/judging, not vitref). A test checks that these folders
# import nothing from the grader's side.
SANDBOX_FOLDERS = ("student", "questions")
ZYGOTE = "autograder/student/zygote.py"
PAYLOAD = "autograder.student.payload:payload"
EXTRA_PRELOAD = ("numpy", "torch", "einops", "torch._refs", "torch._refs.nn.functional", "torch._refs.special",
                 "torch._decomp", "torch._decomp.decompositions")
_STUB = '''"""The course's checker as a graded notebook sees it: check() and grade() do nothing here
(the grade is decided outside this process)."""


def check(*args, **kwargs):
    return None


grade = check
'''


def bundle_files() -> list[str]:
    """Files (relative to the autograder package) copied into the sandbox: the student-side folders."""
    pkg = _package_dir()
    return sorted(str(p.relative_to(pkg)) for folder in SANDBOX_FOLDERS for p in (pkg / folder).rglob("*.py"))


def bundle_modules() -> list[str]:
    """The bundle's modules, imported by the zygote before it forks (so no student pays for them)."""
    names = []
    for rel in bundle_files():
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] != "zygote":
            names.append(".".join(["autograder", *parts]))
    return names


def make_bundle(dest: Path) -> Path:
    """Copy the sandbox-side code into dest/autograder (with a stub package ``__init__`` whose
    check/grade do nothing) and put an import blocker for the reference package next to it."""
    pkg = dest / "autograder"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(_STUB)
    src = _package_dir()
    for rel in bundle_files():
        target = pkg / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
    blocker = dest / "vitref"
    blocker.mkdir(exist_ok=True)
    (blocker / "__init__.py").write_text(
        'raise ImportError("vitref (the course\'s reference solution) is not available while '
        'your notebook is graded: write the answer yourself")\n')
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    dest.chmod(0o755)
    return dest


def python_executable() -> str:
    """The interpreter of this environment by a path without symlinked folders (bubblewrap
    binds real paths; the interpreter itself may stay a link, so the virtual environment
    still applies)."""
    folder, name = os.path.split(sys.executable)
    return os.path.join(os.path.realpath(folder), name)


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    out = []
    for key in ("purelib", "platlib"):
        p = os.path.realpath(paths[key])
        if p not in out and os.path.isdir(p):
            out.append(p)
    return out


def _hidden_entry(site: str, name: str, hide: tuple[str, ...]) -> bool:
    low = name.lower()
    if low.startswith("__editable__") or low.startswith(HIDDEN_PACKAGES):
        return True
    if low.startswith("vitref_course") or low.startswith("vitref-course"):
        return True
    if low.endswith(".pth"):
        try:
            text = open(os.path.join(site, name), encoding="utf-8", errors="replace").read()
        except OSError:
            return True
        return "__editable__" in text or any(h and h in text for h in hide)
    if low.endswith(".egg-link"):
        return True
    return False


def _parents(path: str, made: set[str]) -> list[str]:
    """bwrap creates missing parent folders with mode 0700, which the unprivileged student
    process could not traverse: create them explicitly with mode 0755 first."""
    out = []
    parts = Path(path).parts
    for i in range(2, len(parts)):
        parent = str(Path(*parts[:i]))
        if parent not in made:
            made.add(parent)
            out += ["--perms", "0755", "--dir", parent]
    return out


def bwrap_command(bundle: Path, preload: list[str], payload: str,
                  hide: tuple[str, ...] = ()) -> list[str]:
    """The bubblewrap command line that starts one zygote."""
    args = _bwrap_base()
    args += ["--cap-drop", "ALL"]
    # CAP_KILL: init (zygote._kill_strays) ends the student uid's strays; the student process drops every capability
    for cap in ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN", "CAP_KILL"):
        args += ["--cap-add", cap]
    made = {"/usr", "/etc", "/tmp", "/dev", "/proc"}
    base = os.path.realpath(sys.base_prefix)
    args += _parents(base, made) + ["--ro-bind", base, base]
    prefix = os.path.realpath(sys.prefix)
    sites = _site_dirs()
    if prefix != base:
        args += _parents(prefix, made) + ["--ro-bind", prefix, prefix]
    for site in sites:
        if not (site.startswith(prefix + os.sep) or site.startswith(base + os.sep)):
            continue  # a site-packages outside the runtime is not bound at all
        args += ["--perms", "0755", "--tmpfs", site]
        for name in sorted(os.listdir(site)):
            if _hidden_entry(site, name, hide):
                continue
            path = os.path.join(site, name)
            args += ["--ro-bind", path, path]
        args += ["--remount-ro", site]
    # anything sensitive that happens to lie under a bound folder is covered up
    bound = ("/usr", "/etc", base, prefix)
    for path in hide:
        real = os.path.realpath(path)
        if any(real == b or real.startswith(b + os.sep) for b in bound):
            if os.path.isdir(real) and not (real == prefix or prefix.startswith(real + os.sep)
                                            or base.startswith(real + os.sep)):
                args += ["--tmpfs", real, "--remount-ro", real]
    args += _parents(BUNDLE_MOUNT, made)
    args += ["--ro-bind", str(bundle), BUNDLE_MOUNT, "--chdir", "/tmp", "--clearenv",
             "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1",
             "--setenv", "MKL_NUM_THREADS", "1", "--setenv", "MPLBACKEND", "Agg",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             python_executable(), "-E", "-s", "-B", f"{BUNDLE_MOUNT}/{ZYGOTE}",
             payload, ",".join(preload)]
    return args


def expand_hidden(paths: tuple[str, ...]) -> list[str]:
    """Mode 'namespaces': the paths to cover up in each student process. A hidden folder
    that contains the Python runtime or the virtual environment is replaced by its
    entries that do not; the course packages in site-packages are added."""
    keep = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
    out: list[str] = []

    def add(path: str) -> None:
        if any(path == k or path.startswith(k + os.sep) for k in keep):
            return                      # the runtime itself stays visible
        if any(k.startswith(path + os.sep) for k in keep):
            if os.path.isdir(path):
                for name in sorted(os.listdir(path)):
                    add(os.path.join(path, name))
            return
        if os.path.lexists(path):
            out.append(path)

    for p in paths:
        add(os.path.realpath(p))
    for site in _site_dirs():
        for name in sorted(os.listdir(site)):
            if _hidden_entry(site, name, tuple(paths)):
                out.append(os.path.join(site, name))
    return out


def blocked_ancestors(paths) -> list[list]:
    """[[folder, [paths under it]]]: for each path, the topmost folder on its way that
    other users cannot enter (e.g. /root, mode 0700), grouped."""
    import stat
    groups: dict[str, list[str]] = {}
    for path in paths:
        path = os.path.realpath(path)
        parts = Path(path).parts
        for i in range(2, len(parts)):
            folder = str(Path(*parts[:i]))
            try:
                mode_bits = os.stat(folder).st_mode
            except OSError:
                break
            if not mode_bits & stat.S_IXOTH:
                keeps = groups.setdefault(folder, [])
                if path not in keeps:
                    keeps.append(path)
                break
    return [[folder, keeps] for folder, keeps in groups.items()]


def plain_command(bundle: Path, preload: list[str], payload: str) -> list[str]:
    """The zygote without bubblewrap (modes 'namespaces' and 'limits')."""
    return [python_executable(), "-E", "-s", "-B", str(bundle / ZYGOTE),
            payload, ",".join(preload)]


# ------------------------------------------------------------------------ zygote

def data_dirs() -> tuple[str, ...]:
    """Folders that hold the datasets the training questions draw from (Debian's, ``$VITREF_DATA``,
    vitref's download cache): hidden from student code, whose held-out images would otherwise be
    answered by the dataset's own label files."""
    dirs = ["/usr/share/datasets", os.environ.get("VITREF_DATA", "")]
    try:
        # inner import: optional, a bare grading install has no vitref (and so no download cache to hide)
        from vitref.data import cache_dir

        dirs.append(str(cache_dir()))
    except Exception:  # noqa: BLE001 - no vitref (a bare grading install): nothing cached to hide
        pass
    return tuple(d for d in dict.fromkeys(dirs) if d and os.path.isdir(d))


class SandboxError(RuntimeError):
    pass


class Zygote:
    """One warm sandboxed process that runs submissions one at a time.

    slot: a small integer that makes the student uid unique among parallel jobs.
    hide: host paths that must not be visible to student code (course root, grading root).
    """

    def __init__(self, slot: int = 0, preload: tuple[str, ...] = EXTRA_PRELOAD,
                 payload: str = PAYLOAD,
                 hide: tuple[str, ...] = (), start_timeout: float = 120.0,
                 sandbox_mode: str | None = None, preload_checks: bool = True,
                 memory_mb: int | None = None):
        self.slot = slot
        self.preload = list(preload)
        if preload_checks:
            self.preload += [m for m in bundle_modules() if m not in preload]
        self.payload = payload
        self.hide = tuple(dict.fromkeys([str(h) for h in hide] + list(data_dirs())))
        self.start_timeout = start_timeout
        self.mode = sandbox_mode or mode()
        self.proc: subprocess.Popen | None = None
        # without bwrap each student gets a fresh tmpfs over /tmp: keep the bundle elsewhere
        where = None if self.mode == "bwrap" or not os.path.isdir("/var/tmp") else "/var/tmp"
        self._tmp = tempfile.TemporaryDirectory(prefix="autograder-bundle-", dir=where)
        self.bundle = make_bundle(Path(self._tmp.name))
        self.uid = UID_BASE + (os.getpid() % 10_000) * 64 + slot % 64
        self._child_hide = expand_hidden(self.hide) if self.mode == "namespaces" else []
        self.memory_mb = memory_mb
        self.group = None
        self.cpu_group = None
        self.prepared = False
        # the CPU the student processes of this job are pinned to (zygote._pin): one per slot
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.cpu = cpus[slot % len(cpus)] if cpus else None

    # -- process management
    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the zygote process without waiting for it (see :meth:`wait_ready`)."""
        if self.mode == "bwrap":
            cmd = bwrap_command(self.bundle, self.preload, self.payload, self.hide)
        else:
            cmd = plain_command(self.bundle, self.preload, self.payload)
        env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
               "PYTHONDONTWRITEBYTECODE": "1"}
        if self.memory_mb and self.group is None:
            # until the zygote is ready (torch imported): room for its imports plus the allowance
            self.group = job_group(f"autograder-{os.getpid()}-{self.slot}",
                                   (ZYGOTE_BASE_MB + int(self.memory_mb)) << 20)
        if self.cpu_group is None:
            # one CPU of time for the job's processes together (they are also pinned to one: zygote._pin)
            self.cpu_group = cpu_group(f"autograder-{os.getpid()}-{self.slot}", 1.0)
        groups = [g for g in (self.group, self.cpu_group) if g is not None]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd="/tmp",
                                     start_new_session=True,
                                     preexec_fn=(lambda: [g.enter() for g in groups]) if groups else None)
        self._stderr = bytearray()

    def wait_ready(self) -> None:
        header, _ = self._read(self.start_timeout)
        if header.get("status") != "ready":
            raise SandboxError(f"the grading sandbox did not start: {header}")
        self.prepared = header.get("prepared") is True    # the payload's prepare() ran once, before any run
        if self.group is not None:
            # the zygote's own memory (its imports) is now known: the student gets --memory on top
            base = self.group.usage() or (ZYGOTE_BASE_MB << 20)
            self.group.set_limit(base + (int(self.memory_mb) << 20))

    def close_process(self) -> None:
        """Kill the zygote (and with it whatever runs in its sandbox)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self.proc = None

    def close(self) -> None:
        self.close_process()
        if self.group is not None:
            self.group.remove()
            self.group = None
        if self.cpu_group is not None:
            self.cpu_group.remove()
            self.cpu_group = None
        self._tmp.cleanup()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def _restart(self) -> None:
        self.close_process()
        self.start()

    def _read(self, timeout: float) -> tuple[dict, bytes]:
        """One response frame from the zygote, or SandboxError after timeout seconds."""
        assert self.proc is not None
        out_fd, err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        buf = bytearray()
        deadline = time.monotonic() + timeout
        need = None
        while True:
            if need is None and len(buf) >= 4:
                hlen = int.from_bytes(buf[:4], "big")
                if len(buf) >= 4 + hlen:
                    header = json.loads(bytes(buf[4:4 + hlen]))
                    need = 4 + hlen + int(header.get("size", 0))
            if need is not None and len(buf) >= need:
                return header, bytes(buf[4 + hlen:need])
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("the grading sandbox stopped answering"
                                   + self._stderr_tail())
            ready, _, _ = select.select([out_fd, err_fd], [], [], left)
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if fd == err_fd:
                    self._stderr += chunk
                    del self._stderr[:-4000]
                    continue
                if not chunk:
                    raise SandboxError("the grading sandbox exited" + self._stderr_tail())
                buf += chunk

    def _stderr_tail(self) -> str:
        tail = self._stderr.decode("utf-8", "replace").strip()
        return f": {tail[-1500:]}" if tail else ""

    # -- running
    def run(self, notebook: bytes, qids: list[str], limits: Limits,
            name: str = "submission.ipynb", options: dict | None = None, inputs: bytes = b"",
            timeout: float | None = None) -> RunResult:
        """Run one notebook in a fresh sandboxed process; return the payload's bytes.
        ``inputs``: the run's input arrays (see :mod:`autograder.judging.secret`);
        ``timeout``: wall seconds for this attempt (default ``limits.timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            self._restart()
        timeout = limits.timeout if timeout is None else timeout
        options = dict(options or {})
        inputs, held = held_back(inputs, qids)     # the training data wait for the probe that asks (Feed)
        req = {"name": name, "qids": list(qids), "timeout": timeout, "notebook_size": len(notebook),
               "cell_kill": float(options.get("cell_timeout", 0)) + 2.0 if options.get("cell_timeout") else 0,
               "memory_mb": limits.memory_mb, "nproc": limits.nproc,
               "fsize_mb": limits.fsize_mb, "tmpfs_mb": limits.tmpfs_mb, "uid": self.uid,
               "mode": self.mode, "options": options or {},
               "hide": self._child_hide if self.mode == "namespaces" else [],
               "reexpose": blocked_ancestors([sys.base_prefix, sys.prefix, str(self.bundle)])
               if self.mode == "namespaces" else []}
        req.update(held.request, cpu=self.cpu)
        blob = json.dumps(dict(req, size=len(notebook) + len(inputs))).encode()
        try:
            self.proc.stdin.write(len(blob).to_bytes(4, "big") + blob + notebook + inputs + held.data)
            self.proc.stdin.flush()
            header, data = self._read(timeout + 60)
        except (SandboxError, OSError, ValueError) as exc:
            self._restart()
            return RunResult("error", reason=f"the grading sandbox failed: {exc}")
        result = RunResult(header.get("status", "error"), data, header.get("code"),
                           header.get("signal"), float(header.get("wall", 0.0)),
                           header.get("output", ""), header.get("reason", ""))
        return held.finish(result, header.get("training"))
