"""Properties of scaled dot-product and multi-head attention, and the masks."""

import pytest
import torch

from headwise.model import MultiHeadAttention, TransformerConfig, attention
from headwise.model.attention import FusedWeightsError
from headwise.model.config import ConfigError
from headwise.model.masks import causal_mask, combine, padding_mask, to_bias
from headwise.model.transformer import Encoder

torch.manual_seed(0)


def test_attention_is_softmax_qk_v():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    out, w = attention(q, k, v)
    expected_w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(out, expected_w @ v)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5))


def test_padded_keys_get_exactly_zero_weight():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    q = k = v = torch.randn(2, 4, 5, 8)
    _, w = attention(q, k, v, to_bias(padding_mask(mask), q.dtype))
    assert torch.all(w[0, :, :, 3:] == 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5))


def test_causal_mask_zero_above_diagonal():
    q = k = v = torch.randn(1, 2, 6, 8)
    _, w = attention(q, k, v, to_bias(causal_mask(6), q.dtype))
    above = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    assert torch.all(w[..., above] == 0.0)
    assert torch.all(w[..., ~above] > 0.0)


def test_causal_mask_with_past_sees_all_past_keys():
    m = causal_mask(2, 5)[0, 0]
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_combine_is_logical_and():
    pad = padding_mask(torch.tensor([[1, 1, 0]]))
    both = combine(causal_mask(3), pad, None)
    assert both.shape == (1, 1, 3, 3)
    assert both[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]


def test_fully_masked_row_is_uniform_not_nan():
    q = k = v = torch.randn(1, 1, 3, 4)
    mask = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    _, w = attention(q, k, v, to_bias(mask, q.dtype))
    assert not torch.isnan(w).any()


def test_multi_head_returns_every_heads_weights():
    mha = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x = torch.randn(2, 5, 16)
    out, w, _ = mha(x, x, x, need_weights=True)
    assert out.shape == (2, 5, 16)
    assert w.shape == (2, 4, 5, 5)


def test_fused_and_explicit_paths_agree():
    mha = MultiHeadAttention(d_model=32, n_heads=4).eval()
    x = torch.randn(3, 9, 32)
    bias = to_bias(combine(padding_mask(torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7])), causal_mask(9)), x.dtype)
    fused, none, _ = mha(x, x, x, bias, need_weights=False, fused=True)
    explicit, w, _ = mha(x, x, x, bias, need_weights=True, fused=False)
    assert none is None
    assert w is not None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)


def test_weights_from_fused_path_raise():
    mha = MultiHeadAttention(d_model=8, n_heads=2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(FusedWeightsError, match="fused"):
        mha(x, x, x, need_weights=True, fused=True)


def test_single_sentence_equals_its_row_in_a_padded_batch():
    cfg = TransformerConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32, dropout=0.0)
    enc = Encoder(cfg).eval()
    ids = torch.randint(1, 50, (1, 4))
    batch = torch.cat([torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], 1), torch.randint(1, 50, (1, 10))])
    mask = torch.tensor([[1] * 4 + [0] * 6, [1] * 10])
    alone = enc(ids, torch.ones(1, 4, dtype=torch.long), need_weights=True)
    batched = enc(batch, mask, need_weights=True)
    torch.testing.assert_close(batched.last_hidden_state[0, :4], alone.last_hidden_state[0], atol=1e-6, rtol=0)
    for a, b in zip(alone.attentions, batched.attentions, strict=True):
        torch.testing.assert_close(b[0, :, :4, :4], a[0], atol=1e-6, rtol=0)
        assert torch.all(b[0, :, :, 4:] == 0.0)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"d_model": 30, "n_heads": 4}, "divisible by n_heads"),
        ({"n_layers": 0}, "n_layers must be a positive int"),
        ({"dropout": 1.5}, "dropout"),
        ({"positional": "alibi"}, "positional"),
        ({"n_heads": 8, "n_kv_heads": 3}, "multiple of n_kv_heads"),
        ({"norm": "batch"}, "unknown norm"),
        ({"d_model": 9, "n_heads": 3}, "even d_model"),
    ],
)
def test_config_rejects_impossible_values(kw, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig(vocab_size=10, **kw)
