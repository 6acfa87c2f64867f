"""The tests ``pytest autograder --answers PATH`` runs (see autograder/conftest.py)."""
import pytest

from autograder.hosts.child_process import check_file, default_questions
from autograder.student.cells import SubmissionError


def _answers(config):
    path = config.getoption("answers")
    if not path:
        raise pytest.UsageError("pytest autograder needs --answers PATH (a notebook or Python file to check)")
    return path


def pytest_generate_tests(metafunc):
    if "qid" in metafunc.fixturenames:
        path = _answers(metafunc.config)
        qids = metafunc.config.getoption("autograder_questions")
        if not qids:
            try:
                qids = default_questions(path)
            except SubmissionError as error:
                raise pytest.UsageError(str(error))
        metafunc.parametrize("qid", qids)


@pytest.fixture(scope="session")
def submission_results(request):
    path = _answers(request.config)
    qids = request.config.getoption("autograder_questions")
    if not qids:
        qids = default_questions(path)
    results = check_file(path, qids, timeout=request.config.getoption("answers_timeout"))
    return {r.id: r for r in results}


def test_question(qid, submission_results):
    result = submission_results[qid]
    assert result.passed, result.feedback
