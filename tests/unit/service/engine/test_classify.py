"""The classification pieces without a model: activation, the package's task and labels, the
byte measures of the budgets, and which runtime refuses which operation."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import numpy as np
import pytest

from headwise.service.api.sizes import JSON, block_bytes
from headwise.service.engine.classify import (
    ClassifyParams,
    activate,
    answer_size,
    attention_bytes,
    pair_sizes,
    returned_bytes,
)
from headwise.service.engine.params import AttentionSpec, EmbedParams
from headwise.service.engine.runtime import Capability
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.errors import Validation
from headwise.service.metrics import Metrics
from headwise.service.package import PackageError, load_package
from headwise.service.settings import Settings
from tests.unit.fakes import FakeBackend, fake_hidden, make_package


def test_activation_is_sigmoid_for_one_label_softmax_for_several():
    np.testing.assert_allclose(activate(np.array([0.0, 2.0, -3.0])[:1], False), [0.5])
    np.testing.assert_allclose(activate(np.array([2.0]), False), [1 / (1 + np.exp(-2.0))], rtol=1e-7)
    s = activate(np.array([1.0, 2.0, 3.0], np.float32), False)
    np.testing.assert_allclose(s, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-6)
    assert s.dtype == np.float32
    big = activate(np.array([1000.0, 0.0]), False)  # no overflow
    np.testing.assert_array_equal(big, [1.0, 0.0])
    raw = np.array([-4.5, 7.25], np.float32)
    np.testing.assert_array_equal(activate(raw, True), raw)


def _pair(tq: int, td: int) -> Encoded:
    seg = np.array([-1] + [0] * tq + [-1] + [1] * td + [-1], np.int8)
    n = len(seg)
    return Encoded(np.zeros(n, np.int64), (seg == 1).astype(np.int64), ["t"] * n, [(0, 0)] * n, seg)


def test_budget_measures_count_both_blocks():
    enc = _pair(5, 7)
    assert pair_sizes(enc) == (5, 7)
    spec = AttentionSpec.select(4, 6, [0, 2], [1], dtype="float16")
    assert attention_bytes(spec, enc) == 2 * 1 * (2 * 5 * 7) * 2
    assert returned_bytes(spec, enc) == attention_bytes(spec, enc)
    top = AttentionSpec.select(4, 6, [0], [1], format="topk", top_k=3)
    assert returned_bytes(top, enc) == (5 * 3 + 7 * 3) * (4 + 4)
    labels = ("negative", "positive")
    without = JSON.bytes(answer_size(ClassifyParams(), enc, labels))
    dense = JSON.bytes(answer_size(ClassifyParams(attention=spec), enc, labels))
    # orjson's bytes of the blocks themselves stay under the bound
    assert dense - without >= block_bytes(spec.cells_block(2 * 5 * 7)) + 12 * 48


def test_a_classification_manifest_needs_its_labels(tmp_path):
    folder = make_package(tmp_path / "models")
    mf = folder / "manifest.json"
    m = json.loads(mf.read_text())
    from headwise.service.engine import Engine

    def load():  # the package as the engine loads it, its head included
        Engine(Settings(models_dir=tmp_path / "models"), Metrics(gpu=None), FakeBackend, measure=JSON).load_packages()

    for labels in (None, [], ["a", "a"], ["a", 3], "ab"):
        m.update(task="classification", labels=labels)
        mf.write_text(json.dumps(m))
        with pytest.raises(PackageError, match="needs architecture 'encoder' and 'labels'"):
            load()
    m.update(labels=["no", "yes"])
    mf.write_text(json.dumps(m))
    p = load_package(folder)
    assert p.task == "classification" and p.labels == ("no", "yes")
    load()
    m.update(task="translation")
    mf.write_text(json.dumps(m))
    with pytest.raises(PackageError, match="task 'translation' is not served"):
        load()
    m.update(task="embedding", labels=[])  # a head without labels reads none: served as before
    mf.write_text(json.dumps(m))
    assert load_package(folder).labels == ()
    load()


def test_an_embedding_model_refuses_classification(tmp_path):
    from headwise.service.engine import Engine

    make_package(tmp_path / "models")
    engine = Engine(Settings(models_dir=tmp_path / "models"), Metrics(gpu=None), FakeBackend, measure=JSON)
    engine.load_packages()
    rt = engine.models["tiny"]
    assert rt.card()["task"] == "embedding" and "labels" not in rt.card()
    engine.ready = True
    with pytest.raises(Validation, match=r"'tiny' is an embedding model: .* /v1/rerank and /v1/predict serve "
                                         "classification packages"):
        asyncio.run(engine.rerank(rt, "q", ["a"], ClassifyParams()))
    with pytest.raises(Validation, match="embedding model"):
        asyncio.run(engine.classify(rt, ["a"], ClassifyParams()))


def test_pairs_keep_their_segments_and_own_offsets(tmp_path):
    tok = TextTokenizer(make_package(tmp_path / "models") / "tokenizer.json", 32)
    # the fake package's tokenizer has no pair template: both texts' tokens, no special tokens
    single, pair = tok.encode_items(["the cat", ("the cat", "a dog sat")])
    assert single.segments is None and single.tokens == ["[CLS]", "the", "cat", "[SEP]"]
    assert pair.tokens == ["the", "cat", "a", "dog", "sat"]
    assert pair.segments.tolist() == [0, 0, 1, 1, 1] and pair.type_ids.tolist() == [0, 0, 1, 1, 1]
    assert pair.offsets == [(0, 3), (4, 7), (0, 1), (2, 5), (6, 9)]


class FakeClassifierBackend(FakeBackend):
    """FakeBackend with a `logits` output: two labels, from the masked mean of fake_hidden."""

    def run(self, role, feeds, outputs):
        out = super().run(role, feeds, [o for o in outputs if o != "logits"])
        if "logits" in outputs:
            m = feeds["attention_mask"][..., None].astype(np.float32)
            out["logits"] = ((fake_hidden(feeds["input_ids"]) * m).sum(1) / m.sum(1))[:, :2]
        return out


def _classifier_engine(tmp_path):
    from headwise.service.engine import Engine

    mf = make_package(tmp_path / "models") / "manifest.json"
    m = json.loads(mf.read_text())
    m.update(task="classification", labels=["no", "yes"])
    mf.write_text(json.dumps(m))
    engine = Engine(Settings(models_dir=tmp_path / "models", max_wait_ms=50), Metrics(gpu=None),
                    FakeClassifierBackend, measure=JSON)
    engine.load_packages()
    return engine


def test_a_classification_model_refuses_similarity_and_occlusion_before_queueing(tmp_path):
    """Its batchers answer ClassifyParams only: an embedding job among them (the run_encoded of
    similarity and occlusion) failed its whole batch with a 500, classify requests included."""
    engine = _classifier_engine(tmp_path)
    rt = engine.models["tiny"]
    refused = r"'tiny' is a classification model \(2 labels\): use POST /v1/rerank or /v1/predict; .*/v1/similarity"

    async def go():
        engine._prepare()
        engine.start()
        rt.backend.calls.clear()
        try:
            got = await asyncio.gather(
                engine.similarity(rt, "the cat", ["a dog"], False, False, 5),
                engine.similarity(rt, "the cat", ["a dog"], True, False, 5),
                engine.occlusion(rt, "the cat", False),
                engine.classify(rt, ["the cat", ("a dog", "sat")], ClassifyParams()),
                return_exceptions=True)
            with pytest.raises(Validation, match=refused):
                engine.get("tiny", needs=Capability.EMBED)
            with pytest.raises(Validation, match=refused):
                await engine.embed(rt, ["the cat"], EmbedParams())
            return got
        finally:
            await engine.close()

    *refusals, classified = asyncio.run(go())
    for e in refusals:
        assert isinstance(e, Validation) and "/v1/occlusion" in str(e), e
    assert not isinstance(classified, Exception), classified
    assert len(classified.data) == 2
    assert sum(shape[0] for _, shape in rt.backend.calls) == 2  # the classify inputs only; nothing else ran


@pytest.mark.parametrize("aggregate", ["none", "mean", "rollout"])
def test_pair_measures_count_the_planes_written(aggregate):
    """The pair measures count AttentionSpec.planes(), as every other measure does: L′·H′
    planes, L′ for mean, 1 for rollout."""
    enc = _pair(5, 7)
    top = AttentionSpec.select(4, 6, [0, 2], [1, 3, 5], format="topk", top_k=3, aggregate=aggregate)
    planes = {"none": 6, "mean": 2, "rollout": 1}[aggregate]
    assert top.planes() == planes
    assert returned_bytes(top, enc) == planes * (5 * 3 + 7 * 3) * (4 + 4)
    n = planes * (5 * 3 + 7 * 3)
    assert (JSON.bytes(answer_size(ClassifyParams(attention=top), enc, ["x"]))
            - JSON.bytes(answer_size(ClassifyParams(), enc, ["x"])) == n * 16 + n * 6 + 12 * (48 + 6) + 256)
    dense = AttentionSpec.select(4, 6, [0, 2], [1, 3, 5], aggregate=aggregate)
    assert returned_bytes(dense, enc) == attention_bytes(dense, enc) == planes * 2 * 5 * 7 * 4


def test_rerank_names_texts_by_passing_the_field_down(tmp_path):
    """The engine names the field (classify(..., field="texts")) rather than editing a caught
    error; a classifier's params declare the budget's per-input measure (RequestParams)."""
    from headwise.service.engine.params import RequestParams

    params: RequestParams = ClassifyParams(truncate=False)
    assert params.padded_attention is False  # not a field: nothing a client could set
    assert "padded_attention" not in {f.name for f in dataclasses.fields(ClassifyParams)}
    engine = _classifier_engine(tmp_path)
    rt = engine.models["tiny"]

    async def go():
        engine._prepare()
        engine.start()
        try:
            errors = []
            for call in (rt.submit([("a", "the " * 40)], params, None, field="texts"), rt.submit(["the " * 40], params),
                         engine.classify(rt, [("a", "the " * 40)], params)):
                with pytest.raises(Validation) as exc:
                    await call
                errors.append(exc.value)
            return errors
        finally:
            await engine.close()

    texts, inputs, via_engine = asyncio.run(go())
    assert texts.field == "texts" and texts.render().startswith("texts[0] has ")
    assert inputs.field == via_engine.field == "inputs" and inputs.render().startswith("inputs[0] has 42 tokens")
