"""Shapes and masking of Decoder (decoder-only) and EncoderDecoder."""

import torch

from headwise.model import Decoder, EncoderDecoder, TransformerConfig

CFG = TransformerConfig(vocab_size=40, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=32, dropout=0.0)


def test_decoder_only_shapes_and_causality():
    torch.manual_seed(0)
    dec = Decoder(CFG, cross_attention=False).eval()
    ids = torch.randint(0, 40, (2, 7))
    out = dec(ids, need_weights=True)
    assert out.logits.shape == (2, 7, 40)
    assert out.cross_attentions is None
    assert len(out.attentions) == 2
    for w in out.attentions:
        assert w.shape == (2, 4, 7, 7)
        assert torch.all(torch.triu(w, diagonal=1) == 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 7))
    # A later token never changes an earlier position's output.
    longer = dec(torch.cat([ids, torch.randint(0, 40, (2, 3))], 1))
    torch.testing.assert_close(longer.logits[:, :7], out.logits, atol=1e-5, rtol=0)


def test_decoder_kv_cache_matches_recompute():
    torch.manual_seed(1)
    dec = Decoder(CFG).eval()
    ids = torch.randint(0, 40, (1, 6))
    full = dec(ids)
    step = dec(ids[:, :4])
    nxt = dec(ids[:, 4:], past=step.present)
    torch.testing.assert_close(nxt.logits, full.logits[:, 4:], atol=1e-5, rtol=0)


def test_encoder_decoder_cross_attention_shapes_and_source_padding():
    torch.manual_seed(2)
    model = EncoderDecoder(CFG).eval()
    src = torch.randint(1, 40, (2, 9))
    src_mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    tgt = torch.randint(1, 40, (2, 6))
    enc, dec = model(src, tgt, src_mask, need_weights=True)
    assert enc.last_hidden_state.shape == (2, 9, 16)
    assert dec.logits.shape == (2, 6, 40)
    for self_w, cross_w in zip(dec.attentions, dec.cross_attentions, strict=True):
        assert self_w.shape == (2, 4, 6, 6)
        assert cross_w.shape == (2, 4, 6, 9)  # (B, H, T_tgt, T_src)
        assert torch.all(torch.triu(self_w, diagonal=1) == 0)
        assert torch.all(cross_w[1, :, :, 5:] == 0)
        torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, 4, 6))
    assert enc.attentions[0].shape == (2, 4, 9, 9)


def test_pre_ln_sinusoidal_stack_runs():
    cfg = TransformerConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16,
                            norm_first=True, final_layer_norm=True, positional="sinusoidal")
    out = Decoder(cfg).eval()(torch.randint(0, 40, (1, 5)))
    assert out.logits.shape == (1, 5, 40)
    assert torch.isfinite(out.logits).all()
