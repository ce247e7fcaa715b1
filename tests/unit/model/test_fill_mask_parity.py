"""model/'s masked language model (fill-mask) imported from a tiny random BertForMaskedLM
checkpoint: every real token's logits over the vocabulary equal transformers' within 1e-5 in a
padded batch of texts holding [MASK]; the decoder's weight is the word embeddings' when the
checkpoint has none of its own (save_pretrained writes none: it is tied) and the checkpoint's own
decoder weight and bias where it has them, as transformers reads them; a weight headwise does not
know is refused by name, and the model is no sentence-embedding model."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from headwise.export.package import kind_of_checkpoint
from headwise.model.importers import CheckpointError, load_checkpoint
from headwise.model.sentence import load_encoder_model, load_sentence_model
from tests.fixtures import families as fam
from tests.fixtures.tiny import make_tiny_bert_mlm

TEXTS = ["paris is the [MASK] of france.", "[MASK]", "the quick brown [MASK] jumps over the lazy [MASK]", "",
         "hello world", "[MASK] " + " ".join(["big"] * 80)]


def mlm_logits(loaded, ref, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ours, transformers') logits at the real tokens of `texts` in one padded batch: (N, vocab_size)."""
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).token_logits
        theirs = ref(input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids).logits
    assert ours.shape == theirs.shape == (len(texts), b.input_ids.shape[1], ref.config.vocab_size)
    assert (b.attention_mask == 0).any()  # the batch is padded
    assert (b.input_ids == 4).sum() >= 4  # [MASK] (id 4) read as one token
    real = b.attention_mask.bool()
    return ours[real], theirs[real]


def rewrite_weights(path, change) -> None:
    f = path / "model.safetensors"
    state = load_file(str(f))
    change(state)
    save_file(state, str(f), metadata={"format": "pt"})


def test_bert_mlm_equals_transformers(tmp_path):
    ref = make_tiny_bert_mlm(tmp_path / "mlm")
    saved = load_file(str(tmp_path / "mlm/model.safetensors"))
    assert "cls.predictions.decoder.weight" not in saved  # tied: save_pretrained leaves it out
    assert kind_of_checkpoint(tmp_path / "mlm").task == "fill-mask"
    loaded = load_encoder_model(tmp_path / "mlm")
    assert (loaded.task, loaded.family, loaded.model.head.labels) == ("fill-mask", "bert", ())
    head, emb = loaded.model.head, loaded.model.encoder.embeddings.tokens
    torch.testing.assert_close(head.decoder.weight, emb.weight, atol=0, rtol=0)
    torch.testing.assert_close(head.decoder.bias, ref.cls.predictions.bias, atol=0, rtol=0)
    ours, theirs = mlm_logits(loaded, ref, TEXTS)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_info_has_the_task_and_no_labels(tmp_path):
    make_tiny_bert_mlm(tmp_path / "mlm")
    _, info = load_checkpoint(tmp_path / "mlm")
    assert info == {"family": "bert", "architecture": "encoder", "task": "fill-mask"}


def test_a_decoder_of_its_own_is_read_as_transformers_reads_it(tmp_path):
    """A checkpoint written by torch.save or with untied weights carries the decoder's weight and
    bias: transformers then uses them, not the word embeddings and cls.predictions.bias."""
    from transformers import BertForMaskedLM

    ref = make_tiny_bert_mlm(tmp_path / "mlm")
    v, d = ref.config.vocab_size, ref.config.hidden_size
    torch.manual_seed(1)
    rewrite_weights(tmp_path / "mlm", lambda s: s.update({"cls.predictions.decoder.weight": torch.randn(v, d),
                                                          "cls.predictions.decoder.bias": torch.randn(v)}))
    theirs = BertForMaskedLM.from_pretrained(str(tmp_path / "mlm"), attn_implementation="eager").eval()
    ours, want = mlm_logits(load_encoder_model(tmp_path / "mlm"), theirs, TEXTS[:3])
    torch.testing.assert_close(ours, want, atol=1e-5, rtol=0)
    with torch.no_grad():  # and they differ from the tied model's
        assert not torch.allclose(ours, mlm_logits(load_encoder_model(tmp_path / "mlm"), ref, TEXTS[:3])[1])


def test_untied_without_a_decoder_weight_is_refused(tmp_path):
    make_tiny_bert_mlm(tmp_path / "mlm")
    cfg = json.loads((tmp_path / "mlm/config.json").read_text())
    (tmp_path / "mlm/config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    with pytest.raises(CheckpointError, match=r"missing key 'cls\.predictions\.decoder\.weight'"):
        load_checkpoint(tmp_path / "mlm")


def test_an_unknown_weight_is_refused_by_name(tmp_path):
    ref = make_tiny_bert_mlm(tmp_path / "mlm")
    d = ref.config.hidden_size
    rewrite_weights(tmp_path / "mlm", lambda s: s.update({"cls.crf.transitions": torch.zeros(2, d)}))
    with pytest.raises(CheckpointError, match=r"BertForMaskedLM checkpoint with weights headwise does not know: "
                                              r"cls\.crf\.transitions"):
        load_checkpoint(tmp_path / "mlm")


def test_a_next_sentence_head_kept_from_pre_training_is_unused(tmp_path):
    """bert-base-uncased's checkpoint names BertForMaskedLM and still carries its pre-training's
    next-sentence head and pooler, which transformers' BertForMaskedLM leaves unused."""
    ref = make_tiny_bert_mlm(tmp_path / "mlm")
    d = ref.config.hidden_size
    rewrite_weights(tmp_path / "mlm", lambda s: s.update({
        "cls.seq_relationship.weight": torch.randn(2, d), "cls.seq_relationship.bias": torch.randn(2),
        "bert.pooler.dense.weight": torch.randn(d, d), "bert.pooler.dense.bias": torch.randn(d)}))
    ours, theirs = mlm_logits(load_encoder_model(tmp_path / "mlm"), ref, TEXTS)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_a_masked_lm_is_not_an_embedding_model(tmp_path):
    make_tiny_bert_mlm(tmp_path / "mlm")
    with pytest.raises(CheckpointError, match=r"a fill-mask model .* not a sentence-embedding model; it exports "
                                              r"as a fill-mask package"):
        load_sentence_model(tmp_path / "mlm")


def test_mlm_weights_without_architectures_are_refused(tmp_path):
    make_tiny_bert_mlm(tmp_path / "mlm")
    cfg = json.loads((tmp_path / "mlm/config.json").read_text())
    del cfg["architectures"]
    (tmp_path / "mlm/config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"unused weights: cls\.predictions\.bias, "
                                              r"cls\.predictions\.transform\.LayerNorm\.bias"):
        load_checkpoint(tmp_path / "mlm")


@pytest.mark.parametrize("family", fam.MASKED_LM_FAMILIES)
def test_family_masked_lms_equal_transformers(tmp_path, family):
    """RoBERTa's, XLM-RoBERTa's and MPNet's `lm_head` (GELU whatever the encoder's), DistilBERT's
    `vocab_transform`/`vocab_layer_norm`/`vocab_projector`, ModernBERT's prediction head and
    `decoder`: logits within 1e-5 at every real token, the mask read as one token."""
    ckpt, ref = fam.make_headed(tmp_path / "mlm", family, "ForMaskedLM", {})
    assert kind_of_checkpoint(ckpt).task == "fill-mask"
    loaded = load_encoder_model(ckpt)
    assert (loaded.task, loaded.family) == ("fill-mask", family)
    mask = "[MASK]" if family in ("distilbert", "modernbert") else "<mask>"
    texts = [t.replace("[MASK]", mask) for t in TEXTS]
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        ours = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids).token_logits
        theirs = ref(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    mask_id = loaded.tokenizer([mask]).input_ids[0, 1]  # <s> mask </s>: the mask read as one token
    assert (b.input_ids == mask_id).sum() >= 4
    real = b.attention_mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=0)
