"""model/'s extractive question answerer imported from tiny random …ForQuestionAnswering
checkpoints (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, MPNet, ModernBERT): config.json's architectures make it a
question-answering checkpoint, and its head (a token classifier with the labels start and end,
from `qa_outputs`) gives transformers' start and end logits within 1e-5 at every real token of
(question, context) pairs in a padded batch; it is not a sentence-embedding model."""

import pytest
import torch

from headwise.export.package import kind_of_checkpoint
from headwise.model.importers import CheckpointError
from headwise.model.sentence import load_encoder_model, load_sentence_model
from tests.fixtures import families as fam
from tests.fixtures.tiny import make_tiny_bert_qa

PAIRS = [("who sat", "the cat sat on the mat"), ("what is quick", "the quick brown fox jumps over the lazy dog"),
         ("", "a"), ("one two three", " ".join(["big"] * 40))]


def batch(loaded):
    """PAIRS as the package's tokenizer encodes them ([CLS] question [SEP] context [SEP], or the
    family's template), padded: (ids, mask, types)."""
    enc = loaded.tokenizer._tok.encode_batch(PAIRS)
    t = max(len(e.ids) for e in enc)
    ids, mask, types = (torch.zeros((len(enc), t), dtype=torch.long) for _ in range(3))
    for i, e in enumerate(enc):
        n = len(e.ids)
        ids[i, :n], mask[i, :n], types[i, :n] = torch.tensor(e.ids), 1, torch.tensor(e.type_ids)
    assert (mask == 0).any()  # the batch is padded
    return ids, mask, types


def check_equal(path, ref, family: str, types: bool) -> None:
    assert kind_of_checkpoint(path).task == "question-answering"
    loaded = load_encoder_model(path)
    assert (loaded.task, loaded.family) == ("question-answering", family)
    assert loaded.model.head.labels == ["start", "end"]
    ids, mask, token_types = batch(loaded)
    with torch.no_grad():
        ours = loaded.model(ids, mask, token_types).token_logits  # (B, T, 2)
        theirs = ref(input_ids=ids, attention_mask=mask, **({"token_type_ids": token_types} if types else {}))
    real = mask.bool()
    torch.testing.assert_close(ours[..., 0][real], theirs.start_logits[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[..., 1][real], theirs.end_logits[real], atol=1e-5, rtol=0)
    with pytest.raises(CheckpointError, match=r"a question-answering model .* not a sentence-embedding model"):
        load_sentence_model(path)


def test_bert_question_answering_equals_transformers(tmp_path):
    check_equal(tmp_path / "qa", make_tiny_bert_qa(tmp_path / "qa"), "bert", types=True)


@pytest.mark.parametrize("family", fam.ANSWERER_FAMILIES)
def test_other_families_question_answering_equals_transformers(tmp_path, family):
    """RobertaForQuestionAnswering (deepset/roberta-base-squad2), XLMRobertaForQuestionAnswering
    and DistilBertForQuestionAnswering (distilbert-base-cased-distilled-squad): their head is
    BERT's `qa_outputs`."""
    path, ref = fam.make_answerer(tmp_path, family)
    check_equal(path, ref, family, types=False)
