"""A memory limit on *all* the processes of a grading job's sandbox, with Linux cgroups.

Resource limits (``setrlimit``) are per process: a submission that forks 32 children could
use 32 times ``--memory``. A cgroup counts them together. :func:`job_group` creates one
group per grading job, under the grader's own group, and the job's sandbox process (the
zygote, which runs one submission at a time) is moved into it before it starts, so every
student process it forks is charged there. The limit is the zygote's own memory plus
``--memory``; the student processes are the OOM killer's first choice (``oom_score_adj``).

Where it works:

* cgroup v2 (a unified hierarchy with the ``memory`` controller enabled for the grader's
  group and writable by it, e.g. a systemd service or ``systemd-run --scope -p Delegate=yes``);
* cgroup v1 (a writable ``memory`` hierarchy, e.g. running as root in a container);

elsewhere :func:`job_group` returns None and only the per-process limits hold (the grader
says so once, and book/for_instructors.md states it).

:func:`cpu_group` likewise gives a job's processes together at most one CPU of time (cgroup v2
``cpu.max``, v1 ``cpu.cfs_quota_us``), where the ``cpu`` controller is delegated/writable. It
backs up the pinning of the student's process to one CPU (``student.zygote._pin``, which holds
in every sandbox mode).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str | None) -> str | None:
    """This process's group in the hierarchy of ``controller`` (None: the unified one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if controller is None and number == "0" and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return None


class Group:
    """One job's cgroup: :meth:`enter` moves the calling process in (use as preexec_fn)."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version

    def set_limit(self, limit_bytes: int) -> None:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        (self.path / name).write_text(str(int(limit_bytes)))
        if self.version == 2:
            try:
                (self.path / "memory.swap.max").write_text("0")
            except OSError:
                pass

    def set_cpus(self, cpus: float) -> None:
        """At most ``cpus`` CPUs of time for the group's processes together (CFS quota)."""
        period = 100_000
        quota = max(1000, int(period * float(cpus)))
        if self.version == 2:
            (self.path / "cpu.max").write_text(f"{quota} {period}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def enter(self) -> None:
        with open(self.path / "cgroup.procs", "w") as handle:
            handle.write(str(os.getpid()))

    def usage(self) -> int | None:
        for name in ("memory.current", "memory.usage_in_bytes"):
            try:
                return int((self.path / name).read_text())
            except (OSError, ValueError):
                continue
        return None

    def remove(self) -> None:
        """Kill what is left in the group and remove it (retried for a second: a killed
        process stays a member until it has exited, and the group cannot be removed before)."""
        import time

        for _ in range(50):
            try:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _candidates() -> list[tuple[Path, int]]:
    out = []
    unified = _own_path(None)
    for mount in (ROOT, ROOT / "unified"):
        if unified is not None and (mount / "cgroup.controllers").is_file():
            try:
                controllers = (mount / unified.lstrip("/") / "cgroup.controllers").read_text().split()
            except OSError:
                controllers = []
            if "memory" in controllers:
                out.append((mount / unified.lstrip("/"), 2))
    v1 = _own_path("memory")
    if v1 is not None and (ROOT / "memory").is_dir():
        out.append((ROOT / "memory" / v1.lstrip("/"), 1))
    return out


def job_group(name: str, limit_bytes: int) -> Group | None:
    """A fresh group ``name`` with the memory limit, or None where cgroups cannot be used."""
    return _first_group(_candidates(), name, "memory", lambda group: group.set_limit(limit_bytes),
                        keep_existing=False)


def cpu_group(name: str, cpus: float = 1.0) -> Group | None:
    """Group ``name`` (in v2 the same group as :func:`job_group`'s, which a process must share)
    with at most ``cpus`` CPUs of time, or None where the ``cpu`` controller cannot be used."""
    candidates = []
    unified = _own_path(None)
    for mount in (ROOT, ROOT / "unified"):
        if unified is not None and (mount / "cgroup.controllers").is_file():
            candidates.append((mount / unified.lstrip("/"), 2))
    v1 = _own_path("cpu")
    if v1 is not None and (ROOT / "cpu").is_dir():
        candidates.append((ROOT / "cpu" / v1.lstrip("/"), 1))
    return _first_group(candidates, name, "cpu", lambda group: group.set_cpus(cpus), keep_existing=True)


def _first_group(candidates, name: str, controller: str, configure, keep_existing: bool) -> Group | None:
    """Group ``name`` under the first of ``candidates`` ((parent, cgroup version)) where it can be made
    and ``configure``d (in v2, only where ``controller`` is delegated to the parent's children); a
    group that fails is removed again (``keep_existing``: unless it was there before). None: nowhere."""
    for parent, version in candidates:
        path = parent / name
        made = not path.exists() if keep_existing else True
        try:
            if version == 2 and controller not in (parent / "cgroup.subtree_control").read_text().split():
                continue               # the controller is not delegated to our children
            path.mkdir(exist_ok=True)
            group = Group(path, version)
            configure(group)
            return group
        except OSError:
            if made:
                try:
                    path.rmdir()
                except OSError:
                    pass
            continue
    return None


def describe() -> str:
    """Which kind of memory limit a grading run gets here, in words."""
    group = job_group(f"autograder-probe-{os.getpid()}", 1 << 30)
    if group is None:
        return "per process only (no writable cgroup with the memory controller)"
    group.remove()
    return f"per submission (cgroup v{group.version})"
