"""Shared fixtures of the unit tests (helpers and fakes: tests/unit/fakes.py)."""

import pytest

from tests.unit.fakes import make_package


@pytest.fixture
def package(tmp_path):
    """The tiny encoder package (real tokenizer, placeholder graphs) for the fake backend."""
    return make_package(tmp_path / "models")
