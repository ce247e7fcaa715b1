"""model/'s token classifier (NER and PII taggers) imported from tiny random
…ForTokenClassification checkpoints (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, MPNet, ModernBERT): every real
token's logits equal transformers' within 1e-5 in a padded batch, with the labels from
config.json; a pooler the checkpoint carries is unused, a weight headwise does not know is
refused by name, and a family without a token-classification importer is refused naming it."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from headwise.export.package import kind_of_checkpoint
from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.sentence import load_encoder_model, load_sentence_model
from tests.fixtures import families as fam
from tests.fixtures.tiny import TAGGER_LABELS, make_tiny_bert_tagger

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "a", "",
         "attention heads look at tokens, one two three!", " ".join(["big"] * 80)]


def token_logits(loaded, ref, texts: list[str], types: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(ours, transformers') logits at the real tokens of `texts` in one padded batch: (N, n_labels)."""
    b = loaded.tokenizer(texts)
    theirs_in = {"input_ids": b.input_ids, "attention_mask": b.attention_mask}
    if types:
        theirs_in["token_type_ids"] = b.token_type_ids
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).token_logits
        theirs = ref(**theirs_in).logits
    assert ours.shape == theirs.shape == (len(texts), b.input_ids.shape[1], len(loaded.model.head.labels))
    assert (b.attention_mask == 0).any()  # the batch is padded
    real = b.attention_mask.bool()
    return ours[real], theirs[real]


def test_bert_tagger_equals_transformers(tmp_path):
    ref = make_tiny_bert_tagger(tmp_path / "ner")
    assert kind_of_checkpoint(tmp_path / "ner").task == "token-classification"
    loaded = load_encoder_model(tmp_path / "ner")
    assert (loaded.task, loaded.family) == ("token-classification", "bert")
    assert loaded.model.head.labels == list(TAGGER_LABELS.values())
    ours, theirs = token_logits(loaded, ref, TEXTS)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_labels_follow_id2label_order(tmp_path):
    labels = {0: "O", 2: "B-EMAIL", 1: "B-PHONE"}  # written out of order
    make_tiny_bert_tagger(tmp_path / "pii", labels)
    _, info = load_checkpoint(tmp_path / "pii")
    assert info == {"family": "bert", "architecture": "encoder", "task": "token-classification",
                    "labels": ["O", "B-PHONE", "B-EMAIL"]}


def rewrite_weights(path, change) -> None:
    f = path / "model.safetensors"
    state = load_file(str(f))
    change(state)
    save_file(state, str(f), metadata={"format": "pt"})


def test_a_pooler_the_checkpoint_carries_is_unused(tmp_path):
    ref = make_tiny_bert_tagger(tmp_path / "ner")
    d = ref.config.hidden_size
    rewrite_weights(tmp_path / "ner", lambda s: s.update({"bert.pooler.dense.weight": torch.randn(d, d),
                                                         "bert.pooler.dense.bias": torch.randn(d)}))
    ours, theirs = token_logits(load_encoder_model(tmp_path / "ner"), ref, TEXTS[:3])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_an_unknown_weight_is_refused_by_name(tmp_path):
    make_tiny_bert_tagger(tmp_path / "ner")
    rewrite_weights(tmp_path / "ner", lambda s: s.update({"crf.transitions": torch.zeros(5, 5)}))
    with pytest.raises(CheckpointError, match=r"BertForTokenClassification checkpoint with weights headwise "
                                              r"does not know: crf\.transitions"):
        load_checkpoint(tmp_path / "ner")


def test_a_tagger_is_not_an_embedding_model(tmp_path):
    make_tiny_bert_tagger(tmp_path / "ner")
    with pytest.raises(CheckpointError, match=r"a token-classification model .* not a sentence-embedding model; it exports "
                                              r"as a token-classification package"):
        load_sentence_model(tmp_path / "ner")


def test_tagger_weights_without_architectures_are_refused(tmp_path):
    make_tiny_bert_tagger(tmp_path / "ner")
    cfg = json.loads((tmp_path / "ner/config.json").read_text())
    del cfg["architectures"]
    (tmp_path / "ner/config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"unused weights: classifier\.bias, classifier\.weight"):
        load_checkpoint(tmp_path / "ner")


@pytest.mark.parametrize("family", fam.TAGGER_FAMILIES)
def test_family_taggers_equal_transformers(tmp_path, family):
    ckpt, ref = fam.make_tagger(tmp_path, family, TAGGER_LABELS)
    assert kind_of_checkpoint(ckpt).task == "token-classification"
    loaded = load_encoder_model(ckpt)
    assert (loaded.task, loaded.family, loaded.model.head.labels) == (
        "token-classification", family, list(TAGGER_LABELS.values()))
    ours, theirs = token_logits(loaded, ref, TEXTS, types=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_a_family_without_a_tagger_importer_refuses_one_naming_it(tmp_path):
    from transformers import Qwen3Config, Qwen3ForTokenClassification

    fam.bpe_tokenizer(tmp_path, fam.QWEN_SPECIALS, fam.QWEN_TEMPLATE)
    Qwen3ForTokenClassification(Qwen3Config(
        vocab_size=90, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=3)).save_pretrained(str(tmp_path))
    assert kind_of_checkpoint(tmp_path).task == "token-classification"
    with pytest.raises(CheckpointError, match=r"task head \(\['Qwen3ForTokenClassification'\]\) headwise would drop"):
        load_checkpoint(tmp_path)
