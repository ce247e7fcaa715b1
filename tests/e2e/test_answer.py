"""Extractive question answering end to end: a real `headwise serve` (in process, and with the
engine in its own process) on a tiny random BertForQuestionAnswering package. /v1/answer's
spans equal what transformers' model and its span choice (`select_starts_ends`, the
question-answering pipeline's) give, widened to words as the pipeline's `get_indices` does with
the fast tokenizer's encoding, whatever shares the batch; the per-head attention is the
model's own; other routes and bad requests are refused in the native shape."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.conftest import ENGINE_MODES
from tests.fixtures.qa import reference
from tests.fixtures.tiny import reference_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PAIRS = [("who sat", "the cat sat on the mat, and the dog jumps over the lazy fox"),
         ("what is quick", "the quick brown fox jumps over the lazy dog"),
         ("where", "Berkeleyan wanderings of Zoë in 中國, #1 attention heads look at tokens"),
         ("", "a")]


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, qa_package):
    return start_server(models=qa_package["models"], env=ENGINE_MODES[request.param])


@pytest.fixture(scope="module")
def ref(qa_package):
    ckpt, model = qa_package["tiny-qa"]
    tok = reference_tokenizer(ckpt, model_input_names=["input_ids", "token_type_ids", "attention_mask"])  # a pair's segments
    return tok, model.eval()


def test_answers_equal_transformers_whatever_shares_the_batch(srv, ref):
    asked = [{"question": q, "context": c} for q, c in PAIRS]
    r = srv.post("/v1/answer", {"inputs": asked, "top_k": 3, "handle_impossible_answer": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-qa" and body["usage"]["prompt_tokens"] > 0
    for (q, c), item in zip(PAIRS, body["data"], strict=True):
        want, _ = reference(ref, q, c, 3, True)
        got = item["answers"]
        assert [(a["answer"], a["start"], a["end"]) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
        np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-3, atol=1e-6)
        assert all(c[a["start"]:a["end"]] == a["answer"] for a in got)
    for one, (q, c) in zip(asked, PAIRS, strict=True):  # alone, with the defaults: the best span
        alone = srv.post("/v1/answer", {"inputs": one}).json()["data"][0]["answers"]
        want, _ = reference(ref, q, c, 1, False)
        assert [(a["answer"], a["start"], a["end"]) for a in alone] == [(a["answer"], a["start"], a["end"])
                                                                        for a in want]


def test_attention_is_the_models_own(srv, ref):
    q, c = PAIRS[1]
    r = srv.post("/v1/answer", {"inputs": {"question": q, "context": c}, "attention": {"layers": [1], "heads": [0]}})
    assert r.status_code == 200, r.text
    att = r.json()["data"][0]["attention"]
    _, out = reference(ref, q, c, 1, False, attentions=True)
    want = out.attentions[1][0, 0].numpy()
    assert att["shape"] == [1, 1, *want.shape]
    np.testing.assert_allclose(np.array(att["data"]).reshape(want.shape), want, atol=1e-4)


def test_a_context_past_max_len_is_refused_unless_cut(srv):
    long = {"question": "who", "context": " ".join(["cat"] * 200)}
    r = srv.post("/v1/answer", {"inputs": long})
    assert r.status_code == 422 and "truncate" in r.json()["error"]["message"], r.text
    r = srv.post("/v1/answer", {"inputs": long, "truncate": True})
    assert r.status_code == 200 and r.json()["data"][0]["answers"][0]["answer"].strip("cat ") == "", r.text


def test_truncate_cuts_the_context_never_the_question(srv, ref):
    """As the pipeline's truncation="only_second": a long question is kept whole and the
    context cut (longest_first would cut both); a question that leaves the context no room is
    refused, on /v1/answer and on the pipeline's shape alike."""
    q, c = " ".join(["where is the cat"] * 6), " ".join(["the cat sat on the mat"] * 40)
    r = srv.post("/v1/answer", {"inputs": {"question": q, "context": c}, "top_k": 3, "truncate": True})
    assert r.status_code == 200, r.text
    want, _ = reference(ref, q, c, 3, False)
    assert [(a["answer"], a["start"], a["end"]) for a in r.json()["data"][0]["answers"]] == [
        (a["answer"], a["start"], a["end"]) for a in want]
    too_long = {"question": " ".join(["where"] * 300), "context": "the cat"}
    for path, body in (("/v1/answer", {"inputs": too_long, "truncate": True}),
                       ("/", {"inputs": too_long, "truncate": True})):
        r = srv.post(path, body)
        assert r.status_code == 422 and "leaves its second no room" in r.text, (path, r.text)
    r = srv.post("/", {"inputs": {"question": q, "context": c}, "parameters": {"top_k": 3}, "truncate": True})
    assert r.status_code == 200 and [(a["answer"], a["start"]) for a in r.json()] == [
        (a["answer"], a["start"]) for a in want], r.text


def test_kserve_v2_answers_through_tritonclient_as_v1_answer(srv, ref):
    """KServe v2: `question` and `context` BYTES [N] in, `answer`, `score`, `start` and `end`
    [N, top_k] out (binary and JSON), equal to /v1/answer's, rows padded past their answers;
    the transformers reference as for /v1/answer."""
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    client = th.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    try:
        md = client.get_model_metadata("tiny-qa")
        assert [i["name"] for i in md["inputs"]] == ["question", "context"]
        assert [(o["name"], o["datatype"]) for o in md["outputs"]] == [
            ("answer", "BYTES"), ("score", "FP32"), ("start", "INT64"), ("end", "INT64")]
        ins = []
        for name, k in (("question", 0), ("context", 1)):
            i = th.InferInput(name, [len(PAIRS)], "BYTES")
            i.set_data_from_numpy(np.array([p[k].encode() for p in PAIRS], dtype=np.object_), binary_data=name == "context")
            ins.append(i)
        out = client.infer("tiny-qa", ins, parameters={"top_k": 3, "handle_impossible_answer": True},
                           outputs=[th.InferRequestedOutput("answer", binary_data=True), th.InferRequestedOutput("score"),
                                    th.InferRequestedOutput("start", binary_data=True), th.InferRequestedOutput("end")])
        with pytest.raises(InferenceServerException, match=r"parameter top_k must be an integer in 1\.\.32"):
            client.infer("tiny-qa", ins, parameters={"top_k": 33})
        with pytest.raises(InferenceServerException, match="input 'context' is missing"):
            client.infer("tiny-qa", ins[:1])
    finally:
        client.close()
    answers, scores = out.as_numpy("answer"), out.as_numpy("score")
    starts, ends = out.as_numpy("start"), out.as_numpy("end")
    assert answers.shape == scores.shape == starts.shape == ends.shape == (len(PAIRS), 3)
    native = srv.post("/v1/answer", {"inputs": [{"question": q, "context": c} for q, c in PAIRS], "top_k": 3,
                                     "handle_impossible_answer": True}).json()["data"]
    for k, ((q, c), item) in enumerate(zip(PAIRS, native, strict=True)):
        want, _ = reference(ref, q, c, 3, True)
        got = item["answers"]
        assert [(a["answer"], a["start"], a["end"]) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
        n = len(got)
        assert [a.decode() for a in answers[k, :n]] == [a["answer"] for a in got]
        assert starts[k, :n].tolist() == [a["start"] for a in got] and ends[k, :n].tolist() == [a["end"] for a in got]
        np.testing.assert_allclose(scores[k, :n], [a["score"] for a in got], rtol=1e-6)
        assert answers[k, n:].tolist() == [b""] * (3 - n) and (starts[k, n:] == -1).all() and not scores[k, n:].any()


def test_other_routes_and_bad_requests_are_refused_in_the_native_shape(srv):
    r = srv.post("/v1/embed", {"inputs": "x"})
    assert r.status_code == 422 and "use POST /v1/answer" in r.json()["error"]["message"], r.text
    r = srv.post("/v1/tag", {"inputs": "x"})
    assert r.status_code == 422 and "question-answering model" in r.json()["error"]["message"], r.text
    for bad in ({"inputs": {"question": "q"}}, {"inputs": {"question": "q", "context": "c"}, "top_k": 0},
                {"inputs": "q"}, {"inputs": []}):
        r = srv.post("/v1/answer", bad)
        assert r.status_code in (400, 422) and r.json()["error"]["type"], (bad, r.text)
    info = srv.get("/info").json()
    assert info["model_type"] == {"question-answering": {}}


def test_huggingface_hub_question_answering_reads_the_pipelines_shape(srv, ref):
    """TEI's POST / with {question, context} inputs: transformers' question-answering pipeline's
    answer, as huggingface_hub's InferenceClient.question_answering reads it (Hugging Face
    Inference Endpoints' shape): one answer as an object, several as a list."""
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    hub = InferenceClient(model=srv.url, timeout=120)
    q, c = PAIRS[0]
    [want], _ = reference(ref, q, c, 1, False)
    got = hub.question_answering(question=q, context=c)
    assert (got.answer, got.start, got.end) == (want["answer"], want["start"], want["end"])
    assert got.score == pytest.approx(want["score"], rel=1e-3)
    want, _ = reference(ref, q, c, 3, True)
    got = hub.question_answering(question=q, context=c, top_k=3, handle_impossible_answer=True)
    assert [(a.answer, a.start, a.end) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
    q, c = LONG
    want, _ = reference(ref, q, c, 3, False, windows=(32, 8))
    got = hub.question_answering(question=q, context=c, top_k=3, doc_stride=8, max_seq_len=32)
    assert [(a.answer, a.start, a.end) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
    with pytest.raises(HfHubHTTPError, match=r"parameters\.doc_stride \(40\) is larger than max_seq_len \(32\)"):
        hub.question_answering(question=q, context=c, doc_stride=40, max_seq_len=32)
    # as the pipeline, a context past the window is read in windows of its defaults unasked:
    # min(384, max_len 64) tokens sharing min(64 // 2, 128)
    want, _ = reference(ref, q, c, 3, False, windows=(64, 32))
    got = hub.question_answering(question=q, context=c, top_k=3)
    assert [(a.answer, a.start, a.end) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]


LONG = ("who sat on the mat", " ".join(["the cat sat on the mat, and the dog jumps over the lazy fox"] * 12))


def test_doc_stride_reads_a_long_context_in_windows_as_the_pipeline(srv, ref):
    """With doc_stride (or max_seq_len), a context past max_len is read in overlapping windows
    as the pipeline's preprocess reads it, and its answers gathered from them all as its
    postprocess gathers them (the empty answer scored by the lowest window's), a short input
    beside it answered as the pipeline answers it alone; the usage counts every window's
    tokens. KServe v2's parameters answer the same."""
    q, c = LONG
    short = PAIRS[1]
    for windows, asked in (((32, 8), {"doc_stride": 8, "max_seq_len": 32}),
                           ((64, 16), {"doc_stride": 16}),  # max_seq_len: min(384, max_len 64)
                           ((24, 12), {"max_seq_len": 24})):  # doc_stride: min(24 // 2, 128)
        r = srv.post("/v1/answer", {"inputs": [{"question": q, "context": c}, {"question": short[0], "context": short[1]}],
                                    "top_k": 3, "handle_impossible_answer": True, **asked})
        assert r.status_code == 200, r.text
        for (qq, cc), item in zip([LONG, short], r.json()["data"], strict=True):
            want, _ = reference(ref, qq, cc, 3, True, windows=windows)
            got = item["answers"]
            assert [(a["answer"], a["start"], a["end"]) for a in got] == [
                (a["answer"], a["start"], a["end"]) for a in want], (windows, qq)
            np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-3, atol=1e-6)
        tok, _ = ref
        rows = tok([q, short[0]], [c, short[1]], truncation="only_second", max_length=windows[0], stride=windows[1],
                   return_overflowing_tokens=True)
        assert len(rows["input_ids"]) > 3  # the long context takes several windows
        assert r.json()["usage"]["prompt_tokens"] == sum(map(len, rows["input_ids"]))
    body = {"inputs": [{"name": "question", "shape": [1], "datatype": "BYTES", "data": [q]},
                       {"name": "context", "shape": [1], "datatype": "BYTES", "data": [c]}],
            "parameters": {"top_k": 3, "doc_stride": 8, "max_seq_len": 32}}
    r = srv.post("/v2/models/tiny-qa/infer", body)
    assert r.status_code == 200, r.text
    answers = {o["name"]: o["data"] for o in r.json()["outputs"]}["answer"]
    want, _ = reference(ref, q, c, 3, False, windows=(32, 8))
    assert answers[:len(want)] == [a["answer"] for a in want]


@pytest.mark.parametrize("asked, says", [
    ({"doc_stride": 40, "max_seq_len": 32}, "doc_stride (40) is larger than max_seq_len (32)"),
    ({"max_seq_len": 65}, "max_seq_len is 65, over this model's limit of 64 tokens"),
    ({"doc_stride": 8, "truncate": True}, "send either truncate (cut the context) or doc_stride/max_seq_len"),
    ({"doc_stride": 8, "max_seq_len": 12}, "leave its context 2 of the 12 tokens of a window, not more than doc_stride=8"),
    ({"doc_stride": 8, "attention": {"layers": [0], "heads": [0]}}, "not served with doc_stride"),
    ({"doc_stride": 0, "max_seq_len": 12}, "over the limit of 256 rows per request"),
])
def test_windows_that_cannot_be_read_are_refused_naming_the_field(srv, asked, says):
    q, c = LONG
    r = srv.post("/v1/answer", {"inputs": {"question": q, "context": c * 4}, **asked})
    assert r.status_code in (413, 422) and says in r.json()["error"]["message"], r.text
