"""The training data of a run and the clock of the training question (grader side).

A question that trains a model (``Question.seconds`` > 0, assignment 09) gets its training
images from the grader like every other input, but not with the others: :func:`held_back`
takes the dataset arrays out of the inputs the notebook's process receives at its start, so no
notebook cell can find them (and train before ``train_vit`` is called). The host (the zygote in
the sandbox, :class:`autograder.hosts.child_process.LocalHost` for ``check``) keeps them in a
:class:`autograder.student.zygote.Feed` and hands them over when the student's process asks for
them, which the training probe does right before it calls ``train_vit``. The host times the
training from that moment to the first result frame of the question, kills the run when that
takes longer than :func:`autograder.questions.ch09_training.time_limit`, and the driver stamps
the host's measurement on the result (:func:`stamp`): the student's own clock never counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..questions import question
from ..questions.ch09_training import KILL_MARGIN, time_limit
from ..student import wire


DATASET_KEY = "('dataset',"       # how the descriptions of dataset inputs start (inputs.key_text)


def timed(qids) -> list[str]:
    """The questions among ``qids`` that train a model (their probe is timed by the host)."""
    return [qid for qid in dict.fromkeys(qids) if question(qid).seconds]


def limit(qids) -> float:
    """Seconds from handing over the training data to the training result, beyond which the
    host stops the run (0 when no question of ``qids`` trains)."""
    seconds = [float(case.params.get("seconds", 0)) for qid in timed(qids) for case in question(qid).cases]
    return time_limit(max(seconds)) if seconds else 0.0


@dataclass
class Held:
    """What :func:`held_back` kept from the inputs: ``data`` (inputs bytes, possibly empty) and
    the request fields that tell the host how to hand them over and time them."""
    data: bytes = b""
    request: dict = field(default_factory=dict)

    def finish(self, result, report):
        """Attach the host's training report to ``result`` (a RunResult); a run stopped at the
        training's limit becomes a timeout that says so."""
        if not isinstance(report, dict):
            report = {}
        result.extra["training"] = report
        if report.get("overdue"):
            result.status = "timeout"
            result.reason = overdue_reason(float(report.get("limit") or self.request.get("held_limit", 0)))
        return result


def overdue_reason(seconds: float) -> str:
    return (f"train_vit did not return its model within {seconds:.0f} s of receiving its training data (its "
            f"seconds, 10% + 2 s of slack and {KILL_MARGIN:g} s for sending the parameters): the grader stopped "
            f"it; the time is measured by the grader, not by the notebook's clock")


def held_back(inputs: bytes, qids) -> tuple[bytes, Held]:
    """``inputs`` without the dataset arrays, and those arrays (a separate inputs blob) with the
    time limit of the questions of ``qids`` that train."""
    qids = list(qids)
    request = {"held_size": 0, "held_limit": limit(qids), "held_qids": timed(qids)}
    if not inputs:
        return inputs, Held(b"", request)
    # inner import: judging.secret loads the catalogue and vitref (~250 ms), kept out of the `grade` coordinator
    from ..judging.secret import pack_inputs

    source = wire.read_inputs(inputs)
    held = {key: value for key, value in source.arrays.items() if key.startswith(DATASET_KEY)}
    if not held:
        return inputs, Held(b"", request)
    rest = {key: value for key, value in source.arrays.items() if key not in held}
    data = pack_inputs(held, source.pool())
    return pack_inputs(rest, source.pool()), Held(data, dict(request, held_size=len(data)))


def stamp(data: dict, qid: str, run) -> None:
    """Put the host's measurement of the training on every case of ``data`` (a result of the
    timed question ``qid`` from ``run``): ``measured_seconds``, None when the host never
    handed over the training data or this result did not stop its clock."""
    report = (getattr(run, "extra", None) or {}).get("training") or {}
    seconds = report.get("seconds") if report.get("qid") == qid else None
    for case in data.get("cases") or []:
        if isinstance(case, dict):
            case["measured_seconds"] = None if seconds is None else float(seconds)
