"""The grading jobs: :class:`Pool` keeps one worker process per job, each with its own sandbox
zygote (:class:`autograder.hosts.sandbox.Zygote`, booted with :func:`preload_modules`), and hands
each task to whichever job is free. A job grades (:func:`autograder.batch.submission.grade_task`),
writes the submission's pages (:func:`autograder.batch.outputs.write_pages`) and sends the result
back; a job that dies is replaced and its submission gets an error result."""
from __future__ import annotations

import gc
import json
import multiprocessing
import os
import secrets
import signal
from dataclasses import asdict
from multiprocessing.connection import wait as wait_any
from pathlib import Path

from autograder.batch.outputs import write_pages
from autograder.batch.submission import RunInputs, error_result, grade_task, short_reason
from autograder.batch.tasks import Task
from autograder.batch.text import clean
from autograder.hosts.sandbox import EXTRA_PRELOAD, Limits, Zygote


JUDGE_MEMORY_MB = 4096      # memory a grading job may allocate beyond its imports


def preload_modules(sources_dir: Path | None, assignments: list[str]) -> list[str]:
    """Modules the zygote imports once: the numerical stack and whatever the source
    notebooks import at top level (except the course's own packages)."""
    import ast
    mods = list(dict.fromkeys([*EXTRA_PRELOAD, "torch.nn", "torch.nn.functional", "einops.layers.torch"]))
    if sources_dir is None:
        return mods
    for assignment in assignments:
        for path in sorted((sources_dir / assignment).glob("*.ipynb")) if (sources_dir / assignment).is_dir() else []:
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for cell in nb.get("cells", []):
                if cell.get("cell_type") != "code":
                    continue
                src = "".join(cell.get("source", ""))
                try:
                    tree = ast.parse(src)
                except SyntaxError:
                    continue
                for node in tree.body:
                    names = []
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                        names = [node.module]
                    for name in names:
                        if name.split(".")[0] in ("vitref", "autograder", "google"):
                            continue
                        if name not in mods:
                            mods.append(name)
    return mods


def _worker(slot: int, conn, options: dict) -> None:
    """A grading job: owns one sandbox zygote, grades the tasks it is sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the coordinator handles Ctrl-C
    limits = Limits(**options["limits"])
    zygote = Zygote(slot=slot, preload=tuple(options["preload"]), hide=tuple(options["hide"]),
                    memory_mb=limits.memory_mb)
    _stop_with(zygote)
    try:
        zygote.launch()                # the sandbox boots while this job imports the judges
        # inner import: the judges (~250 ms: catalogue, vitref) load here, while the sandbox boots, in each job
        import autograder.judging.judge  # noqa: F401 - imported now, not on the first task
        # inner import: as above (the references the judges build)
        import vitref  # noqa: F401 - the judges' references, imported now, not on the first task
        # what is imported so far lives as long as the job: out of the collector's sight, so that a full
        # collection walks only what judging allocates (it took ~5% of the machine during a class, walking torch)
        gc.collect()
        gc.freeze()
        zygote.wait_ready()
    except Exception:  # noqa: BLE001 - run() restarts it on the first task and reports there
        zygote.close_process()
    _cap_memory(JUDGE_MEMORY_MB)
    # this job's secret: every run of every submission draws its inputs from a salt derived from it
    inputs = RunInputs(None if options.get("public_inputs") else secrets.token_bytes(32))
    sources = options.get("sources") or {}
    try:
        conn.send(("ready", slot, None))
        while True:
            try:
                item = conn.recv()
            except EOFError:
                break
            if item is None:
                break
            task = Task(**item)
            try:
                result = grade_task(task, zygote, limits, inputs, sources.get(task.assignment))
            except Exception as error:  # noqa: BLE001 - a grader bug: this submission's error result, the job goes on
                import sys
                import traceback
                # the traceback may quote the student's text: printed cleaned (no escape sequences)
                print(clean(traceback.format_exc(), 20_000), file=sys.stderr, flush=True)
                result = error_result(task, f"the grader failed on this submission "
                                            f"({type(error).__name__}: {short_reason(error)}); "
                                            f"please report this")
            write_pages(options, task, result)
            conn.send(("done", slot, result))
    finally:
        zygote.close()


def _stop_with(zygote) -> None:
    """SIGTERM (the coordinator stopping, or an instructor's kill) ends a grading job at once
    and takes its sandbox with it: the zygote's process group is killed (a student process
    in its pid namespace dies with it) and its cgroup removed."""
    def stop(signum, frame):
        try:
            zygote.close()
        finally:
            os._exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)


def _cap_memory(mb: int) -> None:
    """Soft data limit for a grading job: judging forged or huge outputs fails with
    MemoryError (a zero for that answer) instead of exhausting the machine."""
    import resource
    try:
        with open("/proc/self/status") as fh:
            data = next(int(line.split()[1]) << 10 for line in fh if line.startswith("VmData"))
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = data + (mb << 20)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (OSError, ValueError, StopIteration):
        pass


class Pool:
    """Worker processes, each with its own sandbox; tasks go to whichever job is free."""

    def __init__(self, jobs: int, options: dict):
        self.ctx = multiprocessing.get_context("fork")
        self.options = options
        self.workers: dict[int, tuple] = {}
        for slot in range(jobs):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(slot, child, self.options), daemon=True)
        proc.start()
        child.close()
        self.workers[slot] = (proc, parent)

    def run(self, tasks: list[Task], on_result) -> None:
        """Grade ``tasks`` on the jobs; ``on_result(result)`` is called, in this process, as each ends."""
        todo = list(reversed(tasks))
        busy: dict[int, Task] = {}
        ready: set[int] = set()
        while todo or busy:
            for slot in sorted(ready):
                if not todo:
                    break
                task = todo.pop()
                self.workers[slot][1].send(asdict(task))
                busy[slot] = task
                ready.discard(slot)
            waitables = {}
            for slot, (proc, conn) in self.workers.items():
                waitables[conn] = slot
                waitables[proc.sentinel] = slot
            for obj in wait_any(list(waitables)):
                slot = waitables[obj]
                proc, conn = self.workers[slot]
                if obj is conn:
                    try:
                        kind, _, result = conn.recv()
                    except (EOFError, OSError):
                        continue
                    if kind == "ready":
                        ready.add(slot)
                    else:
                        busy.pop(slot, None)
                        ready.add(slot)
                        on_result(result)
                elif not proc.is_alive():
                    # the job died (not the student: the grader itself); its task is an error
                    task = busy.pop(slot, None)
                    ready.discard(slot)
                    conn.close()
                    if task is not None:
                        on_result(error_result(task, f"the grading job died (exit code "
                                                     f"{proc.exitcode}) on this submission"))
                    self._spawn(slot)

    def close(self, now: bool = False) -> None:
        """Stop the jobs: after their current task, or (now=True, on Ctrl-C) at once; a
        job's sandbox dies with it (bubblewrap's --die-with-parent)."""
        for proc, conn in self.workers.values():
            if now:
                proc.terminate()
                continue
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc, conn in self.workers.values():
            proc.join(timeout=5 if now else 60)
            if proc.is_alive():
                proc.kill()
                proc.join()
