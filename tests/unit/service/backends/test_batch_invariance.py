"""An input's answer never depends on what shares its batch (issue 15), at the backend level:
every variant of a real (tiny) package through the service's own onnxruntime backend, alone,
beside 1, 15 and 63 other inputs of any length, and padded to each length bucket."""

import numpy as np
import pytest

from headwise.service.backends.onnxruntime import OrtBackend, choose_variant
from headwise.service.engine.work import length_buckets
from headwise.service.package import PackageError, load_package
from headwise.service.settings import Settings

# fp32 and int8 within the bars; fp16 runs on CPU here, which is enough to prove the
# graph itself has no cross-row term.
TOLERANCE = {"fp32": 1e-5, "int8": 1e-4, "fp16": 1e-3}


def batch(rows: list[np.ndarray], padded: int, pad_id: int) -> dict[str, np.ndarray]:
    """The feeds service.engine.run_batch builds: ids padded with pad_id, mask 1 on real tokens."""
    ids = np.full((len(rows), padded), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def package(tiny_package):
    return load_package(tiny_package)


def random_inputs(rng, n: int, max_len: int, vocab: int) -> list[np.ndarray]:
    """CLS, random word ids, SEP, of random lengths up to max_len."""
    out = []
    for _ in range(n):
        t = int(rng.integers(2, max_len + 1))
        out.append(np.array([2, *rng.integers(5, vocab, t - 2), 3], dtype=np.int64))
    return out


@pytest.mark.parametrize("precision", ["fp32", "int8", "fp16"])
def test_embedding_and_attention_do_not_depend_on_the_batch(package, precision):
    backend = OrtBackend(package, Settings(models_dir=package.path.parent, provider="cpu", precision=precision))
    assert backend.precision == precision
    rng = np.random.default_rng(0)
    vocab = package.manifest["vocab_size"]
    probe = random_inputs(rng, 1, 12, vocab)[0]
    roles = {"embed": ["sentence_embedding", "last_hidden_state"], "attention": ["sentence_embedding", "attentions"]}
    for role, outputs in roles.items():
        tol = TOLERANCE[precision] if role == "embed" else TOLERANCE["fp32"]
        alone = backend.run(role, batch([probe], len(probe), package.pad_id), outputs)
        t = len(probe)
        cases = []
        for others in (1, 15, 63):  # beside others of any length, the probe anywhere in the batch
            rows = random_inputs(rng, others, package.max_len, vocab)
            at = int(rng.integers(0, others + 1))
            rows.insert(at, probe)
            cases.append((rows, at, max(len(r) for r in rows)))
        for padded in length_buckets(package.max_len):  # whichever bucket its batch lands in
            if padded >= t:
                cases.append(([probe], 0, padded))
        for rows, at, padded in cases:
            got = backend.run(role, batch(rows, padded, package.pad_id), outputs)
            where = f"{precision} {role}: batch of {len(rows)} padded to {padded}"
            np.testing.assert_allclose(got["sentence_embedding"][at], alone["sentence_embedding"][0], rtol=0,
                                       atol=tol, err_msg=where)
            if "last_hidden_state" in outputs:
                np.testing.assert_allclose(got["last_hidden_state"][at, :t], alone["last_hidden_state"][0], rtol=0,
                                           atol=tol * 10, err_msg=where)
            if "attentions" in outputs:
                np.testing.assert_allclose(got["attentions"][at, ..., :t, :t], alone["attentions"][0], rtol=0,
                                           atol=tol, err_msg=where)
                assert not got["attentions"][at, ..., :t, t:].any(), where  # nothing on padding


def test_auto_is_fp32_on_cpu_and_int8_only_when_asked(package):
    assert choose_variant(package, "cpu", "auto") == "fast"
    assert choose_variant(package, "cpu", "int8") == "fast.int8"


def test_auto_serves_fp16_on_cuda_only_when_it_passed_its_parity_bar(package):
    assert package.manifest["parity"]["fast.fp16"]["passed"] is True
    assert choose_variant(package, "cuda", "auto") == "fast.fp16"
    failed = {**package.manifest, "parity": {**package.manifest["parity"], "fast.fp16": {"passed": False}}}
    unverified = {**package.manifest, "parity": {}}
    for manifest in (failed, unverified):
        other = type(package)(**{**package.__dict__, "manifest": manifest})
        assert choose_variant(other, "cuda", "auto") == "fast"


def test_asking_for_a_missing_precision_names_the_variants_present(package):
    variants = {k: v for k, v in package.variants.items() if k != "fast.int8"}
    other = type(package)(**{**package.__dict__, "variants": variants})
    with pytest.raises(PackageError) as e:
        choose_variant(other, "cpu", "int8")
    msg = str(e.value)
    assert "no fast.int8 variant" in msg and "fast (fp32)" in msg and "fast.fp16 (fp16)" in msg
