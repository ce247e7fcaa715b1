"""sentence-transformers configurations in both formats: the booleans hub models carry
(`pooling_mode_mean_tokens`) and what sentence-transformers 6.x writes (`"pooling_mode":
"mean"`, no max_seq_length); pooling cls, mean and lasttoken, Dense and Normalize."""

import json

import numpy as np
import pytest
import torch

from headwise.model.pooling import PoolingConfig, PoolingConfigError, last_token_index
from headwise.model.sentence import load_sentence_model
from tests.fixtures.families import TEXTS, make_st_bert

POOLING = "sentence_transformers.models.Pooling"


def write_modules(path, pooling: dict, extra=()):
    (path / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (path / "1_Pooling/config.json").write_text(json.dumps(pooling))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING}, *extra]
    (path / "modules.json").write_text(json.dumps(modules))


@pytest.mark.parametrize(("config", "mode"), [
    ({"pooling_mode_mean_tokens": True}, "mean"),
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
    ({"pooling_mode_lasttoken": True}, "lasttoken"),
    ({"pooling_mode": "mean", "include_prompt": True}, "mean"),
    ({"pooling_mode": "cls"}, "cls"),
    ({"pooling_mode": "lasttoken"}, "lasttoken"),
    ({"pooling_mode": ["cls"]}, "cls"),
])
def test_both_formats_name_the_mode(tmp_path, config, mode):
    write_modules(tmp_path, config)
    assert PoolingConfig.from_checkpoint(tmp_path).mode == mode


@pytest.mark.parametrize("config", [{"pooling_mode": "max"}, {"pooling_mode_weightedmean_tokens": True},
                                    {"pooling_mode": ["cls", "mean"]}, {}])
def test_a_mode_headwise_does_not_implement_is_refused_by_name(tmp_path, config):
    write_modules(tmp_path, config)
    with pytest.raises(PoolingConfigError, match="unsupported pooling mode"):
        PoolingConfig.from_checkpoint(tmp_path)


def test_an_unknown_module_is_refused_not_skipped(tmp_path):
    write_modules(tmp_path, {"pooling_mode": "mean"},
                  [{"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}])
    with pytest.raises(PoolingConfigError, match=r"2_LayerNorm.*Transformer, Pooling, Dense and Normalize"):
        PoolingConfig.from_checkpoint(tmp_path)


def test_last_token_index_reads_either_padding_side():
    right = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert last_token_index(right).tolist() == [2, 0, 3]
    assert last_token_index(right.flip(1)).tolist() == [3, 3, 3]


@pytest.mark.parametrize(("pooling", "dense"), [("mean", None), ("cls", None), ("lasttoken", None), ("cls", 16),
                                                ("mean", 24)])
def test_a_bert_saved_by_todays_sentence_transformers_equals_encode(tmp_path, pooling, dense):
    ckpt, st = make_st_bert(tmp_path, pooling=pooling, dense=dense)
    saved = json.loads((ckpt / "1_Pooling/config.json").read_text())
    assert saved["pooling_mode"] == pooling and "pooling_mode_mean_tokens" not in saved
    assert "max_seq_length" not in json.loads((ckpt / "sentence_bert_config.json").read_text())
    loaded = load_sentence_model(ckpt)
    assert loaded.max_len == st.max_seq_length == 64
    b = loaded.tokenizer(TEXTS)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).sentence_embedding.numpy()
    theirs = st.encode(TEXTS, batch_size=len(TEXTS))
    assert ours.shape == theirs.shape == (len(TEXTS), dense or 32)
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() >= 0.999999
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
