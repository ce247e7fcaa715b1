"""attention.aggregate: the head mean and rollout written by attention_payload equal numpy
references computed from the per-head weights (aggregate none) of the same input, and every
budget measure counts the aggregate."""

import base64

import numpy as np
import pytest

from headwise.service.api.sizes import block_bytes
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec
from headwise.service.errors import Validation
from tests.fixtures.references import reference_rollout

L, H, TP, T = 3, 4, 9, 7


@pytest.fixture
def padded():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(L, H, TP, TP))
    x[..., T:] = -np.inf  # padding keys get no weight, as the graph's mask does
    w = np.exp(x - x.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def spec(layers=None, heads=None, **how):
    return AttentionSpec.select(L, H, layers, heads, **how)


@pytest.mark.parametrize("layers, heads", [(None, None), ([2, 0], [3, 1]), ([1], None)])
def test_mean_and_rollout_match_references_from_the_per_head_weights(padded, layers, heads):
    per_head = attention_payload(padded, T, spec(layers, heads))["data"]
    mean = attention_payload(padded, T, spec(layers, heads, aggregate="mean"))
    assert mean["shape"] == [len(layers or range(L)), T, T] and mean["aggregate"] == "mean"
    np.testing.assert_allclose(mean["data"], per_head.astype(np.float64).mean(axis=1), atol=1e-5)
    roll = attention_payload(padded, T, spec(layers, heads, aggregate="rollout"))
    assert roll["shape"] == [T, T]
    # rollout composes the selected layers in model order, whatever order they were listed in
    order = np.argsort(layers) if layers is not None else np.arange(L)
    np.testing.assert_allclose(roll["data"], reference_rollout(per_head[order]), atol=1e-5)
    assert roll["layers"] == sorted(layers or range(L))
    np.testing.assert_allclose(roll["data"].sum(-1), 1.0, atol=1e-5)


def test_aggregates_take_dtype_encoding_and_topk(padded):
    full = attention_payload(padded, T, spec(aggregate="rollout"))["data"]
    p = attention_payload(padded, T, spec(aggregate="rollout", dtype="float16", encoding="base64"))
    got = np.frombuffer(base64.b64decode(p["data"]), "<f2").reshape(p["shape"])
    np.testing.assert_array_equal(got, full.astype(np.float16))
    k = attention_payload(padded, T, spec(aggregate="mean", format="topk", top_k=2))
    assert k["shape"] == [L, T, 2]
    mean = attention_payload(padded, T, spec(aggregate="mean"))["data"]
    np.testing.assert_array_equal(k["data"]["values"], np.sort(mean, -1)[..., ::-1][..., :2])


def test_budget_measures_count_the_aggregate():
    none, mean, roll = (spec(aggregate=a) for a in ("none", "mean", "rollout"))
    assert (none.nbytes(10), mean.nbytes(10), roll.nbytes(10)) == (L * H * 400, L * 400, 400)
    assert block_bytes(roll.block(10)) == 100 * 16
    assert spec([0, 1], [0], aggregate="mean", format="topk", top_k=3).returned_bytes(10) == 2 * 10 * 3 * 8
    assert block_bytes(roll.block(256)) < block_bytes(none.block(256)) // (L * H) + 1


def test_selection_is_still_checked():
    with pytest.raises(Validation):
        spec([L], None, aggregate="rollout")


@pytest.mark.parametrize("aggregate", ["none", "mean", "rollout"])
@pytest.mark.parametrize(("layers", "heads", "what"), [([1, 1], None, "layers"), ([2, 0, 2], [0], "layers"),
                                                       (None, [0, 0], "heads"), ([0], [1, 2, 1], "heads")])
def test_an_index_given_twice_is_refused(layers, heads, what, aggregate):
    """[1, 1] would weigh layer 1 twice in a mean and apply it twice in a rollout."""
    with pytest.raises(Validation, match=rf"^attention\.{what}: each index at most once$"):
        AttentionSpec.select(L, H, layers, heads, aggregate=aggregate)
    assert AttentionSpec.select(L, H, [2, 0], [1, 0], aggregate=aggregate).heads == (1, 0)
