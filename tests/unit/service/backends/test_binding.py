"""The IOBinding path that serves on CUDA, run here on the CPU: the binding device is a
parameter, so the same code (bind inputs from host, let the graph size its outputs, copy back)
is compared with plain `session.run` on the tiny encoder and generative packages: dynamic
axes, output order, a zero-length past and KV-cache slices that are not contiguous.

On a GPU machine, HEADWISE_TEST_PROVIDER=cuda runs the same comparisons with CUDA sessions
and outputs bound on the device (bench/gpu.sh setup does)."""

import os

import numpy as np
import onnxruntime as ort
import pytest

from headwise.service.backends.generative import GenerativeBackend
from headwise.service.backends.onnxruntime import OrtBackend, run_bound
from headwise.service.package import load_package
from headwise.service.settings import Settings
from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian

RNG = np.random.default_rng(0)
L, H, DH = 2, 2, 16  # the tiny generative checkpoints' n_layers, n_heads, d_model / n_heads


PROVIDER = os.environ.get("HEADWISE_TEST_PROVIDER", "cpu")
DEVICE = "cuda" if PROVIDER == "cuda" else "cpu"


def settings(tmp_path) -> Settings:
    return Settings(models_dir=tmp_path, provider=PROVIDER, threads=1)


def ids(batch: int, seq: int, vocab: int = 30) -> np.ndarray:
    return RNG.integers(5, vocab, (batch, seq), dtype=np.int64)


@pytest.fixture(scope="module")
def encoder_pair(tiny_package, tmp_path_factory):
    pkg = load_package(tiny_package)
    s = settings(tmp_path_factory.mktemp("s"))
    return OrtBackend(pkg, s, binding=None), OrtBackend(pkg, s, binding=DEVICE)


@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 7), (3, 16), (8, 5)])
def test_encoder_bound_equals_run_for_every_shape_and_output_order(encoder_pair, batch, seq):
    plain, bound = encoder_pair
    assert bound.binding == DEVICE and plain.binding is None and plain.provider == PROVIDER
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 + 1:] = 0  # padding in one row
    feeds = {"input_ids": ids(batch, seq), "attention_mask": mask, "token_type_ids": np.zeros((batch, seq), np.int64)}
    for role in plain.variants:
        sess = plain.session(role)
        names = [o.name for o in sess.get_outputs()]
        head_mask = [np.ones((batch, *i.shape[1:]), np.float32) for i in sess.get_inputs() if i.name == "head_mask"]
        if head_mask:  # the analysis graph: one head removed in one row
            head_mask[0][0, 0, 0] = 0
        run_feeds = {**feeds, **({"head_mask": head_mask[0]} if head_mask else {})}
        for outputs in (names, names[::-1], names[:1]):
            want, got = plain.run(role, run_feeds, outputs), bound.run(role, run_feeds, outputs)
            assert list(got) == outputs
            for name in outputs:
                assert got[name].shape == want[name].shape
                np.testing.assert_array_equal(got[name], want[name])


@pytest.fixture(scope="module")
def generative(tmp_path_factory):
    from headwise.export.package import build_package

    out = {}
    for make, name in ((make_tiny_gpt2, "gpt2"), (make_tiny_marian, "marian")):
        ckpt = make(tmp_path_factory.mktemp("ckpt") / name)
        path = build_package(ckpt, tmp_path_factory.mktemp("pkg"), name, progress=lambda m: None)
        pkg = load_package(path)
        s = settings(tmp_path_factory.mktemp("s"))
        out[name] = GenerativeBackend(pkg, s, binding=None), GenerativeBackend(pkg, s, binding=DEVICE)
    return out


def assert_same(plain, bound, variant, feeds):
    outputs = [o.name for o in plain._sessions[variant].get_outputs()]
    want, got = plain.run(variant, feeds, outputs), bound.run(variant, feeds, outputs)
    for name in outputs:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{variant}: {name}")
    return want


def test_gpt2_prefill_then_decode_from_a_non_contiguous_kv_slice(generative):
    plain, bound = generative["gpt2"]
    batch, seq = 3, 6
    pre = assert_same(plain, bound, "prefill", {"input_ids": ids(batch, seq),
                                                "attention_mask": np.ones((batch, seq), np.int64)})
    keys, values = pre["present_keys"], pre["present_values"]  # [L, B, H, T, Dh]
    for rows in (slice(1, 2), slice(0, 3, 2)):  # one sequence finished; every other one kept
        k, v = keys[:, rows], values[:, rows]
        assert not k.flags.c_contiguous
        b = k.shape[1]
        for variant in ("decode", "decode.attention"):
            assert_same(plain, bound, variant, {"input_ids": ids(b, 1), "attention_mask": np.ones((b, seq + 1), np.int64),
                                                "past_keys": k, "past_values": v})


def test_marian_decoder_step_with_a_zero_length_past(generative):
    plain, bound = generative["marian"]
    batch, src = 2, 5
    mask = np.ones((batch, src), np.int64)
    enc = assert_same(plain, bound, "encoder", {"input_ids": ids(batch, src), "attention_mask": mask})
    empty = np.zeros((L, batch, H, 0, DH), np.float32)
    for variant in ("decoder_step", "decoder_step.attention"):
        out = assert_same(plain, bound, variant, {
            "input_ids": ids(batch, 1), "attention_mask": np.ones((batch, 1), np.int64), "encoder_attention_mask": mask,
            "cross_keys": enc["cross_keys"], "cross_values": enc["cross_values"], "past_keys": empty, "past_values": empty})
        assert out["present_keys"].shape[3] == 1


def test_run_bound_reads_strided_inputs_by_their_strides(tiny_package):
    """A strided numpy input (a slice of a cache) is bound by value, not read as its raw buffer."""
    pkg = load_package(tiny_package)
    sess = ort.InferenceSession(str(pkg.variants["fast"].file), providers=["CPUExecutionProvider"])
    wide = ids(4, 12)
    strided = wide[:, ::2]  # [4, 6], not contiguous
    feeds = {"input_ids": strided, "attention_mask": np.ones((4, 6), np.int64),
             "token_type_ids": np.zeros((4, 6), np.int64)}
    names = [i.name for i in sess.get_inputs()]
    feeds = {k: feeds[k] for k in names}
    want = sess.run(["sentence_embedding"], {k: np.ascontiguousarray(v) for k, v in feeds.items()})[0]
    got = run_bound(sess, feeds, ["sentence_embedding"], "cpu")["sentence_embedding"]
    np.testing.assert_array_equal(got, want)
