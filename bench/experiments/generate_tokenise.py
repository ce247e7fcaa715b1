"""How long a POST /v1/generate request's admission (`Engine.generate`: checks, tokenising the
prompt, building its Sequence, reserving its answer) holds the event loop, at a few prompt
sizes. Measured as the event-loop thread's CPU time across the call (`time.thread_time` on the
loop's thread: what the loop spent on this request, not the time it waited for a pool; the
request's objects are kept alive and the cyclic collector is off, so freeing them is not
counted), and the call's wall time.

    .venv/bin/python -m bench.experiments.generate_tokenise [--sizes 100,1000,4000,4097,16000] [--reps 200]

The tokenizer is a GPT-2-like byte-level BPE (vocabulary 8,000) trained here on docs/*.md, so
there are about as many tokens per character as GPT-2 makes of English prose. No graph runs:
the scheduler only takes the request.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from headwise.service.api.sizes import JSON
from headwise.service.engine import Engine
from headwise.service.engine.generation.runtime import GenerativeRuntime
from headwise.service.engine.generation.sequence import GenerateInput
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.metrics import Metrics
from headwise.service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def corpus() -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def tokenizer_file(folder: Path, text: str) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text.splitlines(), trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


class Taker:
    """A scheduler that takes every request and runs nothing."""

    def submit(self, seq) -> None:
        pass

    async def close(self, timeout: float) -> None:
        pass


def runtime(file: Path, settings: Settings, metrics: Metrics) -> GenerativeRuntime:
    rt = object.__new__(GenerativeRuntime)  # no graphs: only admission is measured
    rt.package = SimpleNamespace(name="bench-gpt2", architecture="decoder", max_len=1 << 16, version="1")
    rt.settings, rt.metrics = settings, metrics
    rt.tokenizer = TextTokenizer(file, rt.package.max_len)
    rt.decoder = Tokenizer.from_file(str(file))
    rt.special, rt.suppress_ids, rt.d_head = {"eos": 0}, (), 8
    rt.backend, rt.scheduler, rt.ready = None, Taker(), True
    return rt


async def measure(engine: Engine, rt: GenerativeRuntime, text: str, reps: int) -> tuple[list, list, int]:
    held, wall, n, kept = [], [], 0, []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        gen = await engine.generate(rt, GenerateInput(prompt=text, max_new_tokens=1))
        held.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
        gen.reservation.release()
        n = len(gen.seq.prompt_ids)
        kept.append(gen)  # freed after the loop: a request's objects die when it has been answered
        del gen
    return held, wall, n


async def main(sizes: list[int], reps: int) -> None:
    text = corpus()
    with tempfile.TemporaryDirectory() as d:
        file = tokenizer_file(Path(d), text)
        settings, metrics = Settings(), Metrics()
        engine = Engine(settings, metrics, measure=JSON)
        rt = runtime(file, settings, metrics)
        engine.models[rt.name] = rt
        engine.ready = True
        print(f"{'chars':>6} {'tokens':>6}  {'loop held, median':>18} {'p90':>9}  {'wall, median':>13}")
        for size in sizes:
            prompt = (text * (size // len(text) + 1))[len(text) // 3:][:size]
            await measure(engine, rt, prompt, 5)  # warm
            gc.collect()
            gc.disable()  # a collection would land on whichever thread allocates: noise here
            try:
                held, wall, n = await measure(engine, rt, prompt, reps)
            finally:
                gc.enable()
            p90 = statistics.quantiles(held, n=10)[-1]
            print(f"{size:>6} {n:>6}  {statistics.median(held) * 1e6:>15.0f} µs {p90 * 1e6:>6.0f} µs"
                  f"  {statistics.median(wall) * 1e6:>10.0f} µs")
        await engine.close(1.0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,4000,4097,16000")
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    asyncio.run(main([int(s) for s in a.sizes.split(",")], a.reps))
