"""model/'s sparse encoder (SPLADE) loaded from tiny random checkpoints that sentence-transformers
saved as SparseEncoders: each text's weights over the vocabulary equal SparseEncoder.encode's
within 1e-5, in a padded batch, for max and sum pooling and both activations, and for every
family whose masked LM headwise imports; splade_pool is the
paper's formula; a masked LM without SpladePooling stays a fill-mask model, and what headwise
cannot reproduce (another module, a default prompt, max_active_dims, an unknown pooling) is
refused by name."""

import json

import pytest
import torch

from headwise.export.package import KINDS, kind_of_checkpoint
from headwise.model.importers import CheckpointError
from headwise.model.sentence import SPARSE, load_encoder_model, load_sentence_model
from headwise.model.splade import SpladeConfig, SpladeHead, splade_pool
from tests.fixtures import families as fam
from tests.fixtures.tiny import make_tiny_bert_mlm, make_tiny_splade

TEXTS = ["the cat sat on the mat", "a dog", "", "hello world " * 40, "paris is the capital of france."]


@pytest.fixture(scope="module", params=[("max", "relu"), ("sum", "relu"), ("max", "log1p_relu")],
                ids=lambda p: "-".join(p))
def splade(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("splade") / "ckpt"
    return path, make_tiny_splade(path, *request.param), request.param


def test_weights_equal_sparse_encoder_in_a_padded_batch(splade):
    path, ref, (strategy, activation) = splade
    loaded = load_encoder_model(path)
    assert loaded.task == SPARSE and isinstance(loaded.model.head, SpladeHead)
    assert loaded.model.head.config == SpladeConfig(strategy, activation)
    b = loaded.tokenizer(TEXTS)
    assert (b.attention_mask == 0).any()  # the batch is padded
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).sentence_embedding
    theirs = ref.encode(TEXTS, convert_to_tensor=True).to_dense()
    assert ours.shape == theirs.shape == (len(TEXTS), loaded.model.head.dim)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert ((ours > 0) == (theirs > 0)).all()  # the same entries are non-zero
    assert loaded.max_len == ref.max_seq_length


def test_splade_pool_is_the_papers_formula():
    g = torch.Generator().manual_seed(0)
    logits, mask = torch.randn(2, 5, 7, generator=g), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    w = torch.log1p(torch.relu(logits))
    want_max = torch.stack([w[0, :3].amax(0), w[1].amax(0)])
    torch.testing.assert_close(splade_pool(logits, mask), want_max)
    torch.testing.assert_close(splade_pool(logits, mask, "sum"), torch.stack([w[0, :3].sum(0), w[1].sum(0)]))
    torch.testing.assert_close(splade_pool(logits, mask, "max", "log1p_relu"), torch.log1p(want_max))
    assert (splade_pool(logits, mask) >= 0).all()


def test_a_masked_lm_without_splade_pooling_stays_a_fill_mask_model(tmp_path):
    make_tiny_bert_mlm(tmp_path)
    assert SpladeConfig.from_checkpoint(tmp_path) is None
    assert load_encoder_model(tmp_path).task == "fill-mask"
    assert kind_of_checkpoint(tmp_path) is KINDS["fill-mask"]


def test_a_sparse_encoder_exports_as_one_and_is_no_sentence_model(splade):
    path, *_ = splade
    assert kind_of_checkpoint(path) is KINDS[SPARSE]
    with pytest.raises(CheckpointError, match="sparse-embedding model"):
        load_sentence_model(path)


def edit(path, file: str, change) -> None:
    f = path / file
    data = json.loads(f.read_text()) if f.is_file() else {}
    change(data)
    f.write_text(json.dumps(data))


@pytest.mark.parametrize("file,change,named", [
    ("modules.json", lambda m: m.append({"idx": 2, "name": "2", "path": "", "type": "x.SparseStaticEmbedding"}),
     "SparseStaticEmbedding"),
    ("config_sentence_transformers.json", lambda c: c.update(default_prompt_name="query"), "default_prompt_name"),
    ("config_sentence_transformers.json", lambda c: c.update(max_active_dims=64), "max_active_dims"),
    ("1_SpladePooling/config.json", lambda c: c.update(pooling_strategy="mean"), "pooling_strategy 'mean'"),
])
def test_what_headwise_cannot_reproduce_is_refused_by_name(tmp_path, file, change, named):
    path = tmp_path / "ckpt"
    make_tiny_splade(path)
    edit(path, file, change)
    with pytest.raises(CheckpointError, match=named):
        load_encoder_model(path)
    with pytest.raises(CheckpointError, match=named):
        kind_of_checkpoint(path)


@pytest.mark.parametrize("family", fam.MASKED_LM_FAMILIES)
def test_family_sparse_encoders_equal_sparse_encoder(tmp_path, family):
    """Every family whose masked LM headwise imports is a sparse encoder too: the same head,
    pooled (RoBERTa's and MPNet's `lm_head`, DistilBERT's `vocab_projector`, ModernBERT's)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    raw, _ = fam.make_headed(tmp_path / "mlm", family, "ForMaskedLM", {})
    ref = SparseEncoder(modules=[MLMTransformer(str(raw)), SpladePooling("max")], device="cpu").eval()
    ref.save(str(tmp_path / "splade"))
    loaded = load_encoder_model(tmp_path / "splade")
    assert loaded.task == SPARSE
    texts = ["the cat sat on the mat", "a dog", "hello world " * 10]
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).sentence_embedding
    torch.testing.assert_close(ours, ref.encode(texts, convert_to_tensor=True).to_dense(), atol=1e-5, rtol=1e-5)
