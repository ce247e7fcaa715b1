"""Every kind of package (sentence embedding, classification, decoder, encoder-decoder) comes
out of the one pipeline with the manifest's common fields: the service reads them alike, and
`/v1/models` dates every package by its `created_at`."""

import datetime as dt

import pytest

from headwise.export.manifest import COMMON_FIELDS, read
from headwise.export.package import build_package
from headwise.service.package import REQUIRED, load_package
from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian


@pytest.fixture(scope="module")
def packages(tiny_package, classifier_packages, tmp_path_factory):
    root = tmp_path_factory.mktemp("generative")
    out = {"embedding": tiny_package, "classification": classifier_packages["models"] / "tiny-reranker"}
    for name, make in (("decoder", make_tiny_gpt2), ("encoder-decoder", make_tiny_marian)):
        out[name] = build_package(make(root / "ckpt" / name), root / "models", name, check=False,
                                  progress=lambda m: None)
    return out


def test_the_service_requires_only_common_fields():
    assert set(REQUIRED) <= set(COMMON_FIELDS)


@pytest.mark.parametrize("kind", ["embedding", "classification", "decoder", "encoder-decoder"])
def test_every_kind_has_the_common_fields(packages, kind):
    m = read(packages[kind])
    assert [f for f in COMMON_FIELDS if f not in m] == []
    assert m["task"] == {"decoder": "generation", "encoder-decoder": "generation"}.get(kind, kind)
    assert m["exporter_version"].startswith("headwise ")
    created = dt.datetime.fromisoformat(m["created_at"])
    assert created.tzinfo is not None and abs(dt.datetime.now(dt.timezone.utc) - created) < dt.timedelta(hours=1)
    assert set(m["inputs"]) == set(m["outputs"]) == set(m["variants"])
    assert load_package(packages[kind]).task == m["task"]
