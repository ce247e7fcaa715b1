"""Head drift (HEADWISE_ATTENTION_SAMPLE): a fraction of plain embedding requests also runs
the attention graph, after their answer, off their path and after plain work, and each head's
attention entropy and its share of attention on the special tokens go to two Prometheus
histograms (docs/metrics.md; the dashboard's "Head drift" row and its alert).

Per sampled input of T tokens and per (layer, head), from its weights p [T, T] over its own
keys (query rows i, keys j, both over the input's T tokens):

- entropy: the mean over rows of −Σ_j p_ij ln p_ij / ln T, in nats over ln T: 0 when every
  row attends to one key, 1 when every row is uniform over the input (T ≥ 2; clipped to 0..1);
- special share: the mean over rows of Σ_{j ∈ S} p_ij, S the positions of the special tokens
  the tokenizer added ([CLS] first and [SEP] last for BERT packages).

Sampling off (0), the engine holds no DriftSampler, nothing is registered and a request costs
one `if`. On, a request costs one random draw; a drawn one puts its inputs (its first
`max_pending` at most) in a buffer and returns at once. The buffer holds at most `max_pending`
inputs: a request drawn when it is full is dropped and counted.

The buffer is run as one batch once it holds `batch` inputs, or its oldest has waited
`flush_after` seconds: one graph run of several inputs costs a CPU less per input than one run
each. It runs in chunks within the attention batcher's limits and the analytics batch size
(HEADWISE_ANALYTICS_BATCH_TOKENS), unrecorded by the inference metrics. Before each chunk it
waits until the model's plain batchers are all idle, then runs the chunk on the embed batcher's
own thread, between two of its batches, as analytics do where they share it: beside plain
batches, on a thread of its own, the attention session's pool threads and the plain session's
fought over the same cores, and a sample cost about 6 times as much (bench/results/drift-cost.md).
The entropies and the histograms are done on the analytics post-processing thread (nice 19).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from headwise.service.engine.batching import Batcher, Entry, Job
from headwise.service.engine.heads.embedding import token_ids
from headwise.service.engine.params import Embedded, EmbedParams
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.engine.work import Inputs, Limits
from headwise.service.metrics import Metrics

log = logging.getLogger("headwise.service")
T = TypeVar("T")

MAX_PENDING = 64  # inputs of drawn requests waiting to run
BATCH = 8  # inputs run together once that many wait
FLUSH_AFTER_S = 5.0  # or once the oldest has waited this long


def head_entropy(weights: np.ndarray) -> np.ndarray:
    """[..., T, T] attention rows over an input's own T ≥ 2 keys → [...]: the mean over query
    rows of −Σ p ln p / ln T, clipped to 0..1."""
    p = weights.astype(np.float64)
    plogp = p * np.log(np.where(p > 0, p, 1.0))
    return np.clip(-plogp.sum(-1).mean(-1) / np.log(p.shape[-1]), 0.0, 1.0)


def special_share(weights: np.ndarray, positions: list[int]) -> np.ndarray:
    """[..., T, T] → [...]: the mean over query rows of the weight on `positions`, clipped to 0..1."""
    if not positions:
        return np.zeros(weights.shape[:-2])
    share = weights[..., positions].astype(np.float64).sum(-1).mean(-1)
    return np.clip(share, 0.0, 1.0)


def special_positions(enc: Encoded, special: frozenset[int]) -> list[int]:
    """The positions of the tokens the tokenizer added: a pair's by its segments (-1), a
    single text's first and last when they are special tokens ([CLS] and [SEP])."""
    if enc.segments is not None:
        return np.flatnonzero(enc.segments < 0).tolist()
    t = enc.length
    return [p for p in dict.fromkeys((0, t - 1)) if int(enc.ids[p]) in special]


async def after_plain_work(batchers: Iterable[Batcher]) -> None:
    """Until every one of `batchers` is idle at the same moment (as Batcher._give_way)."""
    batchers = list(batchers)
    while not all(b.idle for b in batchers):
        for b in batchers:
            await b.wait_idle()


def chunks(items: list[tuple[Encoded, T]], limits: Limits, padded_to) -> Iterator[tuple[list[tuple[Encoded, T]], int]]:
    """(input, tag) pairs, longest input first, in chunks the attention batcher could run
    (`limits`), each padded to `padded_to(its longest)`."""
    order = sorted(items, key=lambda x: x[0].length, reverse=True)
    i = 0
    while i < len(order):
        padded = padded_to(order[i][0].length)
        n = limits.max_rows(padded)
        yield order[i:i + n], padded
        i += n


class _Series:
    """One model's children of the head-drift metrics, looked up once."""

    def __init__(self, metrics: Metrics, model: str, n_layers: int, n_heads: int):
        def grid(hist):
            return [[hist.labels(model=model, layer=str(layer), head=str(head)) for head in range(n_heads)]
                    for layer in range(n_layers)]

        self.entropy, self.share = grid(metrics.head_entropy), grid(metrics.head_special_share)
        self.outcomes = {o: metrics.head_samples.labels(model=model, outcome=o)
                         for o in ("measured", "dropped", "failed")}

    def observe(self, entropy: np.ndarray, share: np.ndarray) -> None:
        for hists, values in ((self.entropy, entropy), (self.share, share)):
            for row, layer in zip(hists, values.tolist(), strict=True):
                for child, v in zip(row, layer, strict=True):
                    child.observe(v)


@dataclass(eq=False)
class _Drawn:
    """One drawn request: its model, the inputs to measure, when it was drawn."""

    rt: Any
    encs: list[Encoded]
    series: _Series
    at: float


class DriftSampler:
    """Owned by the Engine when HEADWISE_ATTENTION_SAMPLE > 0 (`rate`); registers the
    head-drift metrics. `pool`: the thread the samples' weights are read on (the engine's
    analytics post-processing thread, stopped with it)."""

    def __init__(self, rate: float, metrics: Metrics, pool: ThreadPoolExecutor, max_pending: int = MAX_PENDING,
                 batch: int = BATCH, flush_after: float = FLUSH_AFTER_S, seed: int | None = None):
        metrics.enable_head_drift()
        self.rate, self.metrics, self.pool = rate, metrics, pool
        self.max_pending, self.batch, self.flush_after = max_pending, batch, flush_after
        self._draw = random.Random(seed).random
        self._pending: deque[_Drawn] = deque()
        self.pending = 0  # inputs in the buffer
        self.running = 0  # inputs taken from it and not yet observed
        self._full = asyncio.Event()  # `batch` inputs wait
        self._task: asyncio.Task | None = None  # the loop that runs the buffer, while it holds any
        self._series: dict[str, _Series] = {}

    def offer(self, rt, inputs: Inputs, params: EmbedParams, data: list[Embedded]) -> None:
        """After a request's answer (event loop): a plain embedding of texts is drawn with
        probability `rate`, and its inputs buffered to be measured later. Returns at once."""
        if (self._draw() >= self.rate or params.attention is not None or params.analysis or token_ids(inputs)
                or not params.special_tokens):  # its heads' special share would read 0: not the traffic's
            return
        if "attention" not in rt.batchers:  # a package without the attention variant
            return
        series = self._series_of(rt)
        encs = [d.encoding for d in data[:self.max_pending] if d.encoding.length >= 2]
        if not encs:
            return
        if self.pending + len(encs) > self.max_pending:
            series.outcomes["dropped"].inc()
            return
        self._pending.append(_Drawn(rt, encs, series, time.monotonic()))
        self.pending += len(encs)
        if self.pending >= self.batch:
            self._full.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Run the buffer, a model's drawn requests at a time, until it is empty."""
        while self._pending:
            wait = self._pending[0].at + self.flush_after - time.monotonic()
            if self.pending < self.batch and wait > 0:
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), wait)
                continue
            rt = self._pending[0].rt
            taken = [d for d in self._pending if d.rt is rt]
            self._pending = deque(d for d in self._pending if d.rt is not rt)
            n = sum(len(d.encs) for d in taken)
            self.pending -= n
            self.running += n
            try:
                await self._measure(rt, taken)
            finally:
                self.running -= n

    async def _measure(self, rt, taken: list[_Drawn]) -> None:
        loop = asyncio.get_running_loop()
        try:
            for chunk, padded in self.cut(rt, [(e, d.series) for d in taken for e in d.encs]):
                await after_plain_work(rt.batchers.values())
                try:  # between two plain batches, on their thread: never beside one, on the same cores
                    run = loop.run_in_executor(rt.batchers["embed"].executor, self.infer, rt,
                                               [e for e, _ in chunk], padded)
                except RuntimeError:  # the thread is stopped: the engine is closing
                    return
                weights = await run
                await loop.run_in_executor(self.pool, self.observe, weights, chunk, rt.tokenizer)
            outcome = "measured"
        except Exception as e:
            outcome = "failed"
            log.warning("head drift: a sampled run of model %s failed: %r", rt.name, e)
        for d in taken:
            d.series.outcomes[outcome].inc()

    def _series_of(self, rt) -> _Series:
        s = self._series.get(rt.name)
        if s is None:
            pkg = rt.package
            s = self._series[rt.name] = _Series(self.metrics, rt.name, pkg.n_layers, pkg.n_heads)
        return s

    @staticmethod
    def cut(rt, items: list[tuple[Encoded, _Series]]) -> Iterator[tuple[list[tuple[Encoded, _Series]], int]]:
        """The inputs in chunks the attention batcher could run and an analytics batch holds,
        padded as the attention batcher would."""
        batcher, att, small = rt.batchers["attention"], rt.limits("attention"), rt.limits("analytics")
        limits = Limits(min(att.max_batch_tokens, small.max_batch_tokens), att.max_batch_size, 0.0, 0,
                        att.cell_bytes, att.budget_bytes)

        def padded_to(n: int) -> int:
            return batcher.bucket(n) if batcher.pad_to_bucket else n

        return chunks(items, limits, padded_to)

    @staticmethod
    def infer(rt, encs: list[Encoded], padded: int) -> np.ndarray:
        """Inference thread: one chunk through the attention graph → its [B, L, H, P, P] weights."""
        job = Job(len(encs))
        entries = [Entry(job, i, e.ids, e.type_ids, e) for i, e in enumerate(encs)]
        out, _ = rt.run("attention", entries, padded, ["attentions"], record=False)
        return out["attentions"]

    @staticmethod
    def observe(weights: np.ndarray, chunk: list[tuple[Encoded, _Series]], tokenizer: TextTokenizer) -> None:
        """Sample thread: each input's entropy and special share per head into its model's histograms."""
        special = tokenizer.special_ids  # read from the tokenizer's JSON once, here rather than on the loop
        for i, (e, series) in enumerate(chunk):
            t = e.length
            w = weights[i, :, :, :t, :t]
            series.observe(head_entropy(w), special_share(w, special_positions(e, special)))
