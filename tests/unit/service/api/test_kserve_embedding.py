"""KServe v2 for an embedding package whose sentence-transformers Dense layers change the
vector's size (embedding_dim ≠ d_model): the metadata declares the vector it answers, and the
answer's bound counts that vector's cells, not d_model's."""

from __future__ import annotations

from types import SimpleNamespace

from headwise.service.api.routers.kserve import _response_bound, outputs_of


def dense_model():
    package = SimpleNamespace(d_model=32, embedding_dim=48, n_layers=2, n_heads=2)
    return SimpleNamespace(package=package, capabilities=frozenset())


def test_metadata_declares_the_vector_after_the_dense_layers():
    shapes = {o["name"]: o["shape"] for o in outputs_of(dense_model())}
    assert shapes["sentence_embedding"] == [-1, 48]
    assert shapes["last_hidden_state"] == [-1, -1, 32]


def test_the_bound_counts_the_vectors_cells():
    rt = dense_model()
    assert _response_bound(rt, {"sentence_embedding": True}, [5, 3], None, None) == 2 * 48 * 8
    assert _response_bound(rt, {"sentence_embedding": False}, [5, 3], None, None) == 2 * 48 * 16
