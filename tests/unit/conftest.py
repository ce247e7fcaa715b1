"""Shared fixtures of the unit tests (helpers and fakes: tests/unit/fakes.py)."""

import pytest

from tests.unit.fakes import client_for, make_package, wait_ready


@pytest.fixture
def package(tmp_path):
    """The tiny encoder package (real tokenizer, placeholder graphs) for the fake backend."""
    return make_package(tmp_path / "models")


@pytest.fixture
def client(package):
    """A ready TestClient of the app on `package` with the fake backend."""
    with client_for(package) as c:
        wait_ready(c)
        yield c
