"""Our BERT import against Hugging Face transformers on tiny random models."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from headwise.model.importers import CheckpointError, load_checkpoint
from tests.fixtures.tiny import make_tiny_bert

CONFIGS = [
    {"n_layers": 1, "n_heads": 1, "d_model": 16, "d_ff": 32},
    {"n_layers": 2, "n_heads": 4, "d_model": 32, "d_ff": 48},
    {"n_layers": 3, "n_heads": 2, "d_model": 24, "d_ff": 96},
]


@pytest.mark.parametrize("shape", CONFIGS, ids=lambda c: "L{n_layers}H{n_heads}D{d_model}F{d_ff}".format(**c))
def test_hidden_states_and_every_attention_match_transformers(tmp_path, shape):
    from transformers import BertModel

    ckpt = make_tiny_bert(tmp_path / "ckpt", **shape, seed=sum(shape.values()))
    ours, _ = load_checkpoint(ckpt)
    theirs = BertModel.from_pretrained(str(ckpt), attn_implementation="eager").eval()
    torch.manual_seed(0)
    ids = torch.randint(5, ours.config.vocab_size, (3, 11))
    mask = torch.tensor([[1] * 11, [1] * 6 + [0] * 5, [1] * 2 + [0] * 9])
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    with torch.no_grad():
        a = ours(ids, mask, types, need_weights=True)
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=1e-5, rtol=0)
    assert len(a.attentions) == shape["n_layers"]
    for x, y in zip(a.attentions, b.attentions, strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_importer_names_missing_key(tmp_path):
    ckpt = make_tiny_bert(tmp_path / "c", n_layers=1)
    state = load_file(str(ckpt / "model.safetensors"))
    del state["encoder.layer.0.attention.self.key.weight"]
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.0\.attention\.self\.key\.weight"):
        load_checkpoint(ckpt)


def test_importer_names_shape_mismatch(tmp_path):
    ckpt = make_tiny_bert(tmp_path / "c", n_layers=1)
    state = load_file(str(ckpt / "model.safetensors"))
    state["encoder.layer.0.output.dense.weight"] = torch.zeros(3, 3)
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"shape mismatch.*encoder.layer.0.output.dense.weight"):
        load_checkpoint(ckpt)


def test_importer_refuses_unknown_architecture(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mamba"}')
    with pytest.raises(CheckpointError, match=r"unknown architecture.*mamba"):
        load_checkpoint(tmp_path)
