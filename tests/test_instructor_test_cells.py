"""Two things that keep a submission from running more often than its exercises need.

The instructor's own test cells, where a submission holds them unchanged, are sent empty
(:func:`autograder.batch.submission.instructor_test_cells`): they only call ``grade()``, which does
nothing in the sandbox, and nbgrader's autograde replaces them anyway. A test cell the student
edited runs like every other cell, and a notebook without nbgrader's metadata runs whole.

The questions that forbid nothing ride along with a group whose forbidden names the cells do not
use as they run (:func:`autograder.hosts.driver.ban_groups`): 05_blocks' LayerNorm cell ends with
``nn.LayerNorm(8)(x)``, which the LayerNorm exercise's ban stops, so riding with that group sent
the notebook through a third run without the ban."""
from __future__ import annotations

import copy
import json

import nbformat
import pytest

import autograder

from autograder.batch.sources import HIDDEN_TESTS, load_sources
from autograder.batch.submission import instructor_test_cells
from autograder.batch.tasks import questions_by_assignment
from autograder.hosts.child_process import Limits, LocalHost
from autograder.hosts.driver import ban_groups, names_run_at_once, run_submission
from autograder.judging.secret import public_inputs
from autograder.questions.inputs import PublicSource

import grading_students as S

A = "05_blocks"
SOURCE = load_sources(S.REPO / "solutions", questions_by_assignment())[A]


def _raw(nb) -> bytes:
    return nbformat.writes(nb).encode()


def _code_cells(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _test_cell_indices(nb) -> list[int]:
    return [i for i, cell in enumerate(_code_cells(nb))
            if cell.metadata.get("nbgrader", {}).get("grade") and not cell.metadata["nbgrader"].get("solution")]


@pytest.mark.parametrize("which", ["solutions", "exercises"])
def test_every_unchanged_test_cell_is_found_in_the_solution_and_the_release(which):
    nb = S.load(A, which)
    expected = _test_cell_indices(nb)
    assert len(expected) == len([c for c in SOURCE.grade_cells if c.name not in SOURCE.solution_cells
                                 and c.cell_type == "code"])
    assert list(instructor_test_cells(_raw(nb), SOURCE)) == expected


def test_an_edited_test_cell_an_answer_cell_and_a_notebook_without_metadata_are_run():
    nb = S.load(A)
    first = _test_cell_indices(nb)[0]
    edited = copy.deepcopy(nb)
    _code_cells(edited)[first].source += "\nprint('my own check')"
    assert first not in instructor_test_cells(_raw(edited), SOURCE)
    # an answer cell given a test cell's metadata and text is the instructor's code: not run either way;
    # given the metadata alone, it runs
    posing = copy.deepcopy(nb)
    answer = next(i for i, c in enumerate(_code_cells(posing)) if c.metadata.get("nbgrader", {}).get("solution"))
    _code_cells(posing)[answer].metadata["nbgrader"] = dict(_code_cells(nb)[first].metadata["nbgrader"])
    assert answer not in instructor_test_cells(_raw(posing), SOURCE)
    bare = copy.deepcopy(nb)
    for cell in bare.cells:
        cell.metadata.pop("nbgrader", None)
    assert instructor_test_cells(_raw(bare), SOURCE) == ()
    assert instructor_test_cells(_raw(nb), None) == ()
    assert instructor_test_cells(b"{not json", SOURCE) == ()


@pytest.mark.parametrize("odd", [{"grade": True, "solution": False, "grade_id": ["q6_test"]}, ["metadata"], "x",
                                 {"grade": True, "solution": False}])
def test_odd_nbgrader_metadata_runs_the_cell_and_breaks_nothing(odd):
    """A student's notebook file is theirs: a grade id that is a list (unhashable), metadata that is
    not a dict or has no grade id. Such a cell is simply run (it once raised TypeError here, and the
    grader gave the whole submission an error result)."""
    nb = json.loads(_raw(S.load(A)))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = _test_cell_indices(S.load(A))[0]
    cells[first]["metadata"]["nbgrader"] = odd
    found = instructor_test_cells(json.dumps(nb).encode(), SOURCE)
    assert first not in found and set(found) == set(_test_cell_indices(S.load(A))) - {first}


def _run(nb, blank):
    host = LocalHost()
    qids = [q for cell in SOURCE.grade_cells for q in cell.qids]
    try:
        return run_submission(host, _raw(nb), qids, Limits(60), name="05_blocks.ipynb",
                              inputs=lambda run, run_qids: (public_inputs(run_qids), PublicSource()), blank=blank)
    finally:
        host.close()


def test_free_questions_ride_with_a_group_whose_names_the_cells_do_not_use_at_once():
    cells = [cell.source for cell in _code_cells(S.load(A))]
    used = names_run_at_once(cells)
    assert "LayerNorm" in used                   # the demo line nn.LayerNorm(8)(x)
    assert "scaled_dot_product_attention" not in used
    qids = [q.id for q in autograder.questions(A)]
    free = [q for q in qids if not autograder.question(q).forbidden]
    riders = [q for q in qids if q in free or q in ("q7b", "post_ln_block")]
    assert dict(ban_groups(qids, cells))[("attention",)] == riders
    # without the cells, the group that forbids least (LayerNorm's few operators) is the host
    assert set(free) <= set(dict(ban_groups(qids))[("layer_norm",)])
    # names inside a function that nothing at top level calls do not count
    assert "softmax" not in names_run_at_once(["def f(x):\n    return x.softmax(-1)\n"])
    assert "softmax" in names_run_at_once(["def f(x):\n    return x.softmax(-1)\n", "f(1)"])
    assert "softmax" in names_run_at_once(["class A:\n    s = torch.softmax\n"])


@pytest.mark.slow
def test_the_solution_runs_once_per_ban_group_without_its_hidden_tests():
    nb = S.load(A)
    assert any(HIDDEN_TESTS.search(c.source) for c in _code_cells(nb)), "the solution has hidden tests"
    blank = instructor_test_cells(_raw(nb), SOURCE)
    outcome = _run(nb, blank)
    assert [run["ban"] for run in outcome.runs] == [["layer_norm"], ["attention"]], outcome.runs
    assert all("data" in probe for probe in outcome.probes.values()), outcome.probes
    # the errors are the demo lines' under the LayerNorm ban, none in a test cell
    failing = {int(e.split()[1]) - 1 for e in outcome.cell_errors}
    assert failing and not failing & set(blank), outcome.cell_errors
    # run whole, the hidden tests of the LayerNorm test cell meet the ban too
    assert failing < {int(e.split()[1]) - 1 for e in _run(nb, ()).cell_errors}


@pytest.mark.slow
def test_an_answer_fixed_in_the_test_cell_below_it_counts():
    nb = S.load(A)
    fixed = copy.deepcopy(nb)
    cells = _code_cells(fixed)
    q6_test = next(i for i in _test_cell_indices(fixed) if cells[i].metadata["nbgrader"]["grade_id"] == "q6_test")
    cells[q6_test - 1].source = cells[q6_test - 1].source.replace("return x + self.fn(x, **kwargs)",
                                                                  "return self.fn(x, **kwargs)")
    cells[q6_test].source = _code_cells(nb)[q6_test - 1].source + "\n" + cells[q6_test].source
    blank = instructor_test_cells(_raw(fixed), SOURCE)
    assert q6_test not in blank
    honest = _run(nb, instructor_test_cells(_raw(nb), SOURCE))
    outcome = _run(fixed, blank)
    assert json.dumps(outcome.probes["q6"]["data"]["cases"][0]["outputs"]["out"].tolist()) == \
        json.dumps(honest.probes["q6"]["data"]["cases"][0]["outputs"]["out"].tolist())
