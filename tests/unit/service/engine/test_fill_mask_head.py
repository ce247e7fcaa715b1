"""The fill-mask head's choice equals transformers' fill-mask pipeline (its `postprocess`, on the
same logits and the same tokenizer): the same tokens in the same order, their scores, token
strings and sequences, with one mask and with several, with and without targets; targets are
read as its `get_target_ids` reads them; an input without a mask is refused alone; the answer's
bound covers what is written, also where the model has more rows than the tokenizer has tokens."""

from types import SimpleNamespace

import numpy as np
import orjson
import pytest
import torch

from headwise.service.engine.heads.masked import FillParams, MaskHead, target_ids
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.engine.work import Entry, Job
from headwise.service.errors import Validation
from headwise.service.package import PackageError
from tests.fixtures.tiny import tiny_tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(TextTokenizer, transformers' tokenizer, MaskHead) over the tiny WordPiece vocabulary, its
    special tokens added as a BERT checkpoint's tokenizer.json has them (so "[MASK]" in a text
    is the mask token)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("fill")
    tiny_tokenizer(path)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.add_special_tokens(SPECIALS)
    tok.save(str(path / "tokenizer.json"))
    hf = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), pad_token="[PAD]", unk_token="[UNK]",
                                 cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    ours = TextTokenizer(path / "tokenizer.json", 64)
    package = SimpleNamespace(manifest={"mask_token": "[MASK]", "vocab_size": len(hf)}, path=path, pad_id=0)
    return ours, hf, MaskHead(package, ours)


def pipeline(hf):
    from transformers import BertConfig, BertForMaskedLM, FillMaskPipeline

    model = BertForMaskedLM(BertConfig(vocab_size=len(hf), hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                       intermediate_size=16))
    return FillMaskPipeline(model=model, tokenizer=hf)


def fills(head, tok, text, params, logits):
    [enc] = tok.encode_unchecked([text])
    job = Job(1, inputs=[text], params=params)
    return head.answer({"token_logits": logits[None, : enc.length]}, 0, Entry(job, 0, enc.ids, enc.type_ids, enc),
                       None), enc


@pytest.mark.parametrize("text", ["the cat sat on the [MASK].", "[MASK] cat sat on the [MASK] mat!"])
@pytest.mark.parametrize("top_k,targets", [(1, None), (5, None), (3, ["cat", "mat", "dog", "zebra"]), (9, ["on"])])
def test_fills_equal_the_pipeline(tokenizers, text, top_k, targets):
    tok, hf, head = tokenizers
    pipe = pipeline(hf)
    rng = np.random.default_rng(top_k)
    logits = (rng.normal(size=(32, len(hf))) * 3).astype(np.float32)
    ids = target_ids(tok, targets) if targets is not None else None
    got, enc = fills(head, tok, text, FillParams(top_k=top_k, targets=ids), logits)
    theirs_ids = pipe.get_target_ids(targets) if targets is not None else None
    assert ids is None or sorted(ids) == sorted(theirs_ids.tolist())
    input_ids = torch.tensor(hf(text)["input_ids"])[None]
    assert input_ids[0].tolist() == enc.ids.tolist()
    want = pipe.postprocess({"input_ids": input_ids, "logits": torch.from_numpy(logits[None, : enc.length])},
                            top_k=top_k, target_ids=np.array(ids) if ids is not None else None)
    want = [want] if isinstance(want[0], dict) else want  # one mask: a list of fills, not a list of lists
    assert got.masks == [i for i, x in enumerate(enc.ids.tolist()) if x == head.mask_id]
    assert len(got.fills) == len(want)
    for ours, theirs in zip(got.fills, want, strict=True):
        assert [(f.token, f.token_str, f.sequence) for f in ours] == [
            (t["token"], t["token_str"], t["sequence"]) for t in theirs]
        np.testing.assert_allclose([f.score for f in ours], [t["score"] for t in theirs], rtol=1e-5)


def test_an_input_without_a_mask_is_refused(tokenizers):
    tok, _, head = tokenizers
    encs = tok.encode_unchecked(["the [MASK] sat", "no mask here"])
    with pytest.raises(Validation, match=r"\[1\] has no mask token '\[MASK\]'"):
        head.answer_size(FillParams(), encs)


def test_targets_are_read_once_and_those_that_encode_to_nothing_are_refused(tokenizers):
    tok, _, _ = tokenizers
    cat = tok.untruncated.token_to_id("cat")
    assert cat is not None and target_ids(tok, ["cat", "cat", "catzz"]) == (cat,)  # "catzz": its first piece
    with pytest.raises(Validation, match="targets"):
        target_ids(tok, ["", " "])


def test_the_bound_covers_the_answer(tokenizers):
    from headwise.service.api.sizes import JSON

    tok, hf, head = tokenizers
    text = "[MASK] cat sat on the [MASK] mat, " + "the cat " * 10
    params = FillParams(top_k=7)
    [enc] = tok.encode_unchecked([text])
    got, _ = fills(head, tok, text, params, np.random.default_rng(0).normal(size=(64, len(hf) + 9)).astype(np.float32))

    written = orjson.dumps([[{"score": f.score, "token": f.token, "token_str": f.token_str, "sequence": f.sequence}
                             for f in row] for row in got.fills])
    assert JSON.bytes(head.answer_size(params, [enc])) >= len(written)


def test_a_package_without_its_mask_token_is_refused(tokenizers, tmp_path):
    tok, _, _ = tokenizers
    for manifest in ({}, {"mask_token": "<mask>"}, {"mask_token": 3}):
        with pytest.raises(PackageError, match="mask_token"):
            MaskHead(SimpleNamespace(manifest=manifest, path=tmp_path, pad_id=0), tok)


def test_a_target_past_the_models_vocabulary_is_refused(tokenizers, tmp_path):
    """A token the tokenizer has and the model has no row for (an added token) is refused, not
    read past the logits."""
    tok, _, _ = tokenizers
    head = MaskHead(SimpleNamespace(manifest={"mask_token": "[MASK]", "vocab_size": 20}, path=tmp_path, pad_id=0),
                    tok)
    encs = tok.encode_unchecked(["the [MASK] sat"])
    head.answer_size(FillParams(targets=(5, 19)), encs)
    with pytest.raises(Validation, match="token id 40 is past this model's vocabulary of 20"):
        head.answer_size(FillParams(targets=(5, 40)), encs)
