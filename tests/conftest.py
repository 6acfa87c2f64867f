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
