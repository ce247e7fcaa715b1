"""Shared fixtures: tiny random checkpoints/packages and the real all-MiniLM-L6-v2 package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.tiny import make_tiny_bert

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("ckpt") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_package(tiny_checkpoint, tmp_path_factory) -> Path:
    from headwise.export.package import build_package

    out = tmp_path_factory.mktemp("pkg")
    return build_package(tiny_checkpoint, out, "tiny", progress=lambda m: None, quality=False)


@pytest.fixture(scope="session")
def classifier_packages(tmp_path_factory) -> dict:
    """tests/fixtures/tiny.make_classifier_packages, once per session: a tiny cross-encoder and
    a tiny 3-label classifier exported into one models folder (a few seconds)."""
    from tests.fixtures.tiny import make_classifier_packages

    return make_classifier_packages(tmp_path_factory.mktemp("classifiers"))


@pytest.fixture(scope="session")
def tagger_package(tmp_path_factory) -> dict:
    """tests/fixtures/tiny.make_tagger_package, once per session: a tiny random
    BertForTokenClassification exported as "tiny-tagger"."""
    from tests.fixtures.tiny import make_tagger_package

    return make_tagger_package(tmp_path_factory.mktemp("tagger"))


@pytest.fixture(scope="session")
def qa_package(tmp_path_factory) -> dict:
    """tests/fixtures/tiny.make_qa_package, once per session: a tiny random
    BertForQuestionAnswering exported as "tiny-qa"."""
    from tests.fixtures.tiny import make_qa_package

    return make_qa_package(tmp_path_factory.mktemp("qa"))


@pytest.fixture(scope="session")
def minilm_package(tmp_path_factory) -> Path:
    """The real default package, exported once per test session (about a minute on 2 cores).
    Set HEADWISE_TEST_PACKAGE to reuse an existing one."""
    given = os.environ.get("HEADWISE_TEST_PACKAGE")
    if given:
        return Path(given)
    from headwise.export.package import build_package

    return build_package(None, tmp_path_factory.mktemp("models"), progress=lambda m: None)
