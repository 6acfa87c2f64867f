"""pytest plugin for checking a submission: ``pytest autograder --answers PATH [--question QID ...]``.

One test per question: the submission runs once in a child process (as in
``python -m autograder check``), each test asserts its question passed and fails with the
checker's feedback otherwise.
"""


def pytest_addoption(parser):
    group = parser.getgroup("autograder")
    group.addoption("--answers", action="store", default=None, metavar="PATH",
                    help="notebook (.ipynb) or Python file whose answers the autograder tests check")
    group.addoption("--question", action="append", default=None, metavar="QID", dest="autograder_questions",
                    help="question id to check (repeatable); default: the file's assignment")
    group.addoption("--answers-timeout", action="store", type=float, default=60.0,
                    help="seconds allowed for running the answers file (default 60)")
