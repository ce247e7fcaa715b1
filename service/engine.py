"""The engine: loaded models, their tokenizers, backends and queues (docs/architecture.md).

Routers call `Engine.embed` / `Engine.tokenize`; those raise service.errors exceptions for
client mistakes and never touch HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service.backend import Backend, OrtBackend, check_precision
from service.batching import Batcher, Entry, Job, Limits, length_buckets
from service.budget import ResponseBudget
from service.errors import APIError, InvalidRequest, NotFound, NotReady, TooLarge, Validation
from service.generation import GenerativeRuntime
from service.metrics import Metrics, ModelSeries, QueueHooks
from service.package import ModelPackage, find_packages, variant_facts
from service.postprocess import AttentionSpec, EmbedParams, attention_payload, pool, response_bytes
from service.resources import lower_thread_priority
from service.settings import Settings
from service.tokenizer import Encoded, TextTokenizer

log = logging.getLogger("headwise.service")

BackendFactory = Callable[[ModelPackage, Settings], Backend]


FAULT = "__headwise_fault__:"  # HEADWISE_FAULT_INJECTION=true only (tests): ...:error, ...:hang=SECONDS


def inject_fault(entries: list[Entry]) -> None:
    """Test-only hook, off unless settings.fault_injection: an input `__headwise_fault__:error`
    makes this batch's inference raise; `__headwise_fault__:hang=S` makes it block S seconds."""
    for e in entries:
        inputs = e.job.inputs
        text = inputs[e.index] if isinstance(inputs, list) and e.index < len(inputs) else ""
        if isinstance(text, str) and text.startswith(FAULT):
            what = text[len(FAULT):]
            if what.startswith("hang="):
                time.sleep(float(what[5:]))
            else:
                raise RuntimeError("injected backend fault")


def _token_ids(inputs) -> bool:
    """Pre-tokenised inputs (lists of ids, e.g. OpenAI's token-array input) rather than texts."""
    return bool(inputs) and not isinstance(inputs[0], str)


class ModelRuntime:
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
        self.batchers: dict[str, Batcher] = {}
        self.ready = False

    @property
    def name(self) -> str:
        return self.package.name

    def info(self) -> dict:
        p = self.package
        b = self.backend
        return {
            "name": p.name, "version": p.version, "family": p.family, "architecture": p.architecture,
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

    def attention_spec(self, layers, heads, format, top_k, dtype, encoding) -> AttentionSpec:
        p = self.package
        for what, sel, n in (("layers", layers, p.n_layers), ("heads", heads, p.n_heads)):
            if sel is not None:
                bad = [i for i in sel if not 0 <= i < n]
                if bad or not sel:
                    raise Validation(f"attention.{what}: each must be in 0..{n - 1} and the list non-empty")
        return AttentionSpec(
            layers=tuple(layers) if layers is not None else tuple(range(p.n_layers)),
            heads=tuple(heads) if heads is not None else tuple(range(p.n_heads)),
            all_layers=layers is None, all_heads=heads is None,
            format=format, top_k=top_k, dtype=dtype, encoding=encoding,
        )

    # -- runs on the batcher's inference thread ---------------------------------------------
    def run_batch(self, role: str, entries: list[Entry], padded: int, record: bool = True) -> list:
        pkg = self.package
        b = len(entries)
        ids = np.full((b, padded), pkg.pad_id, dtype=np.int64)
        mask = np.zeros((b, padded), dtype=np.int64)
        types = np.zeros((b, padded), dtype=np.int64)
        for i, e in enumerate(entries):
            n = e.length
            ids[i, :n] = e.ids
            mask[i, :n] = 1
            types[i, :n] = e.type_ids
        pooled = [self._use_pooled(e.job.params) for e in entries]
        outputs = []
        if any(pooled):
            outputs.append("sentence_embedding")
        if not all(pooled):
            outputs.append("last_hidden_state")
        # A dense float16 answer reads the graph's own float16 weights where the package has
        # them (half the bytes off the device, no cast here); others read the float32 ones.
        f16 = [role == "attention" and self._f16_attention and e.job.params.attention is not None
               and e.job.params.attention.dtype == "float16" and e.job.params.attention.format == "dense"
               for e in entries]
        if any(f16):
            outputs.append("attentions_f16")
        if role == "attention" and not all(f16):
            outputs.append("attentions")
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        if self.settings.fault_injection and record:
            inject_fault(entries)
        t0 = time.perf_counter()
        out = self.backend.run(role, feeds, outputs)
        if record:
            inference, size, tokens = self.series.batch(self.backend.variants[role])
            inference.observe(time.perf_counter() - t0)
            size.observe(b)
            tokens.observe(b * padded)
        results = []
        for i, e in enumerate(entries):
            p: EmbedParams = e.job.params
            t = e.length
            if p.output == "tokens":
                emb = np.ascontiguousarray(out["last_hidden_state"][i, :t])
            elif pooled[i]:
                emb = out["sentence_embedding"][i]
            else:
                emb = pool(out["last_hidden_state"][i, :t], pkg.pooling, p.normalize)
            att = (attention_payload(out["attentions_f16" if f16[i] else "attentions"][i], t, p.attention)
                   if p.attention else None)
            results.append((emb, att))
        return results

    def prepare(self, jobs: list[Job]) -> list:
        """Batch-encode every waiting job (inference thread) → per job its entries, or the
        client error that ends it: 422 over max_len without truncation, 413 over the budget."""
        out: list = [None] * len(jobs)
        for i, job in enumerate(jobs):
            if _token_ids(job.inputs):
                try:
                    out[i] = self._entries(job, self.tokenizer.from_ids(job.inputs))
                except Exception as e:
                    out[i] = _unlinked(e)
        for truncate in (True, False):
            group = [i for i, j in enumerate(jobs) if j.params.truncate is truncate and out[i] is None]
            if not group:
                continue
            texts = [t for i in group for t in jobs[i].inputs]
            t0 = time.perf_counter()
            encs = self.tokenizer.encode_unchecked(texts, truncate)
            self.series.tokenize.observe(time.perf_counter() - t0)
            at = 0
            for i in group:
                job = jobs[i]
                mine = encs[at:at + job.size]
                at += job.size
                try:
                    out[i] = self._entries(job, mine)
                except Exception as e:
                    out[i] = _unlinked(e)
        return out

    def _entries(self, job: Job, encs: list[Encoded]) -> list[Entry]:
        self.tokenizer.check(encs)
        spec = job.params.attention
        if spec is not None:
            need = sum(spec.nbytes(e.length) for e in encs)
            budget = self.settings.attention_budget_bytes
            if need > budget:
                raise TooLarge(f"asked-for attention is {need} bytes, over the budget of {budget}; "
                               "ask for fewer layers, heads or inputs")
        answer = sum(response_bytes(job.params, e.length, self.package.d_model) for e in encs)
        if answer > self.settings.max_response_bytes:
            raise TooLarge(f"the response asked for takes up to {answer} bytes, over HEADWISE_MAX_RESPONSE_BYTES "
                           f"({self.settings.max_response_bytes}); ask for fewer inputs, layers or heads, "
                           "top-k or base64 attention, or sentence embeddings")
        hist = self.series.input_tokens
        for e in encs:
            hist.observe(e.length)
        job.prepared = encs
        return [Entry(job, i, e.ids, e.type_ids) for i, e in enumerate(encs)]

    def _use_pooled(self, p: EmbedParams) -> bool:
        return p.output == "sentence" and p.normalize == self.package.normalize

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
        ids = self.tokenizer.encode(["warm up " * self.package.max_len])[0].ids
        for role in self.backend.variants:
            params = EmbedParams(output="tokens", attention=(
                self.attention_spec(None, None, "dense", 1, "float32", "json") if role == "attention" else None))
            for n in self.buckets:
                rows = self.warm_up_rows(role, n) if self.backend.provider == "cuda" else 1
                job = Job(rows, params=params)
                entries = [Entry(job, i, ids[:n], np.zeros(n, np.int64)) for i in range(rows)]
                self.run_batch(role, entries, n, record=False)

    def warm_up_rows(self, role: str, padded: int) -> int:
        """The most inputs of `padded` tokens one batch of `role` may hold (start()'s limits)."""
        s, pkg = self.settings, self.package
        rows = max(1, min(s.max_batch_size, s.max_batch_tokens // padded))
        if role == "attention":
            cell = pkg.n_layers * pkg.n_heads * 4 * padded * padded
            rows = max(1, min(rows, s.attention_budget_bytes // cell))
        return rows

    def start(self) -> None:
        s, pkg = self.settings, self.package
        cell = pkg.n_layers * pkg.n_heads * 4  # fp32 attention bytes per T² per input
        on_cpu = self.backend.provider != "cuda"
        batch_tokens = (min(s.max_batch_tokens, s.cpu_max_batch_tokens)
                        if on_cpu and s.cpu_max_batch_tokens else s.max_batch_tokens)

        for role, variant in self.backend.variants.items():
            fits = None
            if role == "attention":
                def fits(count, padded, cell=cell):
                    return count * cell * padded * padded <= s.attention_budget_bytes
            limits = Limits(batch_tokens, s.max_batch_size, s.max_wait_ms / 1000, s.max_queue, fits)

            def run(entries, padded, role=role):
                return self.run_batch(role, entries, padded)

            batcher = Batcher(run, limits, self.buckets, QueueHooks(self.metrics, pkg.name, variant),
                              prepare=self.prepare, pad_to_bucket=not on_cpu)
            batcher.start()
            self.batchers[role] = batcher


def _unlinked(e: Exception) -> Exception:
    """A client error without its traceback: the traceback's frames lead back (f_back) to the
    frame that stores the error in `out`, a cycle that kept the refused job's tokens (hundreds
    of MB for a large request refused for length) alive until a full garbage collection.
    Other errors keep theirs, for the log."""
    return e.with_traceback(None) if isinstance(e, APIError) else e


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics, backend_factory: BackendFactory | None = None):
        self.settings = settings
        self.metrics = metrics
        self.responses = ResponseBudget(settings.max_inflight_response_bytes, metrics.response_bytes)
        self.backend_factory = backend_factory or OrtBackend
        self.models: dict[str, ModelRuntime] = {}
        self.ready = False
        self.draining = False
        self.failed: str | None = None
        self._tok_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="headwise-tok")

    def load_packages(self) -> None:
        """Read and verify every package (hashes included); raises PackageError."""
        packages = find_packages(self.settings.models_dir)
        check_precision(packages, self.settings.precision, self.settings.provider)
        for pkg in packages:
            cls = GenerativeRuntime if pkg.generative else ModelRuntime
            self.models[pkg.name] = cls(pkg, self.settings, self.metrics)

    def prepare(self) -> None:
        """Create sessions and warm up (blocking: run it off the event loop), on a thread of
        lower priority whose onnxruntime pools inherit it (see lower_thread_priority)."""
        with ThreadPoolExecutor(max_workers=1, initializer=lower_thread_priority) as pool:
            pool.submit(self._prepare).result()

    def _prepare(self) -> None:
        for rt in self.models.values():
            rt.load(self.backend_factory)
            t0 = time.perf_counter()
            rt.warm_up()
            log.info("model %s warmed up in %.2fs", rt.name, time.perf_counter() - t0)

    def start(self) -> None:
        for rt in self.models.values():
            rt.start()
            rt.ready = True
        self.ready = True

    def abort(self) -> None:
        """Grace period over: every request still waiting gets 503 now."""
        for rt in self.models.values():
            for b in rt.batchers.values():
                b.abort(NotReady("server shutting down; the grace period is over"))

    async def close(self, timeout: float = 5.0) -> None:
        self.ready = False
        for rt in self.models.values():
            for b in rt.batchers.values():
                await b.close(timeout)
        self._tok_pool.shutdown(wait=False, cancel_futures=True)

    # -- used by routers -------------------------------------------------------------------
    def get(self, name: str | None) -> ModelRuntime:
        if name is None:
            if len(self.models) == 1:
                return next(iter(self.models.values()))
            raise Validation(f"several models are served ({', '.join(sorted(self.models))}); name one in 'model'")
        rt = self.models.get(name)
        if rt is None:
            raise NotFound(f"no model by that name; served: {', '.join(sorted(self.models))}")
        return rt

    def _check(self, texts: list[str]) -> None:
        if not texts:
            raise InvalidRequest("'inputs' is empty")
        if len(texts) > self.settings.max_client_batch:
            raise TooLarge(f"{len(texts)} inputs; at most {self.settings.max_client_batch} per request")
        cap = self.settings.max_input_chars
        for i, t in enumerate(texts):  # before any tokenisation: a huge string costs a len()
            if isinstance(t, str) and len(t) > cap:
                raise TooLarge(f"inputs[{i}] has {len(t)} characters; at most {cap} per input")
        if not self.ready or self.draining:
            raise NotReady("the server is draining" if self.draining else "model not loaded or warming up")

    async def _encode(self, rt: ModelRuntime, texts: list[str], truncate: bool) -> list[Encoded]:
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        encs = await loop.run_in_executor(self._tok_pool, rt.tokenizer.encode, texts, truncate)
        self.metrics.tokenize_duration.labels(model=rt.name).observe(time.perf_counter() - t0)
        return encs

    async def tokenize(self, rt: ModelRuntime, texts: list[str], truncate: bool) -> list[Encoded]:
        self._check(texts)
        return await self._encode(rt, texts, truncate)

    async def embed(self, rt: ModelRuntime, texts: list[str], params: EmbedParams,
                    is_disconnected: Callable[[], Awaitable[bool]] | None = None):
        """→ (encodings, [(embedding, attention payload | None)] per input). Tokenised on the
        batcher's thread together with whatever else is waiting. `texts` may be token-id lists
        instead, used as they are (no special tokens added)."""
        self._check(texts)
        if isinstance(rt, GenerativeRuntime):
            raise Validation(rt.not_an_encoder())
        if _token_ids(texts):
            rt.tokenizer.check_ids(texts)
        role = "attention" if params.attention is not None else "embed"
        batcher = rt.batchers.get(role)
        if batcher is None:
            raise Validation(f"model {rt.name!r} has no attention variant")
        job = Job(len(texts), inputs=texts, params=params, is_disconnected=is_disconnected)
        results = await batcher.submit(job)
        encs = job.prepared
        if params.attention is not None:
            rt.series.attention_bytes.inc(
                sum(params.attention.returned_bytes(e.length) for e in encs))
        return encs, results
