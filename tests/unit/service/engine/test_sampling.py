"""Sampling in headwise/service/generation/sampling.py: greedy, seeded determinism, top-k and top-p masks."""

import numpy as np
import pytest

from headwise.service.engine.generation.sampling import (
    SamplingParams,
    distribution,
    make_rng,
    pick,
    suppress,
    top_k_keep,
    top_p_keep,
)

LOGITS = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))


def test_greedy_is_argmax_and_ignores_the_generator():
    assert SamplingParams().greedy and SamplingParams(temperature=0).greedy
    assert pick(LOGITS, SamplingParams(), make_rng(0)) == 1
    assert pick(LOGITS, SamplingParams(top_k=1), None) == 1


def test_a_seed_gives_the_same_tokens_and_another_seed_others():
    params = SamplingParams(temperature=1.0)
    rng = np.random.default_rng(123)
    logits = rng.normal(size=(50, 200)) * 3

    def run(seed):
        g = make_rng(seed)
        return [pick(row, params, g) for row in logits]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_sampling_follows_the_distribution():
    g = make_rng(0)
    draws = np.bincount([pick(LOGITS, SamplingParams(temperature=1.0), g) for _ in range(20000)], minlength=5)
    np.testing.assert_allclose(draws / draws.sum(), np.exp(LOGITS), atol=0.015)


def test_top_k_keeps_exactly_k_largest():
    keep = top_k_keep(LOGITS, 2)
    assert keep.tolist() == [False, True, False, True, False]
    assert top_k_keep(LOGITS, 0).all() and top_k_keep(LOGITS, 99).all()
    assert top_k_keep(np.zeros(4), 2).tolist() == [True, True, False, False]  # ties: lower id
    p = distribution(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    np.testing.assert_allclose(p, [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0], atol=1e-12)


@pytest.mark.parametrize("top_p,kept", [(0.3, [1]), (0.39, [1]), (0.41, [1, 3]), (0.69, [1, 3]),
                                        (0.71, [1, 3, 4]), (0.99, [0, 1, 2, 3, 4]), (1.0, [0, 1, 2, 3, 4])])
def test_top_p_keeps_the_smallest_nucleus_reaching_p(top_p, kept):
    probs = np.exp(LOGITS)
    assert np.flatnonzero(top_p_keep(probs, top_p)).tolist() == kept
    p = distribution(LOGITS, SamplingParams(temperature=1.0, top_p=top_p))
    assert np.flatnonzero(p).tolist() == kept
    assert p.sum() == pytest.approx(1)


def test_sampled_tokens_stay_inside_the_masks():
    g = make_rng(1)
    for params, allowed in ((SamplingParams(1.0, top_k=2), {1, 3}), (SamplingParams(1.0, top_p=0.7), {1, 3}),
                            (SamplingParams(5.0, top_k=3, top_p=0.5), {1, 3})):
        assert {pick(LOGITS, params, g) for _ in range(500)} <= allowed


def test_temperature_sharpens_and_flattens():
    cold = distribution(LOGITS, SamplingParams(temperature=0.1))
    hot = distribution(LOGITS, SamplingParams(temperature=10.0))
    assert cold[1] > 0.9 and hot.max() - hot.min() < 0.1


def test_suppressed_ids_are_never_chosen():
    x = suppress(LOGITS, [1, 3])
    assert pick(x, SamplingParams(), None) == 4
    g = make_rng(2)
    assert not {pick(x, SamplingParams(temperature=2.0), g) for _ in range(300)} & {1, 3}
    assert np.isfinite(LOGITS).all()  # the caller's array is left alone


def test_a_subnormal_temperature_is_greedy_not_nan():
    tiny = SamplingParams(temperature=5e-324)
    assert tiny.greedy and pick(LOGITS, tiny, make_rng(0)) == 1
    assert not SamplingParams(temperature=1e-4).greedy
    assert pick(LOGITS, SamplingParams(temperature=1e-4), make_rng(0)) == 1  # still argmax, and finite
