"""Our Marian import against transformers' MarianMTModel on tiny random checkpoints."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.positional import sinusoidal_table
from tests.fixtures.tiny_generative import make_tiny_marian

CONFIGS = [
    {"n_layers": 1, "n_decoder_layers": 1, "n_heads": 1, "d_model": 16, "activation": "swish"},
    {"n_layers": 2, "n_decoder_layers": 3, "n_heads": 4, "d_model": 32, "activation": "relu"},
    {"n_layers": 3, "n_decoder_layers": 2, "n_heads": 2, "d_model": 24, "activation": "gelu"},
]


def _ids(c):
    return "E{n_layers}D{n_decoder_layers}H{n_heads}M{d_model}-{activation}".format(**c)


@pytest.mark.parametrize("shape", CONFIGS, ids=_ids)
def test_logits_and_all_three_attentions_match_transformers(tmp_path, shape):
    from transformers import MarianMTModel

    ckpt = make_tiny_marian(tmp_path / "ckpt", **shape, seed=len(_ids(shape)))
    ours, info = load_checkpoint(ckpt)
    theirs = MarianMTModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    torch.manual_seed(0)
    v = ours.config.vocab_size
    src = torch.randint(0, v - 1, (3, 11))
    src_mask = torch.tensor([[1] * 11, [1] * 7 + [0] * 4, [1] * 2 + [0] * 9])
    tgt = torch.randint(0, v - 1, (3, 6))
    tgt[:, 0] = info["special_tokens"]["decoder_start"]
    with torch.no_grad():
        enc, dec = ours(src, tgt, src_mask, need_weights=True)
        b = theirs(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, output_attentions=True)
    torch.testing.assert_close(dec.logits, b.logits, atol=1e-5, rtol=0)
    pairs = {"encoder self-attention": (enc.attentions, b.encoder_attentions),
             "decoder self-attention": (dec.attentions, b.decoder_attentions),
             "cross-attention": (dec.cross_attentions, b.cross_attentions)}
    for what, (xs, ys) in pairs.items():
        assert len(xs) == len(ys), what
        for x, y in zip(xs, ys, strict=True):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0, msg=what)
    assert len(dec.cross_attentions) == shape["n_decoder_layers"]
    assert torch.all(dec.cross_attentions[0][1, :, :, 7:] == 0)  # padded source keys


def test_config_and_special_tokens(tmp_path):
    ckpt = make_tiny_marian(tmp_path / "ckpt", n_layers=1, n_decoder_layers=1)
    ours, info = load_checkpoint(ckpt)
    cfg = ours.config
    assert (cfg.norm_first, cfg.positional, cfg.sinusoidal_layout, cfg.scale_embedding) == (
        False, "sinusoidal", "split", True)
    assert cfg.activation == "silu"  # Marian's "swish"
    pad = cfg.vocab_size - 1
    assert info["special_tokens"] == {"bos": None, "eos": 0, "pad": pad, "decoder_start": pad}
    assert info["architecture"] == "encoder-decoder" and info["family"] == "marian"
    # The shared table really is shared: encoder, decoder and output projection.
    assert ours.encoder.embeddings.tokens.weight is ours.decoder.embeddings.tokens.weight
    assert ours.decoder.final_logits_bias.abs().sum() > 0


def test_split_sinusoids_match_transformers_and_paper_layout_is_kept():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    hf = MarianSinusoidalPositionalEmbedding(40, 16)
    torch.testing.assert_close(sinusoidal_table(40, 16, "split"), hf.create_weight(), atol=0, rtol=0)
    paper = sinusoidal_table(40, 16).numpy()
    pos, i = 7, 3
    angle = pos / 10000 ** (2 * i / 16)
    np.testing.assert_allclose(paper[pos, 2 * i : 2 * i + 2], [np.sin(angle), np.cos(angle)], atol=1e-7)


def test_generation_config_bans_are_reported(tmp_path):
    ckpt = make_tiny_marian(tmp_path / "ckpt", n_layers=1, n_decoder_layers=1)
    gen = json.loads((ckpt / "generation_config.json").read_text())
    _, info = load_checkpoint(ckpt)
    assert info["suppress_token_ids"] == [gen["pad_token_id"]] == gen["bad_words_ids"][0]
    gen["bad_words_ids"] = [[gen["pad_token_id"]], [3, 4]]  # a two-token ban is not a suppression
    gen["decoder_start_token_id"] = 5  # generation_config.json wins over config.json
    (ckpt / "generation_config.json").write_text(json.dumps(gen))
    _, info = load_checkpoint(ckpt)
    assert info["suppress_token_ids"] == [gen["pad_token_id"]]
    assert info["special_tokens"]["decoder_start"] == 5


def test_importer_names_missing_key(tmp_path):
    ckpt = make_tiny_marian(tmp_path / "c", n_layers=1, n_decoder_layers=1)
    state = load_file(str(ckpt / "model.safetensors"))
    del state["model.decoder.layers.0.encoder_attn.k_proj.weight"]
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"decoder\.layers\.0\.encoder_attn\.k_proj\.weight"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("field, value", [("decoder_attention_heads", 1), ("decoder_ffn_dim", 8),
                                          ("share_encoder_decoder_embeddings", False)])
def test_importer_refuses_what_model_does_not_implement(tmp_path, field, value):
    ckpt = make_tiny_marian(tmp_path / "c", n_layers=1, n_decoder_layers=1)
    raw = json.loads((ckpt / "config.json").read_text())
    raw[field] = value
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=field):
        load_checkpoint(ckpt)
