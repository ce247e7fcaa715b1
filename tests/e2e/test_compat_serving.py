"""The serving facts other tools read, against a real `headwise serve` on the real MiniLM
package: Triton's statistics extension through tritonclient's `get_inference_statistics`,
TEI's timing headers, SageMaker's /ping and /invocations, and served-name aliases
(HEADWISE_SERVED_MODEL_NAMES) through the openai client, on every protocol's routes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import openai
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from tests.e2e.conftest import DEFAULT_NAME, REPO, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ALIAS = "text-embedding-3-small"
TIMING = ("x-compute-time", "x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time")


@pytest.fixture(scope="module")
def srv(start_server):
    aliases = f"{ALIAS}={DEFAULT_NAME}, mini={DEFAULT_NAME}"
    return start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_SERVED_MODEL_NAMES": aliases})


@pytest.fixture(scope="module")
def triton(srv):
    c = th.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    yield c
    c.close()


def ok(r):
    assert r.status_code == 200, r.text
    return r


def stats_of(client, model="", version=""):
    return client.get_inference_statistics(model, version)["model_stats"]


def test_statistics_count_what_was_served(srv, triton):
    assert "statistics" in triton.get_server_metadata()["extensions"]
    before = stats_of(triton, DEFAULT_NAME)[0]
    texts = ["a short one", "a rather longer sentence about attention heads and what they look at"]
    for _ in range(3):
        ok(srv.post("/v1/embed", {"inputs": texts}))
    assert srv.post("/v1/embed", {"inputs": ["x"], "truncate": False, "attention": {"layers": [99]}}).status_code == 422
    after = stats_of(triton, DEFAULT_NAME, "1")[0]
    assert after["name"] == DEFAULT_NAME and after["version"] == "1"
    s0, s1 = before["inference_stats"], after["inference_stats"]
    assert s1["success"]["count"] - s0["success"]["count"] == 3
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert s1[phase]["count"] - s0[phase]["count"] == 3, phase
    assert s1["compute_infer"]["ns"] > s0["compute_infer"]["ns"]
    assert s1["success"]["ns"] - s0["success"]["ns"] >= s1["compute_infer"]["ns"] - s0["compute_infer"]["ns"]
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["last_inference"] > 0
    sizes = {b["batch_size"]: b for b in after["batch_stats"]}
    assert 2 in sizes and sizes[2]["compute_infer"]["count"] >= 3
    # every model when none is named; an alias answers for its package; unknown → the error
    assert [m["name"] for m in stats_of(triton)] == [DEFAULT_NAME]
    assert stats_of(triton, ALIAS)[0]["name"] == DEFAULT_NAME
    with pytest.raises(InferenceServerException, match="no model by that name"):
        triton.get_inference_statistics("nope")
    with pytest.raises(InferenceServerException, match="no version 7"):
        triton.get_inference_statistics(DEFAULT_NAME, "7")


def test_a_refused_input_counts_as_a_failure(srv, triton):
    before = stats_of(triton, DEFAULT_NAME)[0]["inference_stats"]["fail"]["count"]
    r = srv.post("/v1/embed", {"inputs": ["word " * 2000], "truncate": False})
    assert r.status_code == 422
    after = stats_of(triton, DEFAULT_NAME)[0]["inference_stats"]["fail"]["count"]
    assert after == before + 1


@pytest.mark.parametrize(("path", "body", "chars"), [
    ("/v1/embed", {"inputs": ["hello", "world!"]}, 11),
    ("/embed", {"inputs": ["hello", "world!"]}, 11),
    ("/embed_all", {"inputs": "hello"}, 5),
    ("/", {"inputs": "hello"}, 5),
    ("/invocations", {"inputs": "hello"}, 5),
])
def test_tei_timing_headers(srv, path, body, chars):
    r = ok(srv.post(path, body))
    h = r.headers
    assert h["x-compute-type"] == "cpu"
    assert int(h["x-compute-characters"]) == chars
    n = len(body["inputs"]) if isinstance(body["inputs"], list) else 1
    assert int(h["x-compute-tokens"]) >= 3 * n  # [CLS] text [SEP]
    values = {k: int(h[k]) for k in TIMING}
    assert all(v >= 0 for v in values.values())
    assert values["x-total-time"] >= values["x-inference-time"]


def test_ping_and_invocations(srv):
    r = srv.get("/ping")
    assert r.status_code == 200 and r.content == b""
    same = ok(srv.post("/embed", {"inputs": "SageMaker calls this"})).json()
    assert ok(srv.post("/invocations", {"inputs": "SageMaker calls this"})).json() == same
    r = srv.post("/invocations", {"inputs": []})
    assert r.status_code == 400 and r.json()["error_type"] == "Empty"  # TEI's shape


def test_aliases_on_every_protocol(srv, triton):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
    ids = {m.id for m in client.models.list().data}
    assert {DEFAULT_NAME, ALIAS, "mini"} <= ids
    card = ok(srv.get(f"/v1/models/{ALIAS}")).json()
    assert card["id"] == ALIAS and card["alias_of"] == DEFAULT_NAME and card["name"] == DEFAULT_NAME
    assert "alias_of" not in ok(srv.get(f"/v1/models/{DEFAULT_NAME}")).json()

    text = "aliases name the same package"
    by_alias = client.embeddings.create(model=ALIAS, input=text).data[0].embedding
    native = ok(srv.post("/v1/embed", {"inputs": text, "model": "mini"})).json()["data"][0]["embedding"]
    tei = ok(srv.post("/embed", {"inputs": text, "model": ALIAS})).json()[0]
    assert np.allclose(by_alias, native, atol=1e-6) and np.allclose(tei, native, atol=1e-6)
    assert triton.is_model_ready(ALIAS)
    assert triton.get_model_metadata(ALIAS)["name"] == DEFAULT_NAME
    with pytest.raises(openai.NotFoundError, match=ALIAS):  # the message lists aliases too
        client.embeddings.create(model="nope", input=text)


@pytest.mark.parametrize(("value", "says"), [
    ("x=nope", "which is not served"),
    (f"{DEFAULT_NAME}={DEFAULT_NAME}", "already a served package's name"),
    ("x", "is not alias=package"),
    (f"a={DEFAULT_NAME},a={DEFAULT_NAME}", "given twice"),  # issue 40, item 4: the same pair twice started
])
def test_a_bad_alias_stops_start_up(default_package, value, says):
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(default_package), "--port", "0"],
                       cwd=REPO, env=clean_env(HEADWISE_SERVED_MODEL_NAMES=value), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    assert "HEADWISE_SERVED_MODEL_NAMES" in r.stderr and says in r.stderr and "Traceback" not in r.stderr
