"""model/'s extractive question answerer imported from a tiny random BertForQuestionAnswering:
config.json's architectures make it a question-answering checkpoint, and its head (a token
classifier with the labels start and end, from `qa_outputs`) gives transformers' start and end
logits within 1e-5 at every real token of (question, context) pairs in a padded batch; it is
not a sentence-embedding model."""

import pytest
import torch

from headwise.export.package import kind_of_checkpoint
from headwise.model.importers import CheckpointError
from headwise.model.sentence import load_encoder_model, load_sentence_model
from tests.fixtures.tiny import make_tiny_bert_qa

PAIRS = [("who sat", "the cat sat on the mat"), ("what is quick", "the quick brown fox jumps over the lazy dog"),
         ("", "a"), ("one two three", " ".join(["big"] * 40))]


def test_bert_question_answering_equals_transformers(tmp_path):
    ref = make_tiny_bert_qa(tmp_path / "qa")
    assert kind_of_checkpoint(tmp_path / "qa").task == "question-answering"
    loaded = load_encoder_model(tmp_path / "qa")
    assert loaded.task == "question-answering" and loaded.model.head.labels == ["start", "end"]
    enc = loaded.tokenizer._tok.encode_batch(PAIRS)  # [CLS] question [SEP] context [SEP], segments 0 then 1
    t = max(len(e.ids) for e in enc)
    ids, mask, types = (torch.zeros((len(enc), t), dtype=torch.long) for _ in range(3))
    for i, e in enumerate(enc):
        n = len(e.ids)
        ids[i, :n], mask[i, :n], types[i, :n] = torch.tensor(e.ids), 1, torch.tensor(e.type_ids)
    assert (mask == 0).any()  # the batch is padded
    with torch.no_grad():
        ours = loaded.model(ids, mask, types).token_logits  # (B, T, 2)
        theirs = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
    real = mask.bool()
    torch.testing.assert_close(ours[..., 0][real], theirs.start_logits[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[..., 1][real], theirs.end_logits[real], atol=1e-5, rtol=0)
    with pytest.raises(CheckpointError, match=r"a question-answering model .* not a sentence-embedding model"):
        load_sentence_model(tmp_path / "qa")
