"""The parts added since the paper, each against transformers' own: RMSNorm, rotary positions,
grouped-query attention's key/value sharing, the local-attention band, the gated feed-forward."""

import torch

from headwise.model.attention import MultiHeadAttention, repeat_kv
from headwise.model.config import TransformerConfig
from headwise.model.layers import GatedFeedForward
from headwise.model.masks import local_mask
from headwise.model.norms import RMSNorm
from headwise.model.rotary import RotaryEmbedding, apply_rotary


def test_rmsnorm_equals_qwen3s():
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    torch.manual_seed(0)
    ours, theirs = RMSNorm(24, 1e-6), Qwen3RMSNorm(24, 1e-6)
    w = torch.randn(24)
    ours.weight.data.copy_(w)
    theirs.weight.data.copy_(w)
    x = torch.randn(3, 5, 24) * 10
    assert torch.equal(ours(x), theirs(x))


def test_rotary_tables_and_rotation_equal_transformers():
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

    cfg = Qwen3Config(hidden_size=64, num_attention_heads=4, head_dim=16,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}, max_position_embeddings=512)
    positions = torch.arange(512)[None]
    cos_t, sin_t = Qwen3RotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), positions)  # (1, T, Dh)
    cos, sin = RotaryEmbedding(16, 512, 1e6)(positions)  # (1, 1, T, Dh)
    assert torch.equal(cos[:, 0], cos_t) and torch.equal(sin[:, 0], sin_t)
    q, k = torch.randn(2, 4, 512, 16), torch.randn(2, 4, 512, 16)
    q_t, k_t = apply_rotary_pos_emb(q, k, cos_t, sin_t)
    assert torch.equal(apply_rotary(q, cos, sin), q_t) and torch.equal(apply_rotary(k, cos, sin), k_t)


def test_rotary_scores_depend_on_relative_position_only():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, 64, 10000.0)
    q, k = torch.randn(8), torch.randn(8)
    cos, sin = rope(torch.arange(64)[None])

    def score(m, n):
        qm = apply_rotary(q.view(1, 1, 1, 8), cos[:, :, m : m + 1], sin[:, :, m : m + 1])
        kn = apply_rotary(k.view(1, 1, 1, 8), cos[:, :, n : n + 1], sin[:, :, n : n + 1])
        return (qm * kn).sum().item()

    assert abs(score(5, 2) - score(40, 37)) < 1e-5


def test_repeat_kv_equals_transformers_and_groups_consecutive_query_heads():
    from transformers.models.qwen3.modeling_qwen3 import repeat_kv as theirs

    x = torch.randn(2, 3, 5, 4)
    assert torch.equal(repeat_kv(x, 4), theirs(x, 4))
    assert torch.equal(repeat_kv(x, 4)[:, 4:8], x[:, 1:2].expand(2, 4, 5, 4))  # query heads 4..7 share kv head 1


def test_gqa_attention_returns_one_map_per_query_head():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 8, n_kv_heads=2, d_head=8, bias=False, qk_norm=1e-6)
    assert mha.w_k.weight.shape == (16, 32) and mha.w_q.weight.shape == (64, 32)
    x = torch.randn(2, 6, 32)
    out, w, (k, _v) = mha(x, x, x, need_weights=True, fused=False)
    assert out.shape == (2, 6, 32) and w.shape == (2, 8, 6, 6) and k.shape == (2, 2, 6, 8)
    fused, _, _ = mha(x, x, x)
    torch.testing.assert_close(out, fused, atol=1e-5, rtol=0)


def test_local_band():
    band = local_mask(7, window=4)[0, 0]  # |i - j| <= 2
    assert band.sum(1).tolist() == [3, 4, 5, 5, 5, 4, 3]
    assert band[3].tolist() == [False, True, True, True, True, True, False]


def test_gated_feed_forward_is_act_gate_times_up():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=12, gated_ff=True, bias=False, activation="silu")
    ff = GatedFeedForward(cfg).eval()
    x = torch.randn(3, 8)
    want = (torch.nn.functional.silu(x @ ff.w_gate.weight.T) * (x @ ff.w_up.weight.T)) @ ff.w_down.weight.T
    torch.testing.assert_close(ff(x), want, atol=1e-6, rtol=0)
