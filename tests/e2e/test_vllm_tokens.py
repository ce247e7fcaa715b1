"""vLLM's tokenizer routes against a real `headwise serve` (in process, and with the engine in
its own process) on the real all-MiniLM-L6-v2 package: vLLM's /tokenize body (`prompt`) on
TEI's /tokenize answers vLLM's shape, its ids and token strings equal transformers' tokenizer's
(with and without special tokens, and a prompt longer than max_len, not cut); TEI's body on the
same route is unchanged; /detokenize equals the tokenizer's decode with its special tokens; bad
bodies are refused naming vLLM's fields."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import ENGINE_MODES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# longer than max_len, and than the first prefix /v1/embed reads (8 characters per token of max_len)
PROMPTS = ["Hello world", "naïve café — 東京 🙂", "the unaffable cat sat on the mat " * 100, "Zoë " * 1000,
           " ".join(f"zed{i}" for i in range(400)), ""]


@pytest.fixture(scope="module", params=list(ENGINE_MODES))
def srv(request, start_server, default_package):
    return start_server(models=default_package, env=ENGINE_MODES[request.param])


@pytest.fixture(scope="module")
def tok(default_package):
    from transformers import AutoTokenizer

    from headwise.model.sentence import default_checkpoint

    return AutoTokenizer.from_pretrained(str(default_checkpoint()))


def ok(r) -> dict:
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("special", [True, False])
def test_tokenize_equals_the_tokenizer(srv, tok, special):
    for prompt in PROMPTS:
        got = ok(srv.post("/tokenize", {"prompt": prompt, "add_special_tokens": special, "return_token_strs": True}))
        ids = tok(prompt, add_special_tokens=special)["input_ids"]
        assert got == {"count": len(ids), "max_model_len": 256, "tokens": ids,
                       "token_strs": tok.convert_ids_to_tokens(ids)}, prompt
    assert ok(srv.post("/tokenize", {"prompt": PROMPTS[2]}))["count"] > 256  # not cut at max_len
    assert ok(srv.post("/tokenize", {"model": "all-minilm-l6-v2", "prompt": "hi"}))["token_strs"] is None


def test_teis_body_on_the_same_route_is_unchanged(srv, tok):
    got = ok(srv.post("/tokenize", {"inputs": "Hello world"}))
    assert [t["id"] for t in got[0]] == [101, 7592, 2088, 102] and got[0][1]["text"] == "Hello"
    got = ok(srv.post("/tokenize", {"inputs": PROMPTS[2:5]}))  # every token of a long text too
    assert [[t["id"] for t in x] for x in got] == [tok(p)["input_ids"] for p in PROMPTS[2:5]]


def test_detokenize_equals_the_tokenizers_decode(srv, tok):
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        assert ok(srv.post("/detokenize", {"tokens": ids})) == {"prompt": tok.decode(ids)}
    assert ok(srv.post("/detokenize", {"tokens": []})) == {"prompt": ""}


def test_bad_bodies_are_refused_naming_the_field(srv):
    r = srv.post("/tokenize", {"prompt": "a", "messages": []})  # vLLM's chat form: not served
    assert r.status_code == 422 and r.json()["error"].startswith("messages"), r.text
    r = srv.post("/tokenize", {"prompt": "x" * 100_001})
    assert r.status_code == 413 and r.json()["error"].startswith("prompt"), r.text
    r = srv.post("/detokenize", {"tokens": [101, 10 ** 9]})
    assert r.status_code == 422 and r.json()["error"]["param"] == "tokens", r.text
    assert r.json()["error"]["message"].startswith("tokens[1]: token ids must be in 0..30521")
    r = srv.post("/detokenize", {"model": "nope", "tokens": [101]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model", r.text
