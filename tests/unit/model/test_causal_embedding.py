"""Qwen3 as a causal embedding model: last-token pooling is right for inputs of different
lengths in one padded batch (batch invariance <= 1e-6), the causal mask is visible in every
head's weights, grouped-query attention gives one map per query head."""

import numpy as np
import pytest
import torch

from headwise.model.sentence import load_sentence_model
from tests.fixtures import families as fam


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return fam.make_qwen3(tmp_path_factory.mktemp("qwen3"))


def embed(loaded, texts, **kw):
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        return loaded.model(b.input_ids, b.attention_mask, **kw), b


def test_last_token_pooling_is_batch_invariant(qwen3):
    loaded = load_sentence_model(qwen3[0])
    assert loaded.model.head.config.mode == "lasttoken"
    batched, b = embed(loaded, fam.TEXTS)
    assert len(set(b.attention_mask.sum(1).tolist())) == len(fam.TEXTS)  # every length differs
    for i, text in enumerate(fam.TEXTS):
        alone, _ = embed(loaded, [text])
        d = (alone.sentence_embedding[0] - batched.sentence_embedding[i]).abs().max().item()
        assert d <= 1e-6, (text, d)


def test_the_embedding_is_the_last_real_tokens_state(qwen3):
    loaded = load_sentence_model(qwen3[0])
    out, b = embed(loaded, fam.TEXTS)
    last = b.attention_mask.sum(1) - 1  # right padding
    states = out.last_hidden_state[torch.arange(len(fam.TEXTS)), last]  # (B, D)
    torch.testing.assert_close(out.sentence_embedding, torch.nn.functional.normalize(states, dim=-1), atol=0, rtol=0)


def test_causal_mask_and_one_map_per_query_head_are_visible(qwen3):
    loaded = load_sentence_model(qwen3[0])
    cfg = loaded.model.config
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.causal) == (4, 2, 16, True)
    out, b = embed(loaded, fam.TEXTS[:2], need_weights=True, fused=False)
    t = b.input_ids.shape[1]
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    for w in out.attentions:
        assert w.shape == (2, 4, t, t)
        assert torch.all(w[..., future] == 0)  # no token sees a later one
        np.testing.assert_allclose(w.sum(-1).numpy(), 1.0, atol=1e-6)
        assert not torch.equal(w[:, 0], w[:, 1])  # heads sharing a key/value head still differ
