"""Shared pytest fixtures. Keep this file small: fixtures used by several test files only."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _fixed_seed():
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)
    yield


@pytest.fixture
def float64():
    """Build modules and tensors in float64 inside the test (for exact comparisons)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield torch.float64
    torch.set_default_dtype(previous)


@pytest.fixture
def one_thread():
    """Run the test on one CPU thread (the checks are small; several threads only contend, and a
    result must not depend on how many there are). Modules apply it to every test with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
