"""The overlapped pipeline (HEADWISE_PIPELINE=on) through the real onnxruntime backend on a
tiny random package: many concurrent /v1/embed-shaped requests of mixed lengths each get the
answer they get alone (batch invariance), the same as with the pipeline off; answers that
carry tokens and offsets get them, built on the tokenising thread."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from headwise.service.api.sizes import JSON
from headwise.service.engine import Engine
from headwise.service.engine.params import EmbedParams
from headwise.service.metrics import Metrics
from headwise.service.settings import Settings

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "quick", "brown", "foxes", "jumped", "over", "lazy", "dogs", "near", "rivers"]


def texts(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[" ".join(rng.choices(WORDS, k=rng.randint(1, 40))) for _ in range(rng.randint(1, 6))] for _ in range(n)]


def serve(models, pipeline: str, requests: list[list[str]], params: EmbedParams):
    """Every request's embeddings, all sent at once, then each input alone."""
    async def go():
        engine = Engine(Settings(models_dir=models, provider="cpu", pipeline=pipeline, max_wait_ms=1),
                        Metrics(gpu=None), measure=JSON)
        engine.load_packages()
        engine._prepare()
        engine.start()
        rt = engine.get(None)
        try:
            together = await asyncio.gather(*(engine.embed(rt, r, params) for r in requests))
            alone = [[(await engine.embed(rt, [t], params)).data[0] for t in r] for r in requests]
            return together, alone, rt.batchers["embed"].overlap
        finally:
            await engine.close()
    return asyncio.run(go())


@pytest.mark.parametrize("pipeline", ["on", "off"])
def test_concurrent_requests_get_their_own_answers(tiny_package, pipeline):
    requests = texts(40, seed=5)
    together, alone, overlap = serve(tiny_package.parent, pipeline, requests, EmbedParams(token_strings=True))
    assert overlap is (pipeline == "on")
    for res, solo, inputs in zip(together, alone, requests, strict=True):
        assert len(res.data) == len(inputs)
        for got, ref in zip(res.data, solo, strict=True):
            np.testing.assert_allclose(got.sentence, ref.sentence, atol=1e-5)
            assert got.encoding.tokens == ref.encoding.tokens and got.encoding.offsets == ref.encoding.offsets
            assert got.encoding._source is None  # built where it was tokenised


def test_plain_embeddings_leave_token_strings_unbuilt(tiny_package):
    """`tokenizers`' strings and offsets are built when read (headwise.wordpiece, which reads
    printable ASCII, makes them as it reads: the accents keep these texts from it)."""
    short = [["the café sat", "a dög"], ["quick brown foxes jumped é"], ["near rivers é"]]  # none cut at max_len
    together, _, _ = serve(tiny_package.parent, "on", short, EmbedParams())
    encs = [d.encoding for r in together for d in r.data]
    assert all(e._tokens is None for e in encs)  # never read: never built
    assert all(e.tokens and len(e.tokens) == e.length for e in encs)  # still there when read
    ascii_ones, _, _ = serve(tiny_package.parent, "on", [["the cat sat"]], EmbedParams())
    assert ascii_ones[0].data[0].encoding._source is None  # read by headwise.wordpiece: nothing held


def test_a_truncated_long_input_keeps_no_overflow_alive(tiny_package):
    """Lazy strings hold the tokenizer's encoding: only where nothing overflowed, since a cut
    text's encoding keeps every overflowing piece."""
    from headwise.service.engine.tokenizer import TextTokenizer

    tok = TextTokenizer(next(tiny_package.glob("tokenizer.json")), max_len=16)
    short, long = tok.encode_unchecked(["the café sat", "the café sat on the mat " * 40], truncate=True, lazy=True)
    assert short._source is not None and short._tokens is None
    assert long._source is None and long.length == 16
