"""model/'s sequence classifier (cross-encoders, classifiers) imported from tiny random
BertForSequenceClassification checkpoints: logits equal transformers' within 1e-5, for single
texts and for pairs (segment ids matter), with the labels from config.json."""

import pytest
import torch

from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.sentence import load_sentence_model
from headwise.model.tokenizer import Tokenizer
from tests.fixtures.tiny import make_tiny_bert_classifier as make_classifier

PAIRS = [("what is the capital of france", "paris is the capital of france"),
         ("the cat sat", "a dog barked at the mailman"), ("hello", "hello")]


@pytest.mark.parametrize("n_labels,id2label", [(1, None), (3, {0: "negative", 1: "neutral", 2: "positive"})])
def test_logits_equal_transformers_for_texts_and_pairs(tmp_path, n_labels, id2label):
    ref = make_classifier(tmp_path / "ce", n_labels, id2label)
    model, info = load_checkpoint(tmp_path / "ce")
    assert info["task"] == "classification"
    assert info["labels"] == (["LABEL_0"] if n_labels == 1 else ["negative", "neutral", "positive"])
    tok = Tokenizer(tmp_path / "ce", 64)
    enc = tok._tok.encode_batch(PAIRS)  # pairs: [CLS] a [SEP] b [SEP], segment ids 0 then 1
    n = max(len(e.ids) for e in enc)
    ids = torch.zeros((len(enc), n), dtype=torch.long)
    mask, types = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, e in enumerate(enc):
        k = len(e.ids)
        ids[i, :k], mask[i, :k], types[i, :k] = torch.tensor(e.ids), 1, torch.tensor(e.type_ids)
    assert types.sum() > 0
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        got = model(ids, mask, types).logits
        assert got.shape == (len(PAIRS), n_labels)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        single = tok([a for a, _ in PAIRS])
        torch.testing.assert_close(model(single.input_ids, single.attention_mask, single.token_type_ids).logits,
                                   ref(input_ids=single.input_ids, attention_mask=single.attention_mask,
                                       token_type_ids=single.token_type_ids).logits, atol=1e-5, rtol=0)
        # the segment ids are used: a pair read as one segment scores differently
        assert not torch.allclose(model(ids, mask, torch.zeros_like(types)).logits, got)


def test_export_as_an_embedding_model_is_refused(tmp_path):
    make_classifier(tmp_path / "ce", 1)
    with pytest.raises(CheckpointError, match="not a sentence-embedding model"):
        load_sentence_model(tmp_path / "ce")
