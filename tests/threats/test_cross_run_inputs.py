"""Threat: inputs handed over between the runs of a notebook, or between students.

A notebook runs once per set of forbidden functions among its questions
(:func:`autograder.hosts.driver.ban_groups`). In 07_vit the run that grades ``vit_forward``
(attention forbidden) may call ``F.cross_entropy``; the run that grades ``cross_entropy`` and
``label_smoothing`` may not. When every run received the inputs of every question, drawn from
one salt for the whole class, the first run could compute the library cross-entropy on the
inputs of the later run's questions and leave the values where the later run (or another
student's) finds them: a file, the page cache of a read-only library file, anything the kernel
shares. Now each run receives only its own questions' inputs, drawn from a salt secret to that
run (:func:`autograder.judging.secret.run_salt`), and each question is judged against the
inputs of the run that probed it.

The fast tests check the salts, the blobs and the judging; the slow ones grade hostile
students in the real sandbox, with a folder the test binds into it as the channel.
"""
from __future__ import annotations

import hmac

import secrets

import numpy as np
import pytest

import autograder
from autograder.batch.submission import RunInputs
from autograder.hosts.driver import Outcome, ban_groups, run_submission
from autograder.hosts.sandbox import Limits, RunResult
from autograder.judging.judge import judge_outcome
from autograder.judging.secret import SaltedSource, draw_inputs, draw_question, run_salt
from autograder.questions import inputs as I
from autograder.student import wire
from autograder.student.probe import probe

A = "07_vit"
CE = ("cross_entropy", "label_smoothing")
KEY = bytes(range(32))


def _qids(assignment=A):
    return [q.id for q in autograder.questions(assignment)]


def _keys(blob: bytes) -> set[str]:
    return set(wire.read_inputs(blob).arrays)


def _recipe_keys(qids, source=None) -> set[str]:
    out: set[str] = set()
    for qid in qids:
        out |= set(draw_inputs(autograder.question(qid), source or I.PublicSource()))
    return out


# ------------------------------------------------------------------------------- salts and blobs


def test_ce_questions_are_graded_in_a_run_of_their_own():
    """The premise of the threat: cross_entropy and label_smoothing share a run that forbids
    the library cross-entropy, and another run of the same notebook allows it."""
    groups = ban_groups(_qids())
    ce_runs = [index for index, (ban, group) in enumerate(groups) if set(CE) & set(group)]
    assert len(ce_runs) == 1 and set(CE) <= set(groups[ce_runs[0]][1])
    assert "cross_entropy" in groups[ce_runs[0]][0]
    assert any("cross_entropy" not in ban for ban, _ in groups)


def test_salts_differ_between_runs_students_assignments_and_jobs():
    qids = list(CE)
    base = run_salt(KEY, "alice", A, 1, qids)
    assert base == run_salt(KEY, "alice", A, 1, list(reversed(qids)))      # the same run: the same salt
    others = [run_salt(KEY, "alice", A, 0, qids), run_salt(KEY, "bob", A, 1, qids),
              run_salt(KEY, "alice", "08_decoder", 1, qids), run_salt(KEY, "alice", A, 1, ["cross_entropy"]),
              run_salt(bytes(32), "alice", A, 1, qids)]
    assert len({base, *others}) == 6
    assert all(0 < salt < 2 ** 63 for salt in [base, *others])
    with pytest.raises(ValueError):
        run_salt(b"short", "alice", A, 1, qids)


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_each_run_receives_only_its_own_questions_inputs_drawn_for_it():
    """The blob of a run holds exactly the inputs its questions ask for; two runs, two students
    and a re-run without ban never get the same values."""
    draw = RunInputs(KEY).for_submission("alice", A)
    groups = ban_groups(_qids())
    blobs = []
    for index, (_, group) in enumerate(groups):
        blob, source = draw(index, group)
        assert _keys(blob) == _recipe_keys(group, source)
        assert _keys(blob) == _recipe_keys(group)         # which inputs: the same for every salt
        blobs.append((group, blob, source))
    ce_group, ce_blob, ce_source = next(b for b in blobs if set(CE) <= set(b[0]))
    other_keys = set().union(*(_keys(b) for g, b, _ in blobs if g is not ce_group))
    assert _keys(ce_blob) - other_keys, "the cross-entropy inputs must reach their own run only"
    # a re-run without ban (run index 2) of the same questions, and another student, get other values
    again, again_source = draw(len(groups), ce_group)
    bob, bob_source = RunInputs(KEY).for_submission("bob", A)(1, ce_group)
    salts = {ce_source.salt, again_source.salt, bob_source.salt}
    assert len(salts) == 3
    mine = wire.read_inputs(ce_blob).arrays
    for blob in (again, bob):
        theirs = wire.read_inputs(blob).arrays
        assert set(theirs) == set(mine)
        assert not any(np.array_equal(mine[k], theirs[k]) for k in mine if mine[k].size > 1)
    # --public-inputs: the check()'s inputs, the run's questions only
    public, source = RunInputs(None).for_submission("alice", A)(1, ce_group)
    assert isinstance(source, I.PublicSource) and not isinstance(source, SaltedSource)
    assert _keys(public) == _keys(ce_blob)


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
@pytest.mark.parametrize("qid", [q.id for q in autograder.questions()])
def test_the_quick_draw_is_the_reference_draw(qid):
    """What a run receives (drawn from recipes recorded once, without running the reference)
    is what the recipe draws when the reference answer runs, array for array, whatever the
    salt: which inputs a recipe asks for does not depend on their values."""
    q = autograder.question(qid)
    for source in (I.PublicSource(), SaltedSource(123456789), SaltedSource(2 ** 62 + 5)):
        slow, quick = draw_inputs(q, source), draw_question(q, source)
        assert list(slow) == list(quick)
        for key in slow:
            assert slow[key].dtype == quick[key].dtype and np.array_equal(slow[key], quick[key]), key


# ------------------------------------------------------------------------------- judging per run


def _answer(qid):
    from answers.bank import solution_of
    return solution_of(qid)


@pytest.mark.parametrize("qid", ["label_smoothing", "attention_head"])
def test_a_result_is_judged_on_the_inputs_of_its_own_run(qid):
    """A correct result passes against its run's inputs and fails against another run's: the
    judge rebuilds the inputs (and the parameter pool) of the run that produced it, and its
    caches of references and of parameter layouts do not carry one run's values to another
    (the first verdict fills them)."""
    q = autograder.question(qid)
    mine, other = SaltedSource(run_salt(KEY, "alice", A, 1, [qid])), SaltedSource(run_salt(KEY, "bob", A, 1, [qid]))
    with I.using(mine):
        data = probe(q, _answer(qid))

    def verdict(source):
        return judge_outcome(q, Outcome(probes={qid: {"data": data, "run": 1, "source": source}}), cells=[])

    assert verdict(mine).passed
    wrong = verdict(other)
    assert not wrong.passed and wrong.score == 0
    assert verdict(mine).passed                       # and back: nothing of the other run was kept


class _RecordingHost:
    """A host that runs nothing: it records what each run received and answers every question
    of the run with the result ``results[qid]``, except ``stray``, whose result it sends in
    every run that does not grade it, and never in the one that does."""

    def __init__(self, results, stray=None):
        self.results, self.stray, self.runs = results, stray, []

    def run(self, raw, qids, limits, name="", options=None, inputs=b"", timeout=None):
        self.runs.append({"qids": list(qids), "ban": list(options["ban"]), "inputs": inputs})
        key = bytes.fromhex(options["frame_key"])      # signs as the probe's audit hook would

        def sign(data):
            return hmac.new(key, data, "sha256").hexdigest()

        out = [wire.frame({"event": "cells", "count": 0, "errors": [], "timed_out": []})]
        for qid in qids:
            if qid != self.stray:
                out.append(wire.result_frame(qid, self.results[qid], sign=sign))
        if self.stray and self.stray not in qids:
            out.append(wire.result_frame(self.stray, self.results[self.stray], sign=sign))
        out.append(wire.frame({"event": "done"}))
        return RunResult("ok", b"".join(out))


def test_the_driver_gives_each_run_its_inputs_and_remembers_them():
    """run_submission: one draw per run (its own questions), each probe result tied to the run
    and source that produced it, and a result sent for a question of another run refused."""
    qids = _qids()
    groups = ban_groups(qids)
    stub = {"qid": "x", "fatal": "stub", "cases": []}
    host = _RecordingHost({qid: dict(stub, qid=qid) for qid in qids}, stray="cross_entropy")
    inputs = RunInputs(KEY)
    outcome = run_submission(host, b"{}", qids, Limits(timeout=30), name="nb.ipynb",
                             inputs=inputs.for_submission("alice", A))
    assert [r["qids"] for r in host.runs] == [g for _, g in groups]
    assert [r["qids"] for r in outcome.runs] == [g for _, g in groups]
    for index, (run, (_, group)) in enumerate(zip(host.runs, groups)):
        assert _keys(run["inputs"]) == _recipe_keys(group)
        source = outcome.runs[index]["source"]
        assert source.salt == run_salt(KEY, "alice", A, index, group)
        for qid in group:
            if qid == "cross_entropy":
                continue
            assert outcome.probes[qid]["run"] == index and outcome.probes[qid]["source"] is source
    # the cross_entropy result sent by a run that does not grade it was not taken
    assert "cross_entropy" not in outcome.probes
    assert "label_smoothing" in outcome.probes


# ------------------------------------------------------------------ hostile students in the sandbox
#
# The channel: a folder of the test's, world-writable, bound into the sandbox at /channel (the
# sandbox itself shares no writable path between runs or students; any channel the kernel
# offers, e.g. the page cache of a read-only library file, serves the same way). One grading
# job (one RunInputs key, one zygote) grades the students in order, as a worker does.

# Shared by the notebooks and the test (which plants values for the control student with it).
TABLE_SOURCE = '''
import hashlib as _hl


def _lib_key(logits, targets, eps):
    x = np.asarray(logits, dtype=np.float64)
    t = np.asarray(targets, dtype=np.int64)
    return _hl.sha256(x.tobytes() + t.tobytes() + repr((x.shape, round(float(eps), 6))).encode()).hexdigest()


def _lib_table(arrays, ce):
    """The library cross-entropy (value and gradient) of every 2-D float input with every
    plausible target vector and smoothing, keyed by _lib_key."""
    table = {}
    floats = [a for a in arrays.values() if a.dtype.kind == "f" and a.ndim == 2]
    # a float64 case hands the answer its input times 1 + 3 * 2**-27 (the probe's public recipe)
    floats += [np.asarray(a, dtype=np.float64) * (1 + 3 * 2.0 ** -27) for a in floats]
    ints = [a for a in arrays.values() if a.dtype.kind == "i" and a.ndim == 1 and a.size]
    for x in floats:
        b, c = x.shape
        targets = [t for t in ints if len(t) == b and t.min() >= 0 and t.max() < c]
        targets += [x.argmin(axis=1).astype(np.int64), x.argmax(axis=1).astype(np.int64)]
        for t in targets:
            for eps in (0.0, 0.1, 0.2, 0.25, 0.3):
                xt = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
                loss = ce(xt, torch.tensor(t), label_smoothing=eps)
                loss.backward()
                table[_lib_key(x, t, eps)] = [float(loss.detach()), xt.grad.numpy().tolist()]
    return table
'''

CHANNEL_CELL = TABLE_SOURCE + '''
import gc as _gc, json as _js, os as _os, uuid as _uu
_CHANNEL = "@CHANNEL@"


def _feed():
    """In a run where the library cross-entropy works: compute it on every input this run
    received (found among the live objects) and leave it in the channel."""
    ce = getattr(F, "cross" + "_entropy")
    try:
        ce(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))
    except Exception:
        return                                  # forbidden in this run
    try:
        live = _gc.get_objects()
    except PermissionError:                     # the sandbox's audit hook (autograder/student/guard.py)
        path = _os.path.join(_CHANNEL, _uu.uuid4().hex + ".refused")
        with open(path, "w") as fh:
            fh.write("gc.get_objects refused")
        _os.chmod(path, 0o666)
        return
    for obj in live:
        if type(obj).__name__ == "ProvidedSource":
            arrays = obj.arrays
            data = {"keys": sorted(arrays), "table": _lib_table(arrays, ce)}
            path = _os.path.join(_CHANNEL, _uu.uuid4().hex + ".json")
            with open(path + ".part", "w") as fh:
                _js.dump(data, fh)
            _os.chmod(path + ".part", 0o666)
            _os.rename(path + ".part", path)


def _relay(logits, targets, eps):
    """The library's loss, if some run left it in the channel: its value, and its gradient
    through autograd; else a wrong answer."""
    key = _lib_key(logits.detach().numpy(), targets.numpy(), eps)
    for name in sorted(_os.listdir(_CHANNEL)):
        if name.endswith(".json"):
            with open(_os.path.join(_CHANNEL, name)) as fh:
                found = _js.load(fh)["table"].get(key)
            if found is not None:
                grad = torch.tensor(found[1], dtype=logits.dtype)
                return (logits * grad).sum() + (found[0] - (logits.detach() * grad).sum())
    return (logits * 0).sum()
'''

READER_CE = '''
def cross_entropy(logits, targets):
    return _relay(logits, targets, 0.0)
'''

READER_LS = '''
def smoothed_cross_entropy(logits, targets, smoothing=0.1):
    return _relay(logits, targets, smoothing)
'''


def _student(kind: str, channel: str):
    import grading_students as S

    nb = S.load(A)
    cell = CHANNEL_CELL.replace("@CHANNEL@", channel) + ("\n_feed()\n" if kind in ("feeder", "relay") else "")
    S.insert_cell(nb, cell)
    if kind in ("relay", "taker", "planted"):
        S.replace_definition(nb, "cross_entropy", READER_CE)
        S.replace_definition(nb, "smoothed_cross_entropy", READER_LS)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade, in one job: a feeder (honest answers; in the run where F.cross_entropy is allowed
    it computes it on every input it received and leaves the values in the channel), a taker
    (answers cross_entropy and label_smoothing with what it finds in the channel), a relay (both,
    between its own runs), a control taker for whose cross-entropy run the test itself plants the
    library values (the channel and the reader work), and an honest student."""
    import os

    import grading_students as S
    from autograder.batch.pool import preload_modules
    from autograder.batch.submission import grade_task
    from autograder.batch.tasks import Task
    from autograder.hosts import sandbox
    from autograder.judging.secret import run_inputs

    root = tmp_path_factory.mktemp("class")
    channel = tmp_path_factory.mktemp("channel")
    os.chmod(channel, 0o777)                    # the sandboxed uid writes here
    zygote = sandbox.Zygote(slot=0, preload=tuple(preload_modules(None, [A])), hide=(str(root),), memory_mb=None)
    inside = "/channel" if zygote.mode == "bwrap" else str(channel)
    original = sandbox.bwrap_command

    def with_channel(*args, **kwargs):
        cmd = original(*args, **kwargs)
        at = cmd.index(sandbox.python_executable(), cmd.index("--chdir"))
        return cmd[:at] + ["--bind", str(channel), "/channel"] + cmd[at:]

    students = ["feeder", "taker", "relay", "planted", "honest"]
    for name in students:
        S.write(S.load(A) if name == "honest" else _student(name, inside), root, name, A)
    qids = _qids()
    key = secrets.token_bytes(32)
    # the control: the library values for the planted student's cross-entropy run, by the test
    ce_index, ce_group = next((i, g) for i, (_, g) in enumerate(ban_groups(qids)) if "cross_entropy" in g)
    blob = run_inputs(ce_group, SaltedSource(run_salt(key, "planted", A, ce_index, ce_group)))
    namespace = {"np": np, "torch": __import__("torch")}
    exec(TABLE_SOURCE, namespace)  # noqa: S102 - the notebooks' own table code, run by the test
    import json
    import torch.nn.functional as F
    table = namespace["_lib_table"](wire.read_inputs(blob).arrays, F.cross_entropy)
    (channel / "planted-by-the-test.json").write_text(json.dumps({"keys": [], "table": table}))

    mp = pytest.MonkeyPatch()
    mp.setattr(sandbox, "bwrap_command", with_channel)
    results = {}
    try:
        zygote.start()
        inputs = RunInputs(key)
        for name in students:
            path = root / "submitted" / name / A / f"{A}.ipynb"
            task = Task(name, A, str(path.parent), str(path), "", qids)
            result = grade_task(task, zygote, Limits(timeout=90, memory_mb=2048), inputs)
            results[name] = {q["id"]: q for q in result["questions"]}
    finally:
        zygote.close()
        mp.undo()
    files = [json.loads(p.read_text()) for p in sorted(channel.glob("*.json"))
             if p.name != "planted-by-the-test.json"]
    refused = sorted(channel.glob("*.refused"))
    return results, (files, refused), ce_group


def _scores(results, name):
    return {qid: row["score"] for qid, row in results[name].items()}


def _full(results, name):
    return {qid: row["max_score"] for qid, row in results[name].items()}


@pytest.mark.slow
def test_the_channel_carried_what_the_allowed_runs_received(graded):
    """The feeders' runs that may call F.cross_entropy tried to reach everything their run received
    (the live objects): the sandbox refuses the garbage collector's object list, so each left only
    the refusal in the channel; anything written holds none of the cross-entropy questions' inputs."""
    results, (files, refused), ce_group = graded
    assert len(refused) >= 2, "the feeder and the relay each reached gc.get_objects in their run that allows it"
    others = _recipe_keys([q for q in _qids() if q not in ce_group])
    ce_only = _recipe_keys(ce_group) - others
    assert ce_only
    for data in files:
        assert not ce_only & set(data["keys"])
        assert set(data["keys"]) <= others


@pytest.mark.slow
def test_control_the_reader_scores_when_the_library_values_reach_it(graded):
    """The control: values computed by the library on the planted student's own cross-entropy
    run's inputs reach its answers through the channel, and they pass. So a zero below means the
    inputs never reached a run that could compute them, not a broken channel."""
    results, _, _ = graded
    scores, full = _scores(results, "planted"), _full(results, "planted")
    assert scores["cross_entropy"] == full["cross_entropy"] > 0
    assert scores["label_smoothing"] == full["label_smoothing"] > 0


@pytest.mark.slow
def test_cross_run_hand_over_scores_zero(graded):
    """(a) The relay's run that allows F.cross_entropy cannot compute it on the inputs of the
    run that forbids it: both questions zero, its other answers full marks."""
    results, _, _ = graded
    scores, full = _scores(results, "relay"), _full(results, "relay")
    assert scores["cross_entropy"] == 0 and scores["label_smoothing"] == 0
    assert all(scores[q] == full[q] for q in scores if q not in CE)


@pytest.mark.slow
def test_cross_student_hand_over_scores_zero(graded):
    """(b) What another student of the same job computed is for other inputs: the taker's
    cross-entropy answers score zero."""
    results, _, _ = graded
    scores, full = _scores(results, "taker"), _full(results, "taker")
    assert scores["cross_entropy"] == 0 and scores["label_smoothing"] == 0
    assert all(scores[q] == full[q] for q in scores if q not in CE)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["honest", "feeder"])
def test_honest_answers_keep_full_marks(graded, name):
    """(c) Honest answers in the same job (the feeder's answers are the solution's) keep full
    marks: each question judged on the inputs of the run that probed it."""
    results, _, _ = graded
    assert _scores(results, name) == _full(results, name)
    assert sum(_full(results, name).values()) == sum(q.points for q in autograder.questions(A))
