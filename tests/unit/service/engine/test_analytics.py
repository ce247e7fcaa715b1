"""engine/aggregate.py and engine/analytics/cosine.py against straightforward numpy references: head mean, rollout
(Abnar & Zuidema 2020) and the exact token-pair split of a mean-pooled cosine."""

import numpy as np
import pytest

from headwise.service.engine.aggregate import head_mean, rollout
from headwise.service.engine.analytics.cosine import pair_contributions, top_pairs
from tests.fixtures.references import reference_rollout

RNG = np.random.default_rng(0)


def softmax_weights(L=3, H=4, T=6) -> np.ndarray:
    x = RNG.normal(size=(L, H, T, T))
    w = np.exp(x - x.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def test_head_mean_is_the_mean_over_heads():
    att = softmax_weights()
    got = head_mean(att)
    assert got.shape == (3, 6, 6)
    np.testing.assert_allclose(got, att.mean(axis=1), atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


def test_rollout_matches_the_reference_and_rows_sum_to_one():
    att = softmax_weights()
    got = rollout(att)
    np.testing.assert_allclose(got, reference_rollout(att.astype(np.float64)), atol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("L,H,T", [(6, 12, 256), (24, 4, 512)])
def test_float32_rollout_stays_within_1e6_of_float64_at_serving_sizes(L, H, T):
    """The rollout is computed in float32: at MiniLM's size and at a large model's, it stays
    within 1e-6 of the float64 reference (the products' rows are convex combinations)."""
    x = RNG.normal(scale=3.0, size=(L, H, T, T)).astype(np.float32)
    att = np.exp(x - x.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    got = rollout(att)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, reference_rollout(att.astype(np.float64)), atol=1e-6)
    np.testing.assert_allclose(head_mean(att), att.astype(np.float64).mean(axis=1), atol=1e-7)


def test_rollout_of_identity_attention_is_identity():
    t = 5
    att = np.broadcast_to(np.eye(t, dtype=np.float32), (2, 3, t, t))
    np.testing.assert_allclose(rollout(att), np.eye(t), atol=1e-6)


@pytest.mark.parametrize("ts,tt", [(1, 1), (4, 7), (12, 3)])
def test_pair_contributions_sum_to_the_cosine_of_the_mean_pooled_embeddings(ts, tt):
    hs, ht = RNG.normal(size=(ts, 16)).astype(np.float32), RNG.normal(size=(tt, 16)).astype(np.float32)
    score, c = pair_contributions(hs, ht)
    u, v = hs.mean(0), ht.mean(0)
    assert c.shape == (ts, tt)
    assert score == pytest.approx(float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)), abs=1e-6)
    assert float(c.sum(dtype=np.float64)) == pytest.approx(score, abs=1e-5)


def test_top_pairs_are_the_largest_contributions():
    c = np.array([[0.1, 0.5], [0.3, -0.2]], np.float32)
    assert top_pairs(c, 2) == [(0, 1, pytest.approx(0.5)), (1, 0, pytest.approx(0.3))]


def test_cosines_are_held_to_minus_one_one():
    """Issue 40, item 7: a vector's cosine with itself came out 1.0000000000000002 (this one
    does, unclamped), which math.acos refuses. Every cosine an answer carries is in [-1, 1]."""
    import math

    from headwise.service.api.compat.vllm import ScoreInputs, cosines
    from headwise.service.engine.analytics.cosine import cosine

    rng = np.random.default_rng(0)
    vs = [rng.normal(size=384).astype(np.float32) for _ in range(4)]
    v = vs[3]
    w = v.astype(np.float64)
    assert float(w @ w / (np.linalg.norm(w) * np.linalg.norm(w))) > 1.0  # the case, unclamped
    assert cosine(v, v) == 1.0 and cosine(v, -v) == -1.0 and math.acos(cosine(v, v)) == 0.0
    assert cosine(v, np.zeros_like(v)) == 0.0
    assert cosines([v, v], ScoreInputs("text_1", "text_2", ["a"], ["a"], (False, False))) == [1.0]
    over = 0
    for seed in range(50):
        h = np.random.default_rng(seed).normal(size=(5, 384)).astype(np.float32)
        u = h.astype(np.float64).mean(0)
        over += float(u @ u / (np.linalg.norm(u) * np.linalg.norm(u))) > 1.0
        assert pair_contributions(h, h)[0] <= 1.0
    assert over  # some of them are over 1 unclamped
