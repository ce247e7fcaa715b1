"""One writer per (protocol, operation) (issue 39, item 1): every JSON answer to an engine call
goes out through responses.answer, which checks the writer's bound against
HEADWISE_MAX_RESPONSE_BYTES, reserves it and serialises (JSON, or the body a raw writer made:
KServe's tensors); no router writes an answer or checks its bound after inference itself."""

import ast
import asyncio
import types
from pathlib import Path

import orjson
import pytest

from headwise.service.api import native, responses
from headwise.service.api.compat import cohere, kserve, openai, rerank, tei, token_pipeline, vllm
from headwise.service.api.writer import Raw, Writer, counted
from headwise.service.engine.budget import ResponseBudget
from headwise.service.errors import TooLarge

ROUTERS = Path(responses.__file__).parent / "routers"
MODULES = (native, openai, tei, token_pipeline, cohere, rerank, vllm, kserve)


def _called(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {(c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", ""))
            for c in ast.walk(tree) if isinstance(c, ast.Call)}


def test_no_router_serialises_or_bounds_an_answer_itself():
    # generation's bound is reserved when it is admitted, before any step (Engine.generate), and
    # its answer may be a stream of events: it sends its own
    routers = [p for p in ROUTERS.glob("*.py") if p.name != "generate.py"]
    assert len(routers) > 10
    writes = {"budgeted_json", "budgeted_raw", "BudgetedResponse", "reserve"}
    assert {p.name: sorted(writes & _called(p)) for p in routers if writes & _called(p)} == {}
    # a route checks a bound itself only before inference: Cohere's echoed texts, a classifier's tensors
    checks = {p.name for p in routers if "check_response_bytes" in _called(p)}
    assert checks <= {"cohere_embed.py", "cohere_rerank.py", "kserve_classify.py"}


def test_every_protocol_module_declares_its_writers():
    writers = {f"{m.__name__.rsplit('.', 1)[-1]}.{k}" for m in MODULES for k, v in vars(m).items()
               if isinstance(v, Writer)}
    assert writers >= {"native.EMBED", "native.RERANK", "native.PREDICT", "native.TAG", "native.SIMILARITY",
                       "native.OCCLUSION", "native.HEAD_IMPORTANCE", "openai.EMBEDDINGS", "tei.EMBED",
                       "tei.EMBED_ALL", "tei.SIMILARITY", "tei.RERANK", "tei.PREDICT", "tei.TOKENIZE", "tei.DECODE",
                       "token_pipeline.ENTITIES", "cohere.EMBED", "rerank.JINA_RERANK", "rerank.COHERE_RERANK",
                       "vllm.SCORE", "vllm.CLASSIFY", "kserve.TENSORS", "kserve.EMBEDDING", "kserve.TOKENS"}


def _engine(cap: int, budget: int = 1 << 20):
    return types.SimpleNamespace(settings=types.SimpleNamespace(max_response_bytes=cap),
                                 responses=ResponseBudget(budget))


def test_answer_checks_the_bound_with_the_writers_advice_before_building():
    built = []
    w = Writer(lambda r, q: r["n"] + q, lambda r, q: built.append(1) or {"n": r["n"]}, "ask for less")
    with pytest.raises(TooLarge, match=r"takes up to 101 bytes, over HEADWISE_MAX_RESPONSE_BYTES \(100\); ask for less"):
        asyncio.run(responses.answer(_engine(100), w, {"n": 100}, 1))
    assert built == []


def test_answer_reserves_the_bound_until_sent_and_writes_the_payload():
    engine = _engine(1000, budget=1000)
    w = Writer(counted, lambda r, q: {"model": r.model, "asked": q})
    result = types.SimpleNamespace(answer_bytes=600, model="m")
    response = asyncio.run(responses.answer(engine, w, result, "x"))
    assert orjson.loads(response.body) == {"model": "m", "asked": "x"}
    assert engine.responses.used == 600  # held by the response until its last byte is sent
    response.reservation.release()
    assert engine.responses.used == 0


def test_a_raw_writers_body_goes_out_as_it_wrote_it():
    engine = _engine(1000)
    w = Writer(lambda r, q: 10, lambda r, q: Raw(b"head" + r, "application/octet-stream", ((b"x-len", b"4"),)),
               raw=True)
    response = asyncio.run(responses.answer(engine, w, b"tail"))
    assert response.body == b"headtail" and response.media_type == "application/octet-stream"
    assert (b"x-len", b"4") in response.raw_headers and engine.responses.used == 10
    response.reservation.release()


def test_the_sparse_writer_bounds_what_it_writes():
    """/v1/embed_sparse's bound counts the entries the run found (the engine could not before),
    with decode their vocabulary entries too, at worst case: never under the bytes written."""
    import numpy as np

    from headwise.service.api.routers import embed_sparse
    from headwise.service.api.serialize import dumps_chunks
    from headwise.service.engine.heads.sparse import SparseVector

    ids = np.array([0, 9, 99_999, 2_000_000])
    x = SparseVector(None, ids, np.array([1e-7, 3.4028235e38, 0.1, 1.0], np.float32), None)
    result = types.SimpleNamespace(model="m", data=[x, x], usage={"prompt_tokens": 9, "total_tokens": 9},
                                   answer_bytes=2 * 64)
    for decode in (False, True):
        q = (decode, lambda i: None if i == 9 else '"\\' * 20)
        written = sum(map(len, dumps_chunks(embed_sparse.VECTORS.build(result, q))))
        assert written <= embed_sparse.VECTORS.bound(result, q)
