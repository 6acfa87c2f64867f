"""Book build time: ``jupyter-book build`` on a fresh copy of the course, then again unchanged.

    python -m bench.book_build

The working tree (without .git, .venv, _build, runs) is copied to a temporary folder, so the
first build executes every chapter from scratch (no execution cache) and the second build finds
everything cached. Targets: fresh <= 10 min, unchanged rebuild <= 60 s. Prints
``book_fresh_s=... book_cached_s=...`` last.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_FRESH, TARGET_CACHED = 600, 60
SKIP = shutil.ignore_patterns(".git", ".venv", "_build", "runs", "__pycache__", ".ipynb_checkpoints", ".fmnist",
                              "instructor", "*.egg-info")


def jupyter_book() -> str:
    local = Path(sys.executable).with_name("jupyter-book")
    return str(local) if local.exists() else "jupyter-book"


def build(folder: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([jupyter_book(), "build", str(folder), "--keep-going"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, status(done.returncode, done.stderr)


def status(returncode: int, stderr: str) -> str:
    """The build's status: "ok" when it exited 0, else the exit status and the end of its stderr."""
    return "ok" if returncode == 0 else f"exit {returncode}: {stderr.strip()[-500:]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.book_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="vitref-book-")) / "course"
    shutil.copytree(ROOT, folder, ignore=SKIP)
    try:
        fresh, fresh_status = build(folder)
        cached, cached_status = build(folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder.parent, ignore_errors=True)
    print(f"book fresh build: {fresh:.0f} s (build {fresh_status}; target <= {TARGET_FRESH} s "
          f"{'met' if fresh <= TARGET_FRESH else 'missed'})")
    print(f"book unchanged rebuild: {cached:.0f} s (build {cached_status}; target <= {TARGET_CACHED} s "
          f"{'met' if cached <= TARGET_CACHED else 'missed'})")
    print(f"book_fresh_s={fresh:.0f} book_cached_s={cached:.0f}")
    return 0 if fresh_status == cached_status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
