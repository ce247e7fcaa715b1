"""Our GPT-2 import against transformers' GPT2LMHeadModel on tiny random checkpoints."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.importers.gpt2 import position_ids
from tests.fixtures.tiny_generative import make_tiny_gpt2

CONFIGS = [
    {"n_layers": 1, "n_heads": 1, "d_model": 16},
    {"n_layers": 2, "n_heads": 4, "d_model": 32},
    {"n_layers": 3, "n_heads": 2, "d_model": 24},
]


def _pair(path, **shape):
    from transformers import GPT2LMHeadModel

    ckpt = make_tiny_gpt2(path, **shape)
    ours, info = load_checkpoint(ckpt)
    theirs = GPT2LMHeadModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    return ours, theirs, info


def _assert_same(ours, theirs, ids, mask=None, pos=None):
    with torch.no_grad():
        a = ours(ids, mask, need_weights=True, position_ids=pos)
        b = theirs(input_ids=ids, attention_mask=mask, position_ids=pos, output_attentions=True)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    assert len(a.attentions) == len(b.attentions) == ours.config.n_layers
    for x, y in zip(a.attentions, b.attentions, strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", CONFIGS, ids=lambda c: "L{n_layers}H{n_heads}D{d_model}".format(**c))
def test_logits_and_every_attention_match_transformers(tmp_path, shape):
    ours, theirs, _ = _pair(tmp_path / "ckpt", **shape, seed=sum(shape.values()))
    torch.manual_seed(0)
    _assert_same(ours, theirs, torch.randint(0, ours.config.vocab_size, (2, 13)))


@pytest.mark.parametrize("shape", CONFIGS[1:], ids=lambda c: "L{n_layers}H{n_heads}D{d_model}".format(**c))
def test_left_padding_with_attention_mask_matches_transformers(tmp_path, shape):
    """Every position, padding rows included: a padding query sees no real key, so its row
    is uniform over all keys in both implementations (no NaN)."""
    ours, theirs, _ = _pair(tmp_path / "ckpt", **shape, seed=7)
    torch.manual_seed(1)
    ids = torch.randint(0, ours.config.vocab_size, (3, 10))
    mask = torch.tensor([[1] * 10, [0] * 4 + [1] * 6, [0] * 9 + [1]])
    _assert_same(ours, theirs, ids, mask, position_ids(mask))
    # Padding keys get exactly zero weight from every real query.
    with torch.no_grad():
        a = ours(ids, mask, need_weights=True, position_ids=position_ids(mask))
    for w in a.attentions:
        assert torch.all(w[1, :, 4:, :4] == 0)
        assert torch.all(torch.triu(w[0], diagonal=1) == 0)


def test_left_padded_prompt_gives_the_unpadded_logits(tmp_path):
    """Positions count real tokens, so padding a prompt on the left changes nothing."""
    ours, _, _ = _pair(tmp_path / "ckpt", seed=3)
    ids = torch.tensor([[5, 9, 44, 2, 17]])
    padded = torch.cat([torch.full((1, 3), ours.config.pad_token_id), ids], 1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        plain = ours(ids).logits
        left = ours(padded, mask, position_ids=position_ids(mask)).logits
    torch.testing.assert_close(left[:, 3:], plain, atol=1e-5, rtol=0)


def test_position_ids_match_transformers_generate():
    from transformers import GPT2Config, GPT2LMHeadModel

    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10))
    want = model._prepare_position_ids_for_generation(mask, {"attention_mask": mask})
    assert torch.equal(position_ids(mask), want)
    assert position_ids(mask)[0].tolist() == [0, 0, 0, 1, 2]


def test_special_tokens_come_from_the_config(tmp_path):
    _, _, info = _pair(tmp_path / "ckpt", n_layers=1)
    assert info["family"] == "gpt2" and info["architecture"] == "decoder"
    assert info["special_tokens"] == {"bos": 299, "eos": 299, "pad": 299, "decoder_start": None}


def test_importer_names_missing_key(tmp_path):
    ckpt = make_tiny_gpt2(tmp_path / "c", n_layers=1)
    state = load_file(str(ckpt / "model.safetensors"))
    del state["transformer.h.0.attn.c_attn.weight"]
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"h\.0\.attn\.c_attn\.weight"):
        load_checkpoint(ckpt)


def test_importer_names_conv1d_shape_mismatch(tmp_path):
    ckpt = make_tiny_gpt2(tmp_path / "c", n_layers=1)
    state = load_file(str(ckpt / "model.safetensors"))
    state["transformer.h.0.mlp.c_fc.weight"] = torch.zeros(3, 3)
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"shape mismatch.*h\.0\.mlp\.c_fc\.weight"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("field, value", [("scale_attn_by_inverse_layer_idx", True),
                                          ("tie_word_embeddings", False),
                                          ("activation_function", "mish")])
def test_importer_refuses_what_model_does_not_implement(tmp_path, field, value):
    ckpt = make_tiny_gpt2(tmp_path / "c", n_layers=1)
    raw = json.loads((ckpt / "config.json").read_text())
    raw[field] = value
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=field):
        load_checkpoint(ckpt)
