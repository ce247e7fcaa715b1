"""A served encoder model: its tokenizer, backend, one batcher per variant and its head
(service.engine.heads: embeddings, logits for classification, or per-token logits for tagging); it turns a batch of
tokenised inputs into per-input answers on the batcher's inference thread."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np

from headwise.service import tracing
from headwise.service.backends.onnxruntime import LOOK_INSIDE, Backend, inside_graph, metric_variant
from headwise.service.cpu import ANALYTICS_NICENESS
from headwise.service.engine import traced
from headwise.service.engine.batching import Batcher, Entry, Job, Limits
from headwise.service.engine.faults import inject_fault, unlinked
from headwise.service.engine.feeds import batch_feeds
from headwise.service.engine.heads import Head, head_for
from headwise.service.engine.heads.embedding import EmbeddingHead
from headwise.service.engine.internals import Ablation
from headwise.service.engine.lane import Lane, overlap, shared_queue
from headwise.service.engine.params import AttentionSpec, Read, RequestParams
from headwise.service.engine.runtime import Capability, base_card
from headwise.service.engine.size import Measure
from headwise.service.engine.stats import ModelStats, Timing
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.engine.work import Inputs, Outcome, length_buckets
from headwise.service.errors import TooLarge, Validation
from headwise.service.metrics import Metrics, ModelSeries, QueueHooks
from headwise.service.package import ModelPackage
from headwise.service.settings import Settings

log = logging.getLogger("headwise.service")

BackendFactory = Callable[[ModelPackage, Settings], Backend]
TOO_LARGE = ("ask for fewer inputs, layers or heads, top-k or base64 attention, pooled or fewer hidden states, "
             "or sentence embeddings")
REEXPORT = "packages exported since 2026-11-24 have it: run headwise export again"


class EncoderRuntime:
    def __init__(self, package: ModelPackage, settings: Settings, metrics: Metrics, measure: Measure,
                 head: Head | None = None):
        self.package, self.name = package, package.name
        self.settings, self.metrics = settings, metrics
        self.measure = measure  # what an answer takes as written (service.api.sizes.JSON)
        self.tokenizer = TextTokenizer(package.tokenizer_file, package.max_len)
        self.head = head if head is not None else head_for(package, self.tokenizer)
        self.capabilities = self.head.capabilities | {Capability.ANALYSE}  # any head: its analytics batcher
        self.described, self.use = self.head.described, self.head.use
        self.series = ModelSeries(metrics, package.name)
        self.stats = ModelStats()
        self.buckets = length_buckets(package.max_len)
        att = package.variants.get(inside_graph(package.variants, settings.analysis) or "")
        self._f16_attention = att is not None and "attentions_f16" in att.outputs  # packages since 2026-11
        self.backend: Backend | None = None
        self.batchers: dict[str, Batcher] = {}  # plain work: role → its batcher
        self.analytics: Batcher | None = None  # analytics rows (run_encoded), after plain work
        self.lane = Lane(self)  # the loops that drive each batcher
        self.ready = False

    @property
    def max_batch_tokens(self) -> int:
        """Its batchers' own limit: on CPU the smaller of two settings (known once loaded)."""
        return self.limits("embed").max_batch_tokens if self.backend is not None else self.settings.max_batch_tokens

    def card(self) -> dict:
        p, b = self.package, self.backend
        return {**base_card(p, b, self.ready, lambda name: b is not None and name in b.variants.values()),
                "pooling": p.pooling, "normalize": p.normalize, **self.head.card(),
                "attention": self.serves("attention")}

    def serves(self, role: str) -> bool:
        """Whether the server answers `role` ("attention", or "analysis": hidden states and
        removed heads) for this model: its package has the graph, and HEADWISE_ANALYSIS is not off."""
        graph = inside_graph(self.package.variants, self.settings.analysis)
        return graph is not None and (role == "attention" or graph == "analysis")

    def attention_spec(self, layers, heads, **how) -> AttentionSpec:
        """Raises Validation for indices out of range."""
        return AttentionSpec.select(self.package.n_layers, self.package.n_heads, layers, heads, **how)

    # -- the operations (event loop; the engine has checked the capability) -------------------
    async def submit(self, inputs: Inputs, params: RequestParams,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                     field: str = "inputs") -> tuple[list, int, Timing]:
        """One job of `inputs` (the request's `field`) through the batcher `params` ask for
        (`_batcher`), tokenised on its thread together with whatever else is waiting → (each
        input's answer, the bytes the engine's Measure says the answer takes, where its time
        went); counts the attention returned and its statistics."""
        batcher = self._batcher(params)
        job = Job(len(inputs), inputs=inputs, params=params, inputs_field=field, is_disconnected=is_disconnected,
                  trace=tracing.current())
        data = await self._answered(batcher, job)
        spec = params.attention
        if spec is not None:
            self.series.attention_bytes.inc(sum(self.head.returned_bytes(spec, d.encoding) for d in data))
            if spec.aggregate != "none":
                self.series.aggregate(spec.aggregate).inc()
        return data, job.answer_bytes, job.timing

    async def _answered(self, batcher: Batcher, job: Job, entries: list[Entry] | None = None) -> list:
        """A plain job's answers through `batcher`, counted in the model's request statistics."""
        try:
            data = await batcher.submit(job, entries)
        except Exception:
            if job.enqueued_at:  # queued, then failed (a refused input, a failed batch, a disconnect)
                self.stats.request(None, time.perf_counter() - job.enqueued_at)
            raise
        self.stats.request(job.timing, time.perf_counter() - job.enqueued_at)
        return data

    def _batcher(self, params: RequestParams) -> Batcher:
        """The batcher a plain request's `params` ask for: the analysis variant's for hidden
        states or removed heads, else the attention variant's when they ask for attention."""
        role = "analysis" if params.analysis else "attention" if params.attention is not None else "embed"
        if (batcher := self.batchers.get(role)) is not None:
            return batcher
        raise self._no_analysis("attention needs" if role == "attention" else "hidden states and removed heads need")

    async def run_encoded(self, encs: list[Encoded], params: RequestParams,
                          holes: list[tuple[int, ...]] | None = None,
                          is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                          ablations: list[Ablation | None] | None = None, plain: bool = False) -> list:
        """Analytics rows: already tokenised inputs through the analytics batcher (after plain
        work), one entry each; `holes[i]` masks those positions of input i out (attention_mask
        0), `ablations[i]` removes those heads of input i (head importance). Rows run on the
        served fast graph, but a batch with holes or removed heads on the analysis graph: the
        fused graphs read attention_mask as each row's length (right padding), so a hole inside
        an input would not be masked there. `plain`: a plain request's rows (a context's
        windows), through `submit`'s batcher. The caller has checked max_len and the response
        bound, and admitted the rows' tokens."""
        batcher = self._batcher(params) if plain else self.analytics
        job = Job(len(encs), params=params, is_disconnected=is_disconnected, trace=tracing.current())
        holes = holes or [()] * len(encs)
        ablations = ablations or [None] * len(encs)
        if (any(holes) or any(ablations)) and "analysis" not in self.batchers:
            raise self._no_analysis("masking a position inside an input or removing heads needs")
        entries = [Entry(job, i, e.ids, e.type_ids, e, h, a)
                   for i, (e, h, a) in enumerate(zip(encs, holes, ablations, strict=True))]
        for e, h in zip(encs, holes, strict=True):
            if not h:
                self.series.input_tokens.observe(e.length)
        return await (self._answered(batcher, job, entries) if plain else batcher.submit(job, entries))

    def _no_analysis(self, what: str) -> Validation:
        if self.settings.analysis == "off":
            return Validation(f"this server does not look inside models (HEADWISE_ANALYSIS=off): {what} the "
                              "analysis graph")
        return Validation(f"model {self.name!r} has no analysis variant, which {what} ({REEXPORT})")

    def _all_batchers(self) -> list[Batcher]:
        """Analytics first: they may borrow the embed batcher's thread, which closing it ends."""
        return [*([self.analytics] if self.analytics else []), *self.batchers.values()]

    def abort(self, exc: Exception) -> None:
        for b in self._all_batchers():
            b.abort(exc)

    async def close(self, timeout: float) -> None:
        for b in self._all_batchers():
            await b.close(timeout)

    # -- runs on the batcher's inference thread ---------------------------------------------
    def run(self, role: str, entries: list[Entry], padded: int, outputs: list[str], record: bool,
            spans: list = ()) -> tuple[dict, float]:
        """One backend run of a batch, timed and counted per variant when `record` → (its
        outputs, when the run began); `spans`: the batch's spans, when traced."""
        feeds = batch_feeds(self.package, entries, padded, role)
        if self.settings.fault_injection and record:
            inject_fault(entries)
        t0 = time.perf_counter()
        out = traced.run(self.backend, role, feeds, outputs, spans)
        if record:
            self._counted(role, entries, padded, t0)
        return out, t0

    def _counted(self, role: str, entries: list[Entry], padded: int, t0: float) -> None:
        inference, size, tokens = self.series.batch(metric_variant(self.backend.variants, role))
        inference.observe(time.perf_counter() - t0)
        size.observe(len(entries))
        tokens.observe(len(entries) * padded)

    def f16_attention(self, role: str, spec: AttentionSpec | None) -> bool:
        """Whether a dense float16 answer reads the graph's own float16 weights (half the bytes
        off the device, no cast here); others, aggregates among them, read the float32 ones."""
        return (role in LOOK_INSIDE and self._f16_attention and spec is not None
                and spec.dtype == "float16" and spec.format == "dense" and spec.aggregate == "none")

    def _attention_outputs(self, role: str, entries: list[Entry]) -> tuple[list[bool], list[str]]:
        """Per entry whether it reads the float16 weights (`_weights`), and the attention
        outputs the batch needs."""
        f16 = [self.f16_attention(role, e.job.params.attention) for e in entries]
        outputs = []
        if any(f16):
            outputs.append("attentions_f16")
        if role in LOOK_INSIDE and not all(f16):
            outputs.append("attentions")
        return f16, outputs

    @staticmethod
    def _weights(out: dict, f16: list[bool], i: int) -> np.ndarray:
        """Entry i's padded [L, H, T, T] weights among a batch's outputs (_attention_outputs)."""
        return out["attentions_f16" if f16[i] else "attentions"][i]

    def run_batch(self, role: str, entries: list[Entry], padded: int, record: bool = True) -> list:
        """Each entry's answer, as the head cuts it from the batch's outputs (an analytics batch
        with holes on the analysis graph: run_encoded)."""
        t0 = time.perf_counter()
        role, f16, outputs = self._graph(role, entries)
        with traced.batch_spans(entries if record else [], padded, role, t0) as spans:
            out, t1 = self.run(role, entries, padded, outputs, record, spans)
            return self._answers(entries, out, f16, record, t0, t1)

    async def run_batch_async(self, role: str, entries: list[Entry], padded: int, batcher: Batcher) -> list:
        """run_batch with the backend's run awaited on the loop (process mode's RemoteBackend),
        telling the engine which rows' clients have gone while the run waits there."""
        t0 = time.perf_counter()
        role, f16, outputs = self._graph(role, entries)
        feeds = batch_feeds(self.package, entries, padded, role)
        if self.settings.fault_injection:  # a hang must not hold the loop
            await asyncio.get_running_loop().run_in_executor(None, inject_fault, entries)

        async def gone() -> set[int]:
            await batcher.disconnected([e.job for e in entries if not e.job.done])
            return {i for i, e in enumerate(entries) if e.job.done}

        t1 = time.perf_counter()
        with traced.batch_spans(entries, padded, role, t0) as spans:
            out = await traced.run_async(self.backend, role, feeds, outputs, gone, spans)
            self._counted(role, entries, padded, t1)
            return self._answers(entries, out, f16, True, t0, t1)

    def _graph(self, role: str, entries: list[Entry]) -> tuple[str, list[bool], list[str]]:
        """The role a batch runs on, whether each entry reads float16 weights, the outputs."""
        if role in ("analytics", "embed") and any(e.holes or e.ablate is not None for e in entries):
            role = "analysis"
        f16, attention = self._attention_outputs(role, entries)
        return role, f16, self.head.outputs(entries) + attention

    def _answers(self, entries: list[Entry], out: dict, f16: list[bool], record: bool, t0: float, t1: float) -> list:
        head = self.head
        t2 = time.perf_counter()
        answers = [head.answer(out, i, e, self._weights(out, f16, i) if e.job.params.attention is not None else None)
                   for i, e in enumerate(entries)]
        if record:
            self._timed(entries, t1 - t0, t2 - t1, time.perf_counter() - t2)
        return answers

    def _timed(self, entries: list[Entry], feeds: float, infer: float, output: float) -> None:
        """A batch's phases, for each of its requests (service.engine.stats) and the model's."""
        tokenize = 0.0  # the batch's own: its requests' encode (they share one, or a few)
        for job in dict.fromkeys(e.job for e in entries):
            t = job.timing
            t.feeds += feeds
            t.infer += infer
            t.output += output
            tokenize = max(tokenize, t.tokenize)
        self.stats.batch(len(entries), tokenize + feeds, infer, output)

    def prepare(self, jobs: list[Job]) -> list[Outcome]:
        """Batch-encode every waiting job (inference thread) → per job its entries, or the
        client error that ends it: 422 over max_len without truncation, 413 over the budget."""
        head = self.head
        out: list = [None] * len(jobs)
        for i, job in enumerate(jobs):
            if head.pretokenised(job.inputs):
                out[i] = self._entries_or_error(job, lambda j=job: self.tokenizer.from_ids(j.inputs))
        # Read per truncation (its length, special tokens) and per whether token strings are
        # answered: without them, the tokenizer's fast read (no offsets; the same ids).
        reads: dict[Read, list[int]] = {}
        for i, job in enumerate(jobs):
            if out[i] is None:
                reads.setdefault(Read.of(job.params), []).append(i)
        for read, group in reads.items():
            texts = [t for i in group for t in jobs[i].inputs]
            t0 = time.perf_counter()
            encs = head.encode(self.tokenizer, texts, read)
            took = time.perf_counter() - t0
            self.series.tokenize.observe(took)
            at = 0
            if tracing.ON:
                traced.tokenised([jobs[i] for i in group], t0, took)
            for i in group:
                job = jobs[i]
                job.timing.tokenize += took
                mine = encs[at:at + job.size]
                at += job.size
                out[i] = self._entries_or_error(job, lambda m=mine: m)
        return out

    def _entries_or_error(self, job: Job, encodings: Callable[[], list[Encoded]]) -> Outcome:
        """The job's entries, or the error that ends it alone (the batch goes on)."""
        try:
            return self.entries(job, encodings())
        except Exception as e:
            return unlinked(e)

    def entries(self, job: Job, encs: list[Encoded]) -> list[Entry]:
        """Checks a job's inputs and answer against the limits, and counts its answer's bound once."""
        self.tokenizer.check(encs, job.inputs_field, job.params.truncate, self.head.cut, job.params.max_tokens, run=True)
        params = job.params
        if params.attention is not None:
            need, what = self.head.attention_need(params, encs)
            budget = self.settings.attention_budget_bytes
            if need > budget:
                raise TooLarge(f"{what} is {need} bytes, over the budget of {budget}; ask for fewer layers, "
                               "heads or inputs" + (", or inputs of similar length" if params.padded_attention else ""))
        job.answer_bytes = self.measure.check(self.head.answer_size(params, encs), self.settings.max_response_bytes,
                                              TOO_LARGE)
        hist = self.series.input_tokens
        for e in encs:
            hist.observe(e.length)
            if params.token_strings:
                e.materialize()
        return [Entry(job, i, e.ids, e.type_ids, e) for i, e in enumerate(encs)]

    # -- start-up -------------------------------------------------------------------------
    def load(self, factory: BackendFactory) -> None:
        self.backend = factory(self.package, self.settings)
        self.metrics.model_info.labels(model=self.name, version=self.package.version,
                                       provider=self.backend.provider,
                                       precision=self.backend.precision).set(1)

    def warm_up(self) -> None:
        """Run every length bucket through every variant once, so no client pays for it. On
        CUDA at the largest batch the batcher can form for that length, so that the memory
        arena has grown to its working size before the first client arrives."""
        enc = self.tokenizer.encode(["warm up " * self.package.max_len])[0]
        lazy = getattr(self.backend, "lazy", list)()
        graphs = set()  # attention and analysis share one session: warmed once
        for role, variant in self.backend.variants.items():
            if role in lazy or (variant, role == "analytics") in graphs:
                continue
            graphs.add((variant, role == "analytics"))
            params = self.head.warm_params(self.attention_spec(None, None) if role == "attention" else None)
            for n in self.buckets:
                rows = self.limits(role).max_rows(n) if self.backend.provider == "cuda" else 1
                job = Job(rows, params=params)
                entries = [Entry(job, i, enc.ids[:n], np.zeros(n, np.int64), enc) for i in range(rows)]
                self.run_batch(role, entries, n, record=False)

    def limits(self, role: str) -> Limits:
        """The batch limits of `role`'s batcher (warm-up on CUDA runs their largest batches)."""
        s, pkg = self.settings, self.package
        cell = pkg.n_layers * pkg.n_heads * 4  # fp32 attention bytes per T² per input
        on_cpu = self.backend.provider != "cuda"
        batch_tokens = (min(s.max_batch_tokens, s.cpu_max_batch_tokens)
                        if on_cpu and s.cpu_max_batch_tokens else s.max_batch_tokens)
        if role == "analytics":  # small batches, no waiting for more: plain work goes between two
            return Limits(min(batch_tokens, s.analytics_batch_tokens), s.max_batch_size, 0.0, s.max_queue)
        attention = role in LOOK_INSIDE
        return Limits(batch_tokens, s.max_batch_size, s.max_wait_ms / 1000, s.max_queue,
                      cell if attention else 0, s.attention_budget_bytes if attention else 0)

    def start(self) -> None:
        on_cpu = self.backend.provider != "cuda"
        variants = self.backend.variants
        for role in variants:
            if role == "analytics":
                continue
            batcher = Batcher(self.limits(role), self.buckets,
                              QueueHooks(self.metrics, self.name, metric_variant(variants, role)),
                              pad_to_bucket=not on_cpu, overlap=overlap(self.settings.pipeline, self.backend))
            batcher.shared = shared_queue(self.backend, role)
            light = role == "embed" and isinstance(self.head, EmbeddingHead)  # no look inside: small answers
            batcher.start(self.lane.serve(role, batcher, light),
                          self.lane.tokenise(batcher, light) if batcher.overlap else None)
            self.batchers[role] = batcher
        # Analytics give way to every plain batcher between two of their batches. With a session
        # of their own (CPU) they run on a thread of the lowest priority beside plain work, which
        # the scheduler preempts for it; without (CUDA, or HEADWISE_ANALYTICS_THREADS=0) they run
        # on the embed batcher's thread, between its batches.
        role = "analytics" if "analytics" in variants else "embed"
        shared = None if role == "analytics" else self.batchers["embed"].executor
        self.analytics = Batcher(self.limits("analytics"), self.buckets,
                                 QueueHooks(self.metrics, self.name, variants[role], priority="analytics"),
                                 pad_to_bucket=not on_cpu, executor=shared, niceness=ANALYTICS_NICENESS,
                                 yield_to=list(self.batchers.values()))
        self.analytics.shared = shared_queue(self.backend, "analytics")
        self.analytics.start(self.lane.serve(role, self.analytics))
