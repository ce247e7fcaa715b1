"""Every encoder family against transformers and sentence-transformers on tiny random
checkpoints built offline with transformers' own config classes: embeddings equal `encode`
(cosine >= 0.999999), every head's attention equals eager attention within 1e-4, hidden states
equal output_hidden_states within 1e-5 (at real tokens), sequence classifiers score alike."""

import numpy as np
import pytest
import torch

from headwise.model.importers import load_checkpoint
from headwise.model.sentence import load_encoder_model, load_sentence_model
from tests.fixtures import families as fam


@pytest.fixture(scope="module", params=sorted(fam.EMBEDDERS))
def embedder(request, tmp_path_factory):
    ckpt, st = fam.EMBEDDERS[request.param](tmp_path_factory.mktemp(request.param))
    return request.param, ckpt, st


def test_embeddings_equal_sentence_transformers_encode(embedder):
    family, ckpt, st = embedder
    loaded = load_sentence_model(ckpt)
    assert loaded.family == family
    b = loaded.tokenizer(fam.TEXTS)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).sentence_embedding.numpy()
    theirs = st.encode(fam.TEXTS, batch_size=len(fam.TEXTS))
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() >= 0.999999, cos
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_every_head_and_hidden_state_equals_transformers(embedder):
    _family, ckpt, _ = embedder
    ours, _ = load_checkpoint(ckpt)
    theirs = fam.transformers_reference(ckpt)
    ids, mask = fam.padded_batch(ours.config.vocab_size, ours.config.pad_token_id)
    with torch.no_grad():
        a = ours(ids, mask, need_weights=True, fused=False, output_hidden_states=True)
        b = theirs(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    assert len(a.attentions) == len(b.attentions) == ours.config.n_layers
    for x, y in zip(a.attentions, b.attentions, strict=True):
        assert x.shape == y.shape == (3, ours.config.n_heads, 11, 11)
        torch.testing.assert_close(x, y, atol=1e-4, rtol=0)
    real = mask.bool()
    assert len(a.hidden_states) == len(b.hidden_states) == ours.config.n_layers + 1
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        torch.testing.assert_close(x[real], y[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", sorted(fam.CLASSIFIERS))
@pytest.mark.parametrize("n_labels", [1, 3])
def test_sequence_classifiers_score_like_transformers(tmp_path, family, n_labels):
    ckpt, ref = fam.CLASSIFIERS[family](tmp_path, n_labels)
    loaded = load_encoder_model(ckpt)
    assert (loaded.task, loaded.family, len(loaded.model.head.labels)) == ("classification", family, n_labels)
    texts = [*fam.TEXTS[:3], *fam.PAIRS]
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).logits
        theirs = ref(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    if n_labels == 1:  # a cross-encoder: the same ranking
        assert ours[:, 0].argsort().tolist() == theirs[:, 0].argsort().tolist()


def test_a_modernbert_classifier_with_a_dense_bias_scores_like_transformers(tmp_path):
    ckpt, ref = fam.make_headed(tmp_path / "ce", "modernbert", "ForSequenceClassification",
                                {"num_labels": 2, "classifier_bias": True})
    with torch.no_grad():  # initialised to zero: make it count
        ref.head.dense.bias.normal_(0, 1.0)
    ref.save_pretrained(str(ckpt))
    loaded = load_encoder_model(ckpt)
    b = loaded.tokenizer([*fam.TEXTS[:3], *fam.PAIRS])
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).logits
        theirs = ref(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_a_roberta_task_head_headwise_does_not_know_is_refused(tmp_path):
    from transformers import XLMRobertaConfig, XLMRobertaForMultipleChoice

    from headwise.model.importers import CheckpointError

    fam.bpe_tokenizer(tmp_path, fam.ROBERTA_SPECIALS, fam.ROBERTA_TEMPLATE)
    XLMRobertaForMultipleChoice(XLMRobertaConfig(vocab_size=90, **fam.tiny_sizes(), max_position_embeddings=66)
                          ).save_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"task head \(architectures \['XLMRobertaForMultipleChoice'\]"):
        load_checkpoint(tmp_path)


def test_roberta_reads_no_segment_ids(tmp_path):
    ckpt, _ = fam.make_roberta(tmp_path, "xlm-roberta")
    ours, _ = load_checkpoint(ckpt)
    ids, mask = fam.padded_batch(ours.config.vocab_size, ours.config.pad_token_id)
    with torch.no_grad():
        a = ours(ids, mask, torch.zeros_like(ids)).last_hidden_state
        b = ours(ids, mask, torch.ones_like(ids)).last_hidden_state
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_a_distilbert_task_head_headwise_does_not_know_is_refused(tmp_path):
    from transformers import DistilBertConfig, DistilBertForMultipleChoice

    from headwise.model.importers import CheckpointError

    fam.bpe_tokenizer(tmp_path, fam.BERT_SPECIALS, fam.BERT_TEMPLATE)
    DistilBertForMultipleChoice(DistilBertConfig(vocab_size=90, dim=32, n_heads=4, n_layers=1,
                                           hidden_dim=64)).save_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"DistilBertForMultipleChoice.*headwise would drop.*"
                                              r"DistilBertForSequenceClassification \(cross-encoders"):
        load_checkpoint(tmp_path)
