"""The seal's snapshot taken once in the zygote (guard.prepare) and inherited by each student process.

Each case runs in a fresh interpreter (the audit hook cannot be removed from this one): it prepares
as the sandbox's zygote does, forks as it does for a student, locks down, seals, then changes what
the probes rely on. The script lives in a folder the lockdown is told is library code, so its own
calls are not the student's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch
    from autograder.student import guard, payload

    payload.prepare()
    mode = sys.argv[1]
    if mode == "changed-before":        # between the zygote's snapshot and the lockdown
        import builtins
        builtins.added_by_a_library = True
    elif mode == "module-added":        # a grader module imported after the snapshot
        import autograder.student.local  # noqa: F401
    pid = os.fork()
    if pid == 0:
        here = os.path.dirname(os.path.abspath(__file__))
        trusted = guard.trusted_dirs([os.path.dirname(os.path.dirname(guard.__file__)), here])

        def lock():
            guard.lockdown(trusted, b"k" * 32)

        def payload_like():             # the lockdown's root frame (the payload's), below all that follows
            lock()
            kept = guard._prepared_snapshot() is not None
            changed = guard.seal()
            before = changed()
            torch.nn.Linear.forward = lambda self, x: x
            after = changed()
            print(json.dumps({"kept": kept, "before": before, "after": after}))
            sys.stdout.flush()
        payload_like()
        os._exit(0)
    os.waitpid(pid, 0)
''')


def run(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / "zygote_like.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_zygotes_snapshot_is_kept_and_still_sees_a_change(tmp_path):
    got = run(tmp_path, "untouched")
    assert got["kept"], "the student process took the seal's snapshot again instead of inheriting it"
    assert got["before"] == []
    assert "torch.nn.modules.linear.Linear.forward" in got["after"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["changed-before", "module-added"])
def test_a_change_before_the_lockdown_makes_a_new_snapshot(tmp_path, mode):
    """What changed between the zygote's snapshot and the first cell is the new baseline (as when the
    snapshot is taken in the student process), and later changes are still seen."""
    got = run(tmp_path, mode)
    assert not got["kept"]
    assert got["before"] == []
    assert "torch.nn.modules.linear.Linear.forward" in got["after"]


@pytest.mark.slow
def test_the_sandboxs_zygote_prepares_once_before_its_first_run():
    from autograder.hosts import sandbox

    zygote = sandbox.Zygote(slot=5, memory_mb=None)
    try:
        zygote.start()
        assert zygote.prepared
    finally:
        zygote.close()


BAN_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch._decomp
    from autograder.student import ban

    ban.prepare()
    out = {}
    for warm in (True, False):
        read, write = os.pipe()
        if os.fork() == 0:
            ban.install(["attention", "layer_norm", "cross_entropy"], warm=warm)
            x = torch.randn(2, 3)
            raised = []
            F = torch.nn.functional
            for name, call in [("softmax", lambda: torch.softmax(x, -1)),
                               ("layer_norm", lambda: F.layer_norm(x, (3,))),
                               ("cross_entropy", lambda: F.cross_entropy(x, torch.tensor([0, 1])))]:
                try:
                    call()
                except Exception as error:
                    raised.append(name + ":" + type(error).__name__)
            replaced = sorted(str(op) for table in ban._decomposition_tables() for op, fn in table.items()
                              if getattr(fn, "__qualname__", "") == "_raiser.<locals>.forbidden")
            os.write(write, json.dumps({"raised": raised, "replaced": replaced}).encode())
            os._exit(0)
        os.close(write)
        out[str(warm)] = json.loads(os.read(read, 1 << 20))
        os.wait()
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_a_runs_first_ban_made_from_the_zygotes_lookups_is_the_same_ban(tmp_path):
    script = tmp_path / "bans.py"
    script.write_text(BAN_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["True"] == got["False"]
    assert len(got["True"]["raised"]) == 3 and got["True"]["replaced"], got["True"]


HUGE_SCRIPT = textwrap.dedent('''
    import json, zlib
    from autograder.student import zygote

    def huge_kb():
        with open("/proc/self/smaps_rollup") as fh:
            return int(next(line.split()[1] for line in fh if line.startswith("AnonHugePages")))

    block = bytearray(64 << 20)                  # 64 MiB of private memory, every page written
    for offset in range(0, len(block), 4096):
        block[offset] = offset // 4096 % 251
    digest, before = zlib.crc32(block), huge_kb()
    collapsed = zygote._huge_pages()
    print(json.dumps({"collapsed": collapsed, "gained_kb": huge_kb() - before,
                      "same": zlib.crc32(block) == digest}))
''')


def _thp_unavailable() -> str:
    """Why this machine cannot collapse memory into huge pages ('' when it can)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            if "[never]" in fh.read():
                return "transparent huge pages are turned off on this machine"
    except OSError:
        return "this kernel has no transparent huge pages"
    major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    return "" if (major, minor) >= (6, 1) else "MADV_COLLAPSE needs Linux 6.1"


@pytest.mark.skipif(bool(_thp_unavailable()), reason=_thp_unavailable() or "-")
def test_the_zygote_moves_its_private_memory_onto_huge_pages_and_keeps_its_contents():
    """What makes a fork of the zygote cheap (one page-table entry per 2 MiB): its memory collapsed
    into huge pages, every byte as it was."""
    out = subprocess.run([sys.executable, "-c", HUGE_SCRIPT], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["same"]
    assert found["collapsed"] >= 32 << 20, found
    assert found["gained_kb"] >= 32 << 10, found
