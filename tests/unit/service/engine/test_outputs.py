"""Un-padding, layer/head selection, top-k, dtypes and encodings of attention results."""

import base64

import numpy as np
import pytest

from headwise.service.engine.outputs import attention_payload, pool, select_attention, topk
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.work import length_buckets


def spec(layers=None, heads=None, **kw):
    base = dict(format="dense", top_k=3, dtype="float32", encoding="json")
    base.update(kw)
    return AttentionSpec(layers=tuple(layers or range(2)), heads=tuple(heads or range(3)),
                         all_layers=layers is None, all_heads=heads is None, **base)


@pytest.fixture
def padded():
    rng = np.random.default_rng(0)
    a = rng.random((2, 3, 7, 7)).astype(np.float32)  # [L, H, Tp, Tp], real T = 5
    a[..., 5:] = 0
    return a / a.sum(-1, keepdims=True)


def test_unpad_and_select(padded):
    out = select_attention(padded, 5, spec(layers=[1], heads=[2, 0]))
    assert out.shape == (1, 2, 5, 5) and out.flags.c_contiguous
    np.testing.assert_array_equal(out[0, 0], padded[1, 2, :5, :5])
    np.testing.assert_array_equal(out[0, 1], padded[1, 0, :5, :5])
    np.testing.assert_allclose(out.sum(-1), 1, rtol=1e-6)


@pytest.mark.parametrize("dtype, np_dtype", [("float32", "<f4"), ("float16", "<f2")])
def test_base64_is_little_endian_c_order(padded, dtype, np_dtype):
    p = attention_payload(padded, 5, spec(dtype=dtype, encoding="base64"))
    got = np.frombuffer(base64.b64decode(p["data"]), dtype=np_dtype).reshape(p["shape"])
    np.testing.assert_array_equal(got, padded[:, :, :5, :5].astype(np_dtype))
    assert p["shape"] == [2, 3, 5, 5] and p["dtype"] == dtype


def test_json_dense_keeps_the_array(padded):
    p = attention_payload(padded, 5, spec(dtype="float16"))
    assert p["data"].dtype == np.float16 and p["data"].shape == (2, 3, 5, 5)


def test_topk_is_the_true_topk(padded):
    idx, vals = topk(padded[:, :, :5, :5], 3)
    assert idx.shape == (2, 3, 5, 3) and idx.dtype == np.int32
    ref = np.sort(padded[:, :, :5, :5], axis=-1)[..., ::-1][..., :3]
    np.testing.assert_array_equal(vals, ref)
    np.testing.assert_array_equal(np.take_along_axis(padded[:, :, :5, :5], idx.astype(np.int64), -1), vals)


def test_topk_clamps_k_to_t_and_encodes(padded):
    p = attention_payload(padded, 5, spec(format="topk", top_k=50, encoding="base64"))
    assert p["shape"] == [2, 3, 5, 5] and p["index_dtype"] == "int32"
    idx = np.frombuffer(base64.b64decode(p["data"]["indices"]), "<i4").reshape(p["shape"])
    assert sorted(idx[0, 0, 0].tolist()) == [0, 1, 2, 3, 4]


def test_budget_measure():
    s = spec(layers=[0], heads=[1, 2], dtype="float16")
    assert s.nbytes(10) == 1 * 2 * 100 * 2
    assert spec(format="topk", top_k=4).returned_bytes(10) == 2 * 3 * 10 * 4 * (4 + 4)


def test_pool_mean_and_cls():
    h = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(pool(h, "mean", False), [2.0, 2.0])
    np.testing.assert_allclose(pool(h, "cls", True), [0.6, 0.8])


def test_length_buckets():
    assert length_buckets(256) == [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    assert length_buckets(100) == [8, 12, 16, 24, 32, 48, 64, 96, 100]
    assert length_buckets(8) == [8]
    assert length_buckets(10) == [8, 10]


def test_huge_inputs_cost_what_a_long_sentence_costs(tmp_path):
    from headwise.service.engine.tokenizer import PREFIX_TOKENS, TextTokenizer
    from headwise.service.errors import Validation
    from tests.unit.fakes import make_package

    tok = TextTokenizer(make_package(tmp_path) / "tokenizer.json", 32)
    given = []

    class Seen:  # what the tokenizer is asked to read
        def __init__(self, inner):
            self.inner = inner

        def encode_batch(self, texts, **kw):
            given.extend(len(t) for t in texts)
            return self.inner.encode_batch(texts, **kw)

    tok._truncating, tok._full = Seen(tok._truncating), Seen(tok._full)
    read = tok.ascii.text
    tok.ascii.text = lambda text: given.append(len(text)) or read(text)  # what headwise.wordpiece is given
    for big in ("the cat sat on the mat " * 100_000, "the café sat on the mat " * 100_000):  # ASCII, or not
        given.clear()
        assert tok.encode([big])[0].length == 32
        with pytest.raises(Validation, match="limit of 32"):
            tok.encode([big], truncate=False)
        assert given and max(given) <= 4 * PREFIX_TOKENS * 32  # prefixes, never the 2.3 MB text
    assert tok.encode(["the cat " * 5], truncate=False)[0].length == 12


def test_weights_to_f16_is_bit_identical_to_numpys_cast():
    from headwise.service.engine.outputs import weights_to_f16

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 40, 40)).astype(np.float32) * 6
    soft = np.exp(x - x.max(-1, keepdims=True))
    soft = (soft / soft.sum(-1, keepdims=True)).astype(np.float32)  # mostly float16 subnormals
    edges = np.array([0, 2**-25, 2**-24, 1.5 * 2**-24, 2.5 * 2**-24, 2**-14 * (1 - 2**-12), 2**-14,
                      0.5 + 2**-12, 0.5 + 3 * 2**-12, 1 - 2**-12, 1 - 2**-11, 1.0, 1e-30], np.float32)
    for a in (soft, soft[:, :, :7, :7], rng.random(100_000, dtype=np.float32) ** 9, edges, edges[:0]):
        got = weights_to_f16(a)
        assert got.dtype == np.float16 and got.shape == a.shape
        assert np.array_equal(got.view(np.uint16), a.astype(np.float16).view(np.uint16))
    for outside in (np.array([0.5, 1.5], np.float32), np.array([-0.25, 0.5], np.float32),
                    np.array([np.nan, 0.5], np.float32)):
        assert np.array_equal(weights_to_f16(outside).view(np.uint16), outside.astype(np.float16).view(np.uint16))
