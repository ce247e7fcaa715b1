"""A served encoder model: its tokenizer, backend and one batcher per variant; it turns a
batch of tokenised inputs into per-input results on the batcher's inference thread."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np

from headwise.service.backends.onnxruntime import Backend
from headwise.service.cpu import ANALYTICS_NICENESS
from headwise.service.engine.batching import Batcher, Done, Entry, Job, Limits, Work, length_buckets
from headwise.service.engine.faults import inject_fault, unlinked
from headwise.service.engine.outputs import attention_payload, pool
from headwise.service.engine.params import (
    AttentionSpec,
    Embedded,
    EmbedParams,
    EmbedResult,
    RequestParams,
    response_bytes,
)
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.errors import TooLarge, Validation
from headwise.service.metrics import Metrics, ModelSeries, QueueHooks
from headwise.service.package import ModelPackage, variant_facts
from headwise.service.settings import Settings

log = logging.getLogger("headwise.service")

BackendFactory = Callable[[ModelPackage, Settings], Backend]


def token_ids(inputs) -> bool:
    """Pre-tokenised inputs (lists of ids, e.g. OpenAI's token-array input) rather than texts."""
    return bool(inputs) and not isinstance(inputs[0], str)


class EncoderRuntime:
    def __init__(self, package: ModelPackage, settings: Settings, metrics: Metrics):
        self.package = package
        self.settings = settings
        self.metrics = metrics
        self.series = ModelSeries(metrics, package.name)
        self.tokenizer = TextTokenizer(package.tokenizer_file, package.max_len)
        self.buckets = length_buckets(package.max_len)
        att = package.variants.get("attention")
        self._f16_attention = att is not None and "attentions_f16" in att.outputs  # packages since 2026-11
        self.backend: Backend | None = None
        self.batchers: dict[str, Batcher] = {}  # plain work: role → its batcher
        self.analytics: Batcher | None = None  # analytics rows (run_encoded), after plain work
        self.ready = False

    @property
    def name(self) -> str:
        return self.package.name

    def info(self) -> dict:
        p = self.package
        b = self.backend
        return {
            "name": p.name, "version": p.version, "family": p.family, "architecture": p.architecture,
            "task": p.task, **({"labels": list(p.labels)} if p.task == "classification" else {}),
            "n_layers": p.n_layers, "n_heads": p.n_heads, "d_model": p.d_model, "max_len": p.max_len,
            "pooling": p.pooling, "normalize": p.normalize,
            "provider": b.provider if b else None, "precision": b.precision if b else None,
            "variants": {name: {"precision": v.precision, "outputs": list(v.outputs),
                                "serving": b is not None and name in b.variants.values(),
                                **variant_facts(p.manifest, name)}
                         for name, v in p.variants.items()},
            "attention": b is not None and "attention" in b.variants,
            "ready": self.ready,
        }

    def attention_spec(self, layers, heads, **how) -> AttentionSpec:
        """Raises Validation for indices out of range."""
        return AttentionSpec.select(self.package.n_layers, self.package.n_heads, layers, heads, **how)

    # -- the operations (event loop) ------------------------------------------------------------
    def check_embeddings(self) -> None:
        """Raises Validation, naming the routes that serve this model, unless it answers sentence
        embeddings (embed, run_encoded: /v1/embed, /v1/similarity, /v1/occlusion); an encoder does."""

    async def embed(self, inputs: list, params: EmbedParams,
                    is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> EmbedResult:
        """Tokenised on the batcher's thread together with whatever else is waiting. `inputs`
        may be token-id lists instead of texts, used as they are (no special tokens added)."""
        if token_ids(inputs):
            self.tokenizer.check_ids(inputs)
        data: list[Embedded] = await self._submit(inputs, params, is_disconnected, "inputs")
        return EmbedResult(self.name, self.package.version, data)

    async def _submit(self, inputs: list, params: RequestParams, is_disconnected: Callable[[], Awaitable[bool]] | None,
                      field: str) -> list:
        """One job of `inputs` (the request's `field`) through the batcher `params` ask for (the
        attention variant's when they ask for attention), tokenised on its thread; counts the
        attention returned."""
        role = "attention" if params.attention is not None else "embed"
        batcher = self.batchers.get(role)
        if batcher is None:
            raise Validation(f"model {self.name!r} has no attention variant")
        data = await batcher.submit(Job(len(inputs), inputs=inputs, params=params, inputs_field=field,
                                        is_disconnected=is_disconnected))
        spec = params.attention
        if spec is not None:
            self.series.attention_bytes.inc(sum(self.returned_bytes(spec, d.encoding) for d in data))
            if spec.aggregate != "none":
                self.series.aggregate(spec.aggregate).inc()
        return data

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        """Attention bytes one input's answer returns (headwise_attention_bytes_total)."""
        return spec.returned_bytes(enc.length)

    async def run_encoded(self, encs: list[Encoded], params: EmbedParams, holes: list[int] | None = None,
                          is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> list[Embedded]:
        """Analytics rows: already tokenised inputs through the analytics batcher (the served
        fast graph, after plain work), one entry each; `holes[i]` ≥ 0 masks that position of
        input i out (attention_mask 0). The caller has checked max_len and the response bound,
        and admitted the rows' tokens."""
        batcher = self.analytics
        job = Job(len(encs), params=params, is_disconnected=is_disconnected)
        holes = holes or [-1] * len(encs)
        entries = [Entry(job, i, e.ids, e.type_ids, e, h) for i, (e, h) in enumerate(zip(encs, holes, strict=True))]
        for e, h in zip(encs, holes, strict=True):
            if h < 0:
                self.series.input_tokens.observe(e.length)
        return await batcher.submit(job, entries)

    async def generate(self, ask, budget):
        raise Validation(f"model {self.name!r} is an encoder model: use POST /v1/embed; /v1/generate "
                         "serves decoder and encoder-decoder models")

    async def classify(self, inputs, params, is_disconnected=None, field="inputs"):
        raise Validation(f"model {self.name!r} is an embedding model: use POST /v1/embed; /v1/rerank and "
                         "/v1/predict serve classification packages (cross-encoders, classifiers)")

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
    def feeds(self, entries: list[Entry], padded: int) -> dict[str, np.ndarray]:
        """The graph's inputs for a batch: ids right-padded with pad_id, mask 1 on real tokens."""
        b = len(entries)
        ids = np.full((b, padded), self.package.pad_id, dtype=np.int64)
        mask = np.zeros((b, padded), dtype=np.int64)
        types = np.zeros((b, padded), dtype=np.int64)
        for i, e in enumerate(entries):
            n = e.length
            ids[i, :n] = e.ids
            mask[i, :n] = 1
            if e.hole >= 0:
                mask[i, e.hole] = 0
            types[i, :n] = e.type_ids
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}

    def run(self, role: str, entries: list[Entry], padded: int, outputs: list[str], record: bool) -> dict:
        """One backend run of a batch, timed and counted per variant when `record`."""
        feeds = self.feeds(entries, padded)
        if self.settings.fault_injection and record:
            inject_fault(entries)
        t0 = time.perf_counter()
        out = self.backend.run(role, feeds, outputs)
        if record:
            inference, size, tokens = self.series.batch(self.backend.variants[role])
            inference.observe(time.perf_counter() - t0)
            size.observe(len(entries))
            tokens.observe(len(entries) * padded)
        return out

    def f16_attention(self, role: str, spec: AttentionSpec | None) -> bool:
        """Whether a dense float16 answer reads the graph's own float16 weights (half the bytes
        off the device, no cast here); others, aggregates among them, read the float32 ones."""
        return (role == "attention" and self._f16_attention and spec is not None
                and spec.dtype == "float16" and spec.format == "dense" and spec.aggregate == "none")

    def _attention_outputs(self, role: str, entries: list[Entry]) -> tuple[list[bool], list[str]]:
        """Per entry whether it reads the float16 weights (`_weights`), and the attention
        outputs the batch needs."""
        f16 = [self.f16_attention(role, e.job.params.attention) for e in entries]
        outputs = []
        if any(f16):
            outputs.append("attentions_f16")
        if role == "attention" and not all(f16):
            outputs.append("attentions")
        return f16, outputs

    @staticmethod
    def _weights(out: dict, f16: list[bool], i: int) -> np.ndarray:
        """Entry i's padded [L, H, T, T] weights among a batch's outputs (_attention_outputs)."""
        return out["attentions_f16" if f16[i] else "attentions"][i]

    def run_batch(self, role: str, entries: list[Entry], padded: int, record: bool = True) -> list:
        pkg = self.package
        pooled = [self._use_pooled(e.job.params) for e in entries]
        outputs = []
        if any(pooled):
            outputs.append("sentence_embedding")
        if any(e.job.params.tokens or (e.job.params.sentence and not p) for e, p in zip(entries, pooled, strict=True)):
            outputs.append("last_hidden_state")
        f16, attention = self._attention_outputs(role, entries)
        out = self.run(role, entries, padded, outputs + attention, record)
        results = []
        for i, e in enumerate(entries):
            p: EmbedParams = e.job.params
            t = e.length
            tokens = np.ascontiguousarray(out["last_hidden_state"][i, :t]) if p.tokens else None
            sentence = None
            if pooled[i]:
                sentence = out["sentence_embedding"][i]
            elif p.sentence:
                hidden = out["last_hidden_state"][i, :t]
                if e.hole >= 0 and pkg.pooling == "mean":  # as the graph's pooling: real positions only
                    hidden = np.delete(hidden, e.hole, axis=0)
                sentence = pool(hidden, pkg.pooling, p.normalize)
            att = attention_payload(self._weights(out, f16, i), t, p.attention) if p.attention else None
            results.append(Embedded(e.encoding, sentence, tokens, att))
        return results

    def prepare(self, jobs: list[Job]) -> list:
        """Batch-encode every waiting job (inference thread) → per job its entries, or the
        client error that ends it: 422 over max_len without truncation, 413 over the budget."""
        out: list = [None] * len(jobs)
        for i, job in enumerate(jobs):
            if self.pretokenised(job.inputs):
                try:
                    out[i] = self._entries(job, self.tokenizer.from_ids(job.inputs))
                except Exception as e:
                    out[i] = unlinked(e)
        for truncate in (True, False):
            group = [i for i, j in enumerate(jobs) if j.params.truncate is truncate and out[i] is None]
            if not group:
                continue
            texts = [t for i in group for t in jobs[i].inputs]
            t0 = time.perf_counter()
            encs = self.encode_inputs(texts, truncate)
            self.series.tokenize.observe(time.perf_counter() - t0)
            at = 0
            for i in group:
                job = jobs[i]
                mine = encs[at:at + job.size]
                at += job.size
                try:
                    out[i] = self._entries(job, mine)
                except Exception as e:
                    out[i] = unlinked(e)
        return out

    def pretokenised(self, inputs) -> bool:
        return token_ids(inputs)

    def encode_inputs(self, inputs: list, truncate: bool) -> list[Encoded]:
        """A group of waiting inputs, tokenised together (unchecked); strings and offsets are
        built by `_entries` for the jobs whose answer carries them."""
        return self.tokenizer.encode_unchecked(inputs, truncate, lazy=True)

    def attention_need(self, job: Job, encs: list[Encoded]) -> tuple[int, str]:
        """(bytes the attention budget counts for this job, what they are, for the message)."""
        params: RequestParams = job.params
        spec = params.attention
        if params.padded_attention:
            return len(encs) * spec.nbytes(max(e.length for e in encs)), "the padded attention tensor"
        return sum(spec.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_bytes(self, job: Job, encs: list[Encoded]) -> int:
        """An upper bound of this job's answer as serialised (HEADWISE_MAX_RESPONSE_BYTES)."""
        return sum(response_bytes(job.params, e.length, self.package.d_model) for e in encs)

    def _entries(self, job: Job, encs: list[Encoded]) -> list[Entry]:
        self.tokenizer.check(encs, job.inputs_field)
        params: RequestParams = job.params
        if params.attention is not None:
            need, what = self.attention_need(job, encs)
            budget = self.settings.attention_budget_bytes
            if need > budget:
                raise TooLarge(f"{what} is {need} bytes, over the budget of {budget}; ask for fewer layers, "
                               "heads or inputs" + (", or inputs of similar length" if params.padded_attention else ""))
        answer = self.answer_bytes(job, encs)
        if answer > self.settings.max_response_bytes:
            raise TooLarge(f"the response asked for takes up to {answer} bytes, over HEADWISE_MAX_RESPONSE_BYTES "
                           f"({self.settings.max_response_bytes}); ask for fewer inputs, layers or heads, "
                           "top-k or base64 attention, or sentence embeddings")
        hist = self.series.input_tokens
        for e in encs:
            hist.observe(e.length)
            if params.token_strings:
                e.materialize()
        return [Entry(job, i, e.ids, e.type_ids, e) for i, e in enumerate(encs)]

    def _use_pooled(self, p: EmbedParams) -> bool:
        return p.sentence and p.normalize == self.package.normalize

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
        for role in self.backend.variants:
            params = self.warm_params(role)
            for n in self.buckets:
                rows = self.limits(role).max_rows(n) if self.backend.provider == "cuda" else 1
                job = Job(rows, params=params)
                entries = [Entry(job, i, enc.ids[:n], np.zeros(n, np.int64), enc) for i in range(rows)]
                self.run_batch(role, entries, n, record=False)

    def warm_params(self, role: str):
        """What warm-up asks of `role`: every output the variant has."""
        return EmbedParams(sentence=False, tokens=True, attention=(
            self.attention_spec(None, None) if role == "attention" else None))

    def limits(self, role: str) -> Limits:
        """The batch limits of `role`'s batcher (warm-up on CUDA runs their largest batches)."""
        s, pkg = self.settings, self.package
        cell = pkg.n_layers * pkg.n_heads * 4  # fp32 attention bytes per T² per input
        on_cpu = self.backend.provider != "cuda"
        batch_tokens = (min(s.max_batch_tokens, s.cpu_max_batch_tokens)
                        if on_cpu and s.cpu_max_batch_tokens else s.max_batch_tokens)
        if role == "analytics":  # small batches, no waiting for more: plain work goes between two
            return Limits(min(batch_tokens, s.analytics_batch_tokens), s.max_batch_size, 0.0, s.max_queue)
        attention = role == "attention"
        return Limits(batch_tokens, s.max_batch_size, s.max_wait_ms / 1000, s.max_queue,
                      cell if attention else 0, s.attention_budget_bytes if attention else 0)

    def overlap(self) -> bool:
        """Whether requests are tokenised beside a running batch (HEADWISE_PIPELINE; auto: on
        CUDA, where the device runs the batch and the host's cores would wait)."""
        mode = self.settings.pipeline
        return mode == "on" or (mode == "auto" and self.backend.provider == "cuda")

    def start(self) -> None:
        on_cpu = self.backend.provider != "cuda"
        variants = self.backend.variants
        for role, variant in variants.items():
            if role == "analytics":
                continue
            batcher = Batcher(self.limits(role), self.buckets, QueueHooks(self.metrics, self.name, variant),
                              pad_to_bucket=not on_cpu, overlap=self.overlap())
            batcher.start(self._serve(role, batcher), self._tokenise(batcher) if batcher.overlap else None)
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
        self.analytics.start(self._serve(role, self.analytics))

    async def _serve(self, role: str, batcher: Batcher) -> None:
        """This variant's loop: the batcher says what the next hop does, the hop runs on the
        batcher's inference thread, the batcher answers what it settled."""
        loop = asyncio.get_running_loop()
        while True:
            work = await batcher.next()
            try:
                done = await loop.run_in_executor(batcher.executor, self._hop, role, batcher, work)
            except Exception as e:  # the hop could not run (tokenising failed, the thread is gone)
                done = Done([e] * len(work.jobs), work.batch, e if work.batch else [])
            batcher.finish(work, done)

    async def _tokenise(self, batcher: Batcher) -> None:
        """Overlap: tokenise what arrives while a batch runs, on the batcher's tokenizer thread."""
        loop = asyncio.get_running_loop()
        while True:
            jobs = await batcher.next_to_tokenise()
            try:
                outcome = await loop.run_in_executor(batcher.tokenizer, self.prepare, jobs)
            except Exception as e:  # the thread is gone (shutting down): each job gets the error
                outcome = [e] * len(jobs)
            batcher.tokenised(jobs, outcome)

    def _hop(self, role: str, batcher: Batcher, work: Work) -> Done:
        """Inference thread: tokenise (and, when it all fits one batch, run at once), or run."""
        outcome, batch, padded = None, work.batch, work.padded
        if work.jobs:
            outcome = self.prepare(work.jobs)
            plan = batcher.plan(work, outcome) if work.run else None
            if plan is None:
                return Done(outcome, None, None)
            batch, padded = plan
            if not batch:
                return Done(outcome, [], [])
        try:
            return Done(outcome, batch, self.run_batch(role, batch, padded))
        except Exception as e:
            return Done(outcome, batch, e)
