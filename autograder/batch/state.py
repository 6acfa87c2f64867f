"""Resumable state: ``ROOT/.autograder/results/<student>/<assignment>.json``, one file per
graded submission, written atomically as soon as it is graded (:func:`save_state`). A result is
reused (:func:`load_state`) while its notebook and the grader's version are unchanged, so an
interrupted batch (or a killed shard) resumes where it stopped. A loaded result is cleaned
(:func:`autograder.batch.text.clean_result`) like a new one, so that a result an older grader
saved with a student's control characters or lone surrogates cannot fail a later run."""
from __future__ import annotations

import json
import os
from pathlib import Path

from autograder.batch.tasks import Task
from autograder.batch.text import clean_result

STATE = Path(".autograder") / "results"


def state_path(root: Path, student: str, assignment: str) -> Path:
    """``assignment`` "" (a student folder that is a link: no assignment was read) is ``_.json``."""
    return root / STATE / student / f"{assignment or '_'}.json"


def save_state(root: Path, result: dict) -> None:
    path = state_path(root, result["student"], result["assignment"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_state(root: Path, task: Task, any_version: bool = False) -> dict | None:
    """The saved result of a submission if it is still valid (same notebook and grader)."""
    path = state_path(root, task.student, task.assignment)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        return None
    if not (any_version or data.get("digest") == task.digest):
        return None
    data = clean_result(data)
    data["student"], data["assignment"] = task.student, task.assignment    # whose file it is
    return data


def load_results(root: Path) -> list[dict]:
    """Every saved result under ROOT/.autograder/results/ (all shards that share ROOT)."""
    out = []
    for path in sorted((Path(root) / STATE).glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("questions"), list) \
                and isinstance(data.get("student"), str) and isinstance(data.get("assignment"), str):
            out.append(clean_result(data))
    return out
