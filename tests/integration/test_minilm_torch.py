"""Our model/ on the real all-MiniLM-L6-v2 against sentence-transformers and transformers."""

import numpy as np
import pytest
import torch

from headwise.export.stsb import find_stsb, load_pairs, sts_score
from headwise.model.sentence import default_checkpoint, load_sentence_model
from tests.integration.sentences import SENTENCES


@pytest.fixture(scope="module")
def ours():
    return load_sentence_model()


def test_sentence_embeddings_match_sentence_transformers(ours):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    assert len(SENTENCES) >= 50
    want = st.encode(SENTENCES, batch_size=16, convert_to_numpy=True)
    b = ours.tokenizer(SENTENCES)
    assert b.input_ids.shape[1] == ours.max_len == 256  # the long ones are truncated
    with torch.no_grad():
        got = ours.model(b.input_ids, b.attention_mask, b.token_type_ids).sentence_embedding.numpy()
    assert np.abs(got - want).max() < 1e-5


def test_every_layer_attention_matches_transformers_eager(ours):
    """Every real query row, all 50 sentences in one padded batch. Rows of padding queries
    carry no meaning (nothing reads them) and are left out; padded keys are exactly 0."""
    from transformers import BertModel

    hf = BertModel.from_pretrained(str(default_checkpoint()), attn_implementation="eager").eval()
    b = ours.tokenizer(SENTENCES)
    with torch.no_grad():
        a = ours.model(b.input_ids, b.attention_mask, b.token_type_ids, need_weights=True)
        h = hf(input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids,
               output_attentions=True)
    real = b.attention_mask.bool()
    assert len(a.attentions) == 6
    for x, y in zip(a.attentions, h.attentions, strict=True):
        assert x.shape == y.shape
        rows = real[:, None, :, None].expand_as(x)
        assert (x - y).abs()[rows].max() < 1e-5
        keys = (~real)[:, None, None, :].expand_as(x)
        assert torch.all(x[keys] == 0) and torch.all(y[keys] == 0)


def test_stsb_dev_spearman(ours):
    path = find_stsb()
    assert path is not None, "STS Benchmark dev file not found (headwise/export/data/stsb/sts-dev.csv)"
    a, b, gold = load_pairs(path)
    assert len(gold) == 1500

    def embed(texts):
        out = []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        emb = np.empty((len(texts), 384), np.float32)
        for s in range(0, len(order), 64):
            idx = order[s : s + 64]
            bt = ours.tokenizer([texts[i] for i in idx])
            with torch.no_grad():
                emb[idx] = ours.model(bt.input_ids, bt.attention_mask, bt.token_type_ids).sentence_embedding.numpy()
        return emb if not out else None

    score = sts_score(embed(a), embed(b), gold)
    assert abs(score - 86.72) <= 0.01, score
