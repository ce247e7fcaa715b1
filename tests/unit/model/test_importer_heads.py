"""A BERT checkpoint with a task head headwise does not know (a pre-training head: masked LM and
next sentence, or a multiple-choice head, or classifier weights that config.json does not
declare) is refused with a clear error instead of being served as an embedding model without its
head; so is the question-answering head of a family whose importer does not read one (Qwen3's).
BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering and
BertForMaskedLM are imported with their heads (test_classifier_parity.py,
test_token_classifier_parity.py, test_qa_parity.py, test_fill_mask_parity.py)."""

import json

import pytest
import torch

from headwise.model.importers import CheckpointError, load_checkpoint
from tests.fixtures.tiny import make_tiny_bert, tiny_tokenizer


def save(model, path):
    path.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer(path)
    model.eval().save_pretrained(str(path), safe_serialization=True)
    return path


def tiny_config(**kw):
    from transformers import BertConfig

    return BertConfig(vocab_size=60, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                      intermediate_size=64, max_position_embeddings=64, **kw)


@pytest.mark.parametrize("cls,labels", [("BertForPreTraining", None), ("BertForMultipleChoice", None)])
def test_a_task_head_is_refused_naming_it(tmp_path, cls, labels):
    import transformers

    torch.manual_seed(0)
    cfg = tiny_config(**({"num_labels": labels} if labels else {}))
    path = save(getattr(transformers, cls)(cfg), tmp_path / cls)
    with pytest.raises(CheckpointError, match=rf"task head \(architectures \['{cls}'\].*headwise would drop.*"
                                              r"BertForQuestionAnswering \(extractive question answering\)"):
        load_checkpoint(path)


def test_another_familys_question_answering_head_is_refused_naming_it(tmp_path):
    from transformers import Qwen3Config, Qwen3ForQuestionAnswering

    from headwise.export.package import kind_of_checkpoint

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=60, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64)
    path = save(Qwen3ForQuestionAnswering(cfg), tmp_path / "qqa")
    kind = kind_of_checkpoint(path)
    assert kind.task == "question-answering"
    with pytest.raises(CheckpointError, match=r"task head \(\['Qwen3ForQuestionAnswering'\]\) headwise would drop"):
        kind.load(path)


def test_head_weights_are_refused_even_without_architectures(tmp_path):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    path = save(BertForSequenceClassification(tiny_config(num_labels=2)), tmp_path / "ce")
    cfg = json.loads((path / "config.json").read_text())
    del cfg["architectures"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"unused weights: classifier\.bias, classifier\.weight"):
        load_checkpoint(path)


def test_a_bare_encoder_with_its_pooler_still_loads(tmp_path):
    path = make_tiny_bert(tmp_path / "plain")  # BertModel: saves pooler weights too
    _, info = load_checkpoint(path)
    assert info["architecture"] == "encoder"
