"""vLLM's /score and /classify: the pure shaping of service.api.compat.vllm (vLLM's 1:1, 1:N
and N:N rule, the options it refuses, the answers' byte bounds), and the routes in-process
with the fake backends: answers equal the native routes', errors in vLLM's shape naming the
field, the routes in the OpenAPI schema."""

import json
import re
from typing import NamedTuple

import numpy as np
import orjson
import pytest

from headwise.service.api.compat import vllm
from headwise.service.engine.specials import Frame
from headwise.service.errors import InvalidRequest, TooLarge, Validation
from tests.unit.fakes import FakeClassifierBackend, client_for, make_package, wait_ready


def inputs(**body):
    return vllm.score_inputs(vllm.ScoreRequest(**body))


def refused(cls, field, fn, *a, **kw):
    with pytest.raises(cls) as e:
        fn(*a, **kw)
    assert type(e.value) is cls and e.value.field == field, e.value
    return e.value.render()


# -- reading the sides ---------------------------------------------------------------------------

def test_one_to_one_one_to_many_and_pairwise_as_vllm():
    one = inputs(text_1="q", text_2="d")
    assert one.pairs() == [("q", "d")] and one.where(0, 0) == "text_1" and one.where(1, 0) == "text_2"
    many = inputs(text_1="q", text_2=["a", "b", "c"])
    assert many.pairs() == [("q", "a"), ("q", "b"), ("q", "c")] and many.where(1, 2) == "text_2[2]"
    assert inputs(text_1=["q"], text_2=["a", "b"]).pairs() == [("q", "a"), ("q", "b")]  # a list of one: 1:N
    assert inputs(text_1=["q"], text_2="a").pairs() == [("q", "a")]
    zipped = inputs(queries=["q1", "q2"], documents=["a", "b"])
    assert (zipped.first, zipped.second) == ("queries", "documents") and zipped.pairs() == [("q1", "a"), ("q2", "b")]
    assert inputs(queries="q", items=["a"]).second == "items"
    assert inputs(data_1="q", data_2=["a"]).pairs() == [("q", "a")]


def test_side_mistakes_name_their_field():
    assert "at least one" in refused(InvalidRequest, "text_1", inputs, text_1=[], text_2=["a"])
    refused(InvalidRequest, "documents", inputs, queries="q", documents=[])
    msg = refused(InvalidRequest, "text_2", inputs, text_1=["a", "b"], text_2=["c", "d", "e"])
    assert "'text_1' has 2 texts and 'text_2' 3" in msg
    refused(InvalidRequest, "text_2", inputs, text_1=["a", "b"], text_2="c")  # N:1 is not vLLM's
    assert "missing" in refused(Validation, "text_2", inputs, text_1="a")
    refused(Validation, "text_1", inputs, text_2="a")
    refused(Validation, "queries", inputs, documents=["a"])
    refused(Validation, "text_1", inputs)
    refused(Validation, "queries", inputs, text_1="a", text_2="b", queries="c")
    refused(Validation, "text_1", inputs, queries="a", documents="b", text_1="c")
    refused(Validation, "items", inputs, queries="a", documents="b", items="c")
    refused(Validation, "data_2", inputs, text_1="a", data_2="b")


def test_counts_and_characters_by_the_clients_names():
    many = inputs(text_1="q", text_2=["a", "bbbb"])
    vllm.check_texts(many, 4, 2, None)
    assert "2 pairs; at most 1" in refused(TooLarge, "text_2", vllm.check_texts, many, 4, 1, None)
    assert "3 texts to embed (text_1 and text_2 together)" in refused(TooLarge, "text_2", vllm.check_texts,
                                                                      many, 4, 2, 3)
    assert refused(TooLarge, "text_2", vllm.check_texts, many, 3, 2, None).startswith("text_2[1] has 4 characters")
    assert refused(TooLarge, "text_1", vllm.check_texts, inputs(text_1="qqqq", text_2="a"), 3, 2, None) \
        .startswith("text_1 has 4 characters")


def test_options_honoured_or_refused():
    body = vllm.ClassifyRequest
    assert vllm.check_options(body(input="a")) is True
    refused(InvalidRequest, "priority", vllm.check_options, body(input="a", priority=-1))
    assert vllm.check_options(body(input="a", use_activation=False)) is False
    assert vllm.check_options(body(input="a", softmax=False, activation=False)) is False
    refused(Validation, "use_activation", vllm.check_options, body(input="a", use_activation=True, softmax=False))
    with pytest.raises(ValueError):
        body(input="a", truncate_prompt_tokens=-2)
    with pytest.raises(ValueError):
        body(input="a", messages=[])


def test_truncate_prompt_tokens_is_the_cuts_length_or_refused():
    bert, field = Tokenizer(64, Frame(1, 1, 3)), "truncate_prompt_tokens"
    for k in (None, -1, 64):
        assert vllm.max_tokens(k, bert) is None  # the cut at max_len
    assert [vllm.max_tokens(k, bert) for k in (2, 10, 63)] == [2, 10, 63]
    assert vllm.max_tokens(3, bert, pair=True) == 3
    assert "over this model's max_len (64)" in refused(InvalidRequest, field, vllm.max_tokens, 65, bert)
    assert "under the 2 tokens this model needs for each input" in refused(Validation, field, vllm.max_tokens,
                                                                           1, bert)
    assert "under the 3 tokens this model needs for each pair" in refused(Validation, field, vllm.max_tokens,
                                                                          2, bert, pair=True)
    assert "under the 1 tokens" in refused(Validation, field, vllm.max_tokens, 0, Tokenizer(64, Frame(0, 0, 0)))
    assert "special tokens within a text" in refused(Validation, field, vllm.max_tokens, 10, Tokenizer(64, None))
    assert "token ids are used as they are" in refused(Validation, field, vllm.max_tokens, 10, bert, ids=True)
    assert vllm.max_tokens(-1, Tokenizer(64, None), ids=True) is None
    # texts read without special tokens take none: 1 is enough, and no frame is needed
    assert vllm.max_tokens(1, bert, special=False) == 1 and vllm.max_tokens(5, Tokenizer(64, None), special=False) == 5
    assert "under the 1 tokens" in refused(Validation, field, vllm.max_tokens, 0, bert, special=False)


def test_truncation_side_is_the_params_truncate():
    assert vllm.truncate(None) is True and vllm.truncate("right") is True and vllm.truncate("left") == "left"
    for body in ({"input": "a"}, {"text_1": "a", "text_2": "b"}):
        kind = vllm.ClassifyRequest if "input" in body else vllm.ScoreRequest
        assert kind(**body, truncation_side="left").truncation_side == "left"
        with pytest.raises(ValueError, match=r"1 validation error.*\n+truncation_side"):
            kind(**body, truncation_side="middle")


class Tokenizer(NamedTuple):
    """What vllm.max_tokens reads of a TextTokenizer."""

    max_len: int
    frame: Frame | None


# -- answers --------------------------------------------------------------------------------------

def test_cosines_and_classification_data():
    rng = np.random.default_rng(0)
    vecs = list(rng.normal(size=(5, 8)).astype(np.float32))
    pairwise = inputs(text_1=["a", "b"], text_2=["c", "d"])
    got = vllm.cosines(vecs[:4], pairwise)
    for i in range(2):
        u, v = vecs[i].astype(np.float64), vecs[2 + i].astype(np.float64)
        assert got[i] == pytest.approx(u @ v / np.linalg.norm(u) / np.linalg.norm(v), abs=1e-12)
    many = vllm.cosines(vecs[:4], inputs(text_1="a", text_2=["b", "c", "d"]))
    assert many[2] == pytest.approx(vllm.cosines([vecs[0], vecs[3]], inputs(text_1="a", text_2="b"))[0])
    assert vllm.cosines([np.zeros(8), vecs[0]], inputs(text_1="a", text_2="b")) == [0.0]  # no NaN
    data = vllm.classification_data(["x", "y", "z"], [np.float32([0.2, 0.5, 0.3]), np.float32([0.4, 0.2, 0.4])])
    assert data[0] == {"index": 0, "label": "y", "probs": pytest.approx([0.2, 0.5, 0.3]), "num_classes": 3}
    assert data[1]["label"] == "x"  # the first of equals, as argmax


def test_envelope_and_the_byte_bounds_hold():
    env = vllm.envelope("score", "m", vllm.score_data([0.5]), 7)
    assert re.fullmatch(r"score-[0-9a-f]{32}", env["id"]) and env["object"] == "list" and isinstance(env["created"], int)
    assert env["usage"] == {"prompt_tokens": 7, "total_tokens": 7, "completion_tokens": 0, "prompt_tokens_details": None}
    vllm.VllmScoreResponse.model_validate(env)
    worst = [-1.2345678901234567e-300] * 50
    model = "ü" * 40
    assert len(orjson.dumps(vllm.envelope("score", model, vllm.score_data(worst), 10**9))) <= \
        vllm.score_bytes(50, model)
    labels = ["\u0001" * 20, "b"]
    data = vllm.classification_data(labels, [np.array([-1.2345678901234567e-300, 1.0])] * 50)
    env = vllm.envelope("classify", model, data, 10**9)
    vllm.VllmClassificationResponse.model_validate(env)
    assert len(orjson.dumps(env)) <= vllm.classification_bytes(50, labels, model)


# -- the routes in-process ---------------------------------------------------------------------------

def classification_package(root, name, labels):
    """A fake classification package whose tokenizer encodes pairs ([CLS] a [SEP] b [SEP])."""
    import hashlib

    from tokenizers import Tokenizer, processors

    folder = make_package(root, name)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    manifest.update(task="classification", labels=labels)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "models"
    make_package(root, "tiny")
    classification_package(root, "zce", ["score"])
    pkg = classification_package(root, "zcls", ["a", "b", "c"])
    with client_for(pkg, backend=FakeClassifierBackend, max_client_batch=4, max_input_chars=50) as c:
        wait_ready(c)
        yield c


def vllm_error(r, status, param):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(r.json()) == {"error"} and err["code"] == status and err["param"] == param, err
    return err["message"]


def test_score_with_a_cross_encoder_equals_rerank(served):
    got = served.post("/score", json={"model": "zce", "text_1": "the cat", "text_2": ["a dog", "the mat", "is"]})
    assert got.status_code == 200, got.text
    body = got.json()
    native = served.post("/v1/rerank", json={"model": "zce", "query": "the cat", "texts": ["a dog", "the mat", "is"]})
    want = {r["index"]: r["score"] for r in native.json()["results"]}
    assert [d["score"] for d in body["data"]] == pytest.approx([want[i] for i in range(3)], abs=1e-6)
    assert body["usage"]["prompt_tokens"] == native.json()["usage"]["prompt_tokens"]
    pairs = [["the cat", "a dog"], ["on the mat", "the mat"]]
    zipped = served.post("/v1/score", json={"model": "zce", "queries": [p[0] for p in pairs],
                                            "documents": [p[1] for p in pairs]}).json()
    predicted = served.post("/v1/predict", json={"model": "zce", "inputs": pairs}).json()["data"]
    assert [d["score"] for d in zipped["data"]] == pytest.approx([p[0]["score"] for p in predicted], abs=1e-6)


def test_score_with_an_embedding_model_is_the_cosine_of_v1_embed(served):
    texts = ["the cat sat", "a dog", "the quick brown fox"]
    body = served.post("/score", json={"model": "tiny", "text_1": texts[0], "text_2": texts[1:]}).json()
    vecs = np.array([d["embedding"] for d in served.post("/v1/embed", json={"model": "tiny", "inputs": texts})
                     .json()["data"]], dtype=np.float64)
    want = [vecs[0] @ v / np.linalg.norm(vecs[0]) / np.linalg.norm(v) for v in vecs[1:]]
    assert [d["score"] for d in body["data"]] == pytest.approx(want, abs=1e-6)
    assert body["model"] == "tiny" and body["data"][1] == {"index": 1, "object": "score", "score": body["data"][1]["score"]}


def test_classify_equals_predict(served):
    body = served.post("/classify", json={"model": "zcls", "input": ["the cat", "a dog"]}).json()
    native = served.post("/v1/predict", json={"model": "zcls", "inputs": [["the cat"], ["a dog"]]}).json()["data"]
    for item, predicted in zip(body["data"], native, strict=True):
        by_label = {p["label"]: p["score"] for p in predicted}
        assert item["probs"] == pytest.approx([by_label[x] for x in "abc"], abs=1e-6)
        assert item["label"] == predicted[0]["label"] and item["num_classes"] == 3
    assert re.fullmatch(r"classify-[0-9a-f]{32}", body["id"])


def test_route_errors_in_vllms_shape(served):
    vllm_error(served.post("/score", json={"model": "zcls", "text_1": "a", "text_2": "b"}), 422, "model")
    vllm_error(served.post("/classify", json={"model": "tiny", "input": "a"}), 422, "model")
    vllm_error(served.post("/score", json={"model": "nope", "text_1": "a", "text_2": "b"}), 404, "model")
    vllm_error(served.post("/classify", json={"input": "a"}), 422, "model")
    vllm_error(served.post("/score", json={"model": "zce", "text_1": ["a", "b"], "text_2": ["c"]}), 400, "text_2")
    vllm_error(served.post("/score", json={"model": "zce", "text_1": "a", "queries": "b"}), 422, "queries")
    vllm_error(served.post("/score", json={"model": "zce", "text_1": "a", "text_2": ["b"] * 5}), 413, "text_2")
    vllm_error(served.post("/score", json={"model": "tiny", "text_1": "a", "text_2": ["b"] * 4}), 413, "text_2")
    vllm_error(served.post("/classify", json={"model": "zcls", "input": []}), 400, "input")
    assert "input" in vllm_error(served.post("/classify", json={"model": "zcls"}), 422, None)


def test_routes_are_documented(served):
    spec = served.get("/openapi.json").json()
    for path in ("/score", "/v1/score", "/classify", "/v1/classify"):
        op = spec["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["properties"]
        assert {"400", "404", "413", "422", "429", "503"} <= set(op["responses"])


def test_the_api_key_in_vllms_shape(package):
    with client_for(package, api_key="s3cret") as c:
        wait_ready(c)
        for path, body in (("/score", {"text_1": "a", "text_2": "b"}), ("/v1/classify", {"input": "a"})):
            vllm_error(c.post(path, json=body), 401, None)
        ok = c.post("/v1/score", json={"text_1": "a", "text_2": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["data"][0]["score"] == pytest.approx(1.0)
