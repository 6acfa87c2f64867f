"""Shared pytest fixtures. Keep this file small: fixtures used by several test files only.

torch is imported inside the fixtures, not at the top: under ``make test-fast`` (pytest-xdist)
the controlling process loads this file too and runs no test, so it does not pay torch's
seconds of import before the workers start."""
import pytest


@pytest.fixture(autouse=True)
def _fixed_seed():
    """Every test starts from the same random state, so failures reproduce."""
    import torch
    torch.manual_seed(0)
    yield


@pytest.fixture
def float64():
    """Build modules and tensors in float64 inside the test (for exact comparisons)."""
    import torch
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield torch.float64
    torch.set_default_dtype(previous)


@pytest.fixture
def one_thread():
    """Run the test on one CPU thread (the checks are small; several threads only contend, and a
    result must not depend on how many there are). Modules apply it to every test with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
