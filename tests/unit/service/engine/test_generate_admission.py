
"""A generation request's prompt is tokenised and checked on the engine's tokenizer pool, never
on the event loop, at every size; its Sequence (result future, event queue) belongs to the loop
whatever the prompt's length."""

import asyncio
import threading
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from headwise.service.api.sizes import JSON
from headwise.service.engine import Engine
from headwise.service.engine.generation.runtime import GenerativeRuntime
from headwise.service.engine.generation.sequence import GenerateInput
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import Validation
from headwise.service.metrics import Metrics
from headwise.service.settings import Settings
from tests.fixtures.tiny_generative import gpt2_tokenizer


class Taker:
    def __init__(self):
        self.taken = []

    def submit(self, seq):
        self.taken.append(seq)

    async def close(self, timeout):
        pass


def runtime(tmp_path, max_len: int = 20_000) -> tuple[Engine, GenerativeRuntime, list[str]]:
    gpt2_tokenizer(tmp_path)
    settings, metrics = Settings(max_prompt_tokens=max_len), Metrics()
    rt = object.__new__(GenerativeRuntime)  # no graphs: only admission is under test
    rt.package = SimpleNamespace(name="g", architecture="decoder", max_len=max_len, version="1")
    rt.settings, rt.metrics, rt.measure = settings, metrics, JSON
    rt.tokenizer = TextTokenizer(tmp_path / "tokenizer.json", max_len)
    rt.decoder = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    rt.special, rt.suppress_ids, rt.d_head = {"eos": 0}, (), 8
    rt.backend, rt.scheduler, rt.ready = None, Taker(), True
    threads = []
    encode = rt.tokenizer.encode_unchecked

    def recording(*a, **kw):
        threads.append(threading.current_thread().name)
        return encode(*a, **kw)

    rt.tokenizer.encode_unchecked = recording
    engine = Engine(settings, metrics, measure=JSON)
    engine.models[rt.name], engine.ready = rt, True
    return engine, rt, threads


@pytest.mark.parametrize("size", [10, 4000, 4097, 9000])
@pytest.mark.parametrize("stream", [False, True])
def test_every_prompt_is_tokenised_on_the_tokenizer_pool(tmp_path, size, stream):
    engine, rt, threads = runtime(tmp_path)

    async def go():
        gen = await engine.generate(rt, GenerateInput(prompt="a" * size, stream=stream))
        loop = asyncio.get_running_loop()
        assert gen.seq.result is not None and gen.seq.result.get_loop() is loop
        assert (gen.seq.events is not None) == stream
        gen.reservation.release()
        return gen

    gen = asyncio.run(go())
    assert len(threads) == 1 and threads[0].startswith("headwise-tokenize")
    assert rt.scheduler.taken == [gen.seq] and len(gen.seq.prompt_ids) == len(gen.seq.prompt_tokens) > 0
    assert engine.metrics.tokenize_duration.labels(model="g")._sum.get() > 0


def test_a_prompt_over_the_limit_is_refused_from_the_pool(tmp_path):
    engine, rt, threads = runtime(tmp_path, max_len=8)

    with pytest.raises(Validation, match=r"prompt has .* tokens or more, over the limit of 8"):
        asyncio.run(engine.generate(rt, GenerateInput(prompt="a b c d e f g h i j k")))
    assert threads and threads[0].startswith("headwise-tokenize") and rt.scheduler.taken == []
