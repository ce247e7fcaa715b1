"""The embedding head's sentence vectors when a request asks for another normalisation than
the graph's: pooled again from the last hidden state as the graph pools (mean, cls, last
token; holes left out), the graph's own vector normalised here where a Dense layer sits between
the pooling and the normalisation, and refused where that vector cannot be given."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headwise.service.engine.heads.embedding import EmbeddingHead
from headwise.service.engine.params import EmbedParams
from headwise.service.engine.work import Entry, Job
from headwise.service.errors import Validation
from headwise.service.package import load_package
from tests.unit.fakes import D_MODEL, make_package


def head(tmp_path, pooling: str, normalize: bool, dense: int = 0) -> EmbeddingHead:
    folder = make_package(tmp_path, normalize=normalize)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(pooling=pooling, dense_layers=dense, embedding_dim=12 if dense else D_MODEL)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return EmbeddingHead(load_package(folder), None)


def answer(h: EmbeddingHead, normalize: bool, holes=()) -> np.ndarray:
    rng = np.random.default_rng(0)
    out = {"last_hidden_state": rng.normal(size=(1, 6, D_MODEL)).astype(np.float32),
           "sentence_embedding": rng.normal(size=(1, 12)).astype(np.float32)}
    entry = Entry(Job(1, params=EmbedParams(normalize=normalize)), 0, np.arange(5), np.zeros(5, np.int64),
                  holes=tuple(holes))
    return out, h.answer(out, 0, entry, None).sentence


def test_last_token_pooling_is_pooled_again_from_the_last_real_position(tmp_path):
    out, got = answer(head(tmp_path, "lasttoken", normalize=True), normalize=False)
    np.testing.assert_array_equal(got, out["last_hidden_state"][0, 4])  # 5 real tokens of 6
    out, got = answer(head(tmp_path / "h", "lasttoken", normalize=True), normalize=False, holes=[4])
    np.testing.assert_array_equal(got, out["last_hidden_state"][0, 3])  # the graph's mask leaves 4 out


def test_behind_a_dense_layer_the_graphs_vector_is_normalised_here(tmp_path):
    out, got = answer(head(tmp_path, "mean", normalize=False, dense=1), normalize=True)
    want = out["sentence_embedding"][0].astype(np.float64)
    np.testing.assert_allclose(got, want / np.linalg.norm(want), rtol=1e-6)


def test_a_normalised_vector_behind_a_dense_layer_cannot_be_served_unnormalised(tmp_path):
    h = head(tmp_path, "mean", normalize=True, dense=1)
    with pytest.raises(Validation, match=r"normalize=false.*Dense layer"):
        h.check(EmbedParams(normalize=False))
    h.check(EmbedParams(normalize=True))
    head(tmp_path / "plain", "mean", normalize=True).check(EmbedParams(normalize=False))  # pooled again: served
